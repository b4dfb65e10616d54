"""snapshot.take / restore on plain trees: links, copies across filesystems, symlinks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cudafix.env.statedir import TxDir
from cudafix.tx import restore, snapshot
from cudafix.tx.difference import Deviation, Difference, deviation_text, difference_text
from cudafix.tx.manifest import check_path
from scenarios.fingerprint import diff_fingerprints, fingerprint


def tree(root: Path) -> Path:
    (root / "lib/pkg/sub").mkdir(parents=True)
    (root / "lib/pkg/a.so").write_bytes(b"A" * 1000)
    (root / "lib/pkg/sub/b.py").write_text("b = 1\n")
    (root / "lib/pkg/sub/b.py").chmod(0o640)
    (root / "lib/pkg/link").symlink_to("/etc")
    return root


def test_hard_link_snapshot_and_restore(tmp_path: Path) -> None:
    prefix = tree(tmp_path / "env")
    tx = TxDir(prefix / ".cudafix/transactions/t1")
    before = fingerprint(prefix)
    manifest = snapshot.take(prefix, tx, ["lib/pkg"])
    a = manifest.by_path()["lib/pkg/a.so"]
    assert (a.kind, a.sha256) == ("file", None)
    assert os.stat(tx.snapshot / "lib/pkg/a.so").st_ino == os.stat(prefix / "lib/pkg/a.so").st_ino
    assert manifest.by_path()["lib/pkg/link"].target == "/etc"
    assert (tx.snapshot / "lib/pkg/link").is_symlink()
    restore.remove_path(prefix / "lib/pkg")
    (prefix / "lib/new").mkdir()
    (prefix / "lib/new/x").write_text("created by the transaction")
    assert restore.restore(prefix, tx, manifest).left == []
    assert not diff_fingerprints(before, fingerprint(prefix))
    assert restore.restore(prefix, tx, manifest).left == []  # idempotent


def test_copy_fallback_across_filesystems(tmp_path: Path) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.fail("this test needs /dev/shm on another filesystem than tmp")
    import tempfile

    with tempfile.TemporaryDirectory(dir=shm) as other:
        prefix = tree(Path(other))
        tx = TxDir(tmp_path / "tx")
        manifest = snapshot.take(prefix, tx, ["lib/pkg/a.so", "lib/pkg/sub/b.py"])
        entry = manifest.by_path()["lib/pkg/a.so"]
        assert entry.sha256 is not None
        before = fingerprint(prefix)
        (prefix / "lib/pkg/a.so").write_bytes(b"changed")
        (prefix / "lib/pkg/sub/b.py").unlink()
        assert restore.verify(prefix, manifest)
        assert restore.restore(prefix, tx, manifest).left == []
        assert not diff_fingerprints(before, fingerprint(prefix))


def test_verify_detects_in_place_write(tmp_path: Path) -> None:
    prefix = tree(tmp_path / "env")
    tx = TxDir(tmp_path / "tx")
    manifest = snapshot.take(prefix, tx, ["lib/pkg/sub/b.py"])
    with (prefix / "lib/pkg/sub/b.py").open("a") as fh:
        fh.write("# more\n")
    assert restore.verify(prefix, manifest) == [Difference("lib/pkg/sub/b.py", "content-or-mode")]


@pytest.mark.parametrize(
    ("difference", "text"),
    [
        (Difference("a/b.so", "missing"), "a/b.so: missing"),
        (Difference("a/b.so", "appeared"), "a/b.so: exists, but did not before"),
        (Difference("a/l", "not-the-symlink", target="b.so"), "a/l: not the symlink -> b.so"),
        (Difference("a", "unexpected-names", ("x", "y")), "a: unexpected x, y"),
        (Difference("a", "missing-names", ("x",)), "a: missing x"),
        (Difference("a", "missing-directory"), "a: missing directory"),
        (Difference("a", "mode-differs"), "a: mode differs"),
    ],
)
def test_the_sentence_a_journal_record_carries(difference: Difference, text: str) -> None:
    """The journal's words for a difference are those of the journals already written."""
    assert difference_text(difference) == text


def test_detach_leaves_the_snapshot_unreachable(tmp_path: Path) -> None:
    prefix = tree(tmp_path / "env")
    tx = TxDir(tmp_path / "tx")
    manifest = snapshot.take(prefix, tx, ["lib/pkg/a.so"], detach=["lib/pkg/a.so"])
    assert restore.detach(prefix, manifest) == ["lib/pkg/a.so"]
    (prefix / "lib/pkg/a.so").write_bytes(b"rewritten by the backend")
    assert (tx.snapshot / "lib/pkg/a.so").read_bytes() == b"A" * 1000
    assert restore.restore(prefix, tx, manifest).left == []
    assert (prefix / "lib/pkg/a.so").read_bytes() == b"A" * 1000


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("../outside", "not a normalised path"),
        ("/etc/passwd", "not a relative path"),
        ("lib/../../x", "not a normalised path"),
        (".cudafix/lock", "state directory"),
        ("lib/viasym/file", "goes through the symlink lib/viasym"),
    ],
)
def test_check_path_refuses(tmp_path: Path, path: str, why: str) -> None:
    prefix = tree(tmp_path / "env")
    (prefix / "lib/viasym").symlink_to(tmp_path)
    problem = check_path(prefix, path)
    assert problem is not None and why in problem
    assert check_path(prefix, "lib/pkg/a.so") is None


@pytest.mark.parametrize(
    ("deviation", "text"),
    [
        (Deviation("other-version", "x", version="2", planned="1"), "x is at 2, not 1"),
        (Deviation("kept-differs", "a", difference=Difference("a", "missing")), "kept a: missing"),
        (Deviation("other-holder", "a/f", distribution="x"), "a/f should hold x's bytes"),
        (
            Deviation("not-installed", "x", version="1"),
            "x==1 is not installed after the install step",
        ),
        (
            Deviation("staged-differs", "a/f", distribution="x", version="1"),
            "a/f: other bytes than the staged wheel (x==1)",
        ),
    ],
)
def test_the_sentence_a_failed_verify_carries(deviation: Deviation, text: str) -> None:
    assert deviation_text(deviation) == text
