"""snapshot.take / restore on plain trees: links, copies across filesystems, symlinks."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from cudafix.env.statedir import TxDir
from cudafix.tx import hold, restore, snapshot
from cudafix.tx.difference import Deviation, Difference, deviation_text, difference_text
from cudafix.tx.manifest import Entry, Manifest, check_path, stored
from cudafix.tx.manifest import load as load_manifest
from scenarios.fingerprint import diff_fingerprints, fingerprint
from tests.support.tx import mirror_store


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
    assert os.stat(tx.snapshot / stored(a)).st_ino == os.stat(prefix / "lib/pkg/a.so").st_ino
    assert manifest.by_path()["lib/pkg/link"].target == "/etc"
    restore.remove_path(prefix / "lib/pkg")
    (prefix / "lib/new").mkdir()
    (prefix / "lib/new/x").write_text("created by the transaction")
    assert restore.restore(prefix, tx, manifest).left == []
    assert not diff_fingerprints(before, fingerprint(prefix))
    assert restore.restore(prefix, tx, manifest).left == []  # idempotent


def test_the_store_is_flat_whatever_the_paths(tmp_path: Path) -> None:
    """A snapshot makes no directory per snapshotted one: each file is linked under its
    slot's number, 128 to a directory; directories and symlinks are in the manifest alone."""
    prefix = tree(tmp_path / "env")
    (prefix / "lib/pkg/sub/deeper").mkdir()
    for n in range(127):
        (prefix / f"lib/pkg/sub/deeper/m{n}.py").write_text(f"m = {n}\n")
    tx = TxDir(tmp_path / "tx")
    manifest = snapshot.take(prefix, tx, ["lib"])
    files = [e for e in manifest.entries if e.kind == "file"]
    assert sorted(e.slot for e in files) == list(range(129))
    assert sorted(p.name for p in tx.snapshot.iterdir()) == ["0", "1"]
    held = {str(p.relative_to(tx.snapshot)): p for p in tx.snapshot.glob("*/*")}
    assert sorted(held) == sorted(stored(e) for e in files)
    assert len(list((tx.snapshot / "0").iterdir())) == 128
    assert stored(next(e for e in files if e.slot == 128)) == "1/128"
    assert all(p.is_file() and not p.is_symlink() for p in held.values())
    for e in files:
        same = os.stat(tx.snapshot / stored(e)), os.stat(prefix / e.path)
        assert same[0].st_ino == same[1].st_ino and e.nlink == same[0].st_nlink == 2
        assert e.ctime_ns == same[1].st_ctime_ns
    assert load_manifest(tx) == manifest
    before = fingerprint(prefix)
    restore.remove_path(prefix / "lib")
    assert restore.restore(prefix, tx, manifest).left == []
    assert not diff_fingerprints(before, fingerprint(prefix))


@pytest.mark.parametrize("layout", ["flat", "mirrored"])
def test_a_store_of_either_layout_restores_and_is_rebuilt_from_held_files(
    tmp_path: Path, layout: str
) -> None:
    """A store mirroring the prefix (written before the store was flat) restores as a flat
    one does; held open, either is written again when the command deletes it."""
    prefix = tree(tmp_path / "env")
    tx = TxDir(prefix / ".cudafix/transactions/t1")
    before = fingerprint(prefix)
    snapshot.take(prefix, tx, ["lib"])
    if layout == "mirrored":
        mirror_store(tx)
        assert (tx.snapshot / "lib/pkg/sub/b.py").read_text() == "b = 1\n"
    manifest = load_manifest(tx)
    assert all(e.slot == (-1 if layout == "mirrored" else e.slot) for e in manifest.entries)
    tx.journal.write_text("")
    held = hold.hold_state(tx, manifest)
    try:
        assert len(held.fds) == 2 and not hold.state_lost(tx, held)
        restore.remove_path(prefix / "lib")
        restore.remove_path(tx.snapshot)  # the command deleted cudafix's state
        assert hold.state_lost(tx, held)
        rebuilt, lost = hold.rebuild(prefix, tx, held)
    finally:
        held.close()
    assert lost == [] and all(e.sha256 for e in rebuilt.entries if e.kind == "file")
    assert restore.restore(prefix, tx, rebuilt).left == []
    assert not diff_fingerprints(before, fingerprint(prefix))


def test_files_held_open_as_stored_are_what_hold_state_holds(tmp_path: Path) -> None:
    """Each stored file is opened as it is linked, its stat read through that descriptor
    (more room made once, when what there was is spent); :func:`hold.hold_state` takes
    those over and opens none again."""
    prefix = tree(tmp_path / "env")
    (prefix / "lib/pkg/c.py").write_text("c = 1\n")
    seen: dict[str, os.stat_result] = {}
    opened = snapshot.Opened(room=2, widen=lambda: 1)
    tx = TxDir(prefix / ".cudafix/transactions/t1")
    manifest = snapshot.take(prefix, tx, ["lib"], seen=seen, opened=opened)
    files = [e for e in manifest.entries if e.kind == "file"]
    assert len(files) == 3 and len(opened.fds) == 3 and (opened.room, opened.widen) == (0, None)
    for e in files:
        live = os.lstat(prefix / e.path)
        assert seen[f"{prefix}/{e.path}"].st_ino == live.st_ino == e.ino
        assert seen[f"{prefix}/{e.path}"].st_ctime_ns == live.st_ctime_ns == e.ctime_ns
    assert seen[f"{prefix}/lib/pkg/link"].st_mode == os.lstat(prefix / "lib/pkg/link").st_mode
    tx.journal.write_text("")
    held = hold.hold_state(tx, manifest, opened)
    try:
        assert sorted(held.fds) == sorted(stored(e) for e in files) and held.missed == 0
        kept = dict(held.fds)
        assert all(os.fstat(kept[stored(e)]).st_ino == e.ino for e in files)
    finally:
        held.close()
    assert opened.fds == {}  # closed once, by whichever lets go first
    with pytest.raises(OSError):
        os.fstat(next(iter(kept.values())))
    # past the room there is, a stored file is statted, not held; hold_state tries it
    # again, and counts it as missed where there is still no room
    short = snapshot.Opened(room=2, widen=None)
    tx2 = TxDir(prefix / ".cudafix/transactions/t2")
    snapshot.take(prefix, tx2, ["lib"], opened=short)
    assert (len(short.fds), len(short.unheld)) == (2, 1)
    tx2.journal.write_text("")
    held = hold.hold_state(tx2, load_manifest(tx2), short)
    try:
        assert (len(held.fds), held.missed) == (2, 1)
        short.room = 1  # room made since: the one left is held now
        held = hold.hold_state(tx2, load_manifest(tx2), short)
        assert (len(held.fds), held.missed, short.unheld) == (3, 0, set())
    finally:
        held.close()


def test_changes_list_only_directories_whose_names_may_have_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given what the snapshot saw, a directory with the inode, mtime and ctime it had is
    not listed again; a name added after the snapshot moves them, so it is still found.
    One changed less than a tick before the snapshot began is listed whatever its times."""
    prefix = tree(tmp_path / "env")
    seen: dict[str, os.stat_result] = {}
    tx = TxDir(prefix / ".cudafix/transactions/t1")
    manifest = snapshot.take(prefix, tx, ["lib"], seen=seen)
    settled = restore.Seen(seen, time.time_ns() + 10 * restore.TICK_NS)
    listed: list[str] = []
    real_listing = restore._listing

    def listing(prefix: Path, directory: str) -> tuple[str, ...] | None:
        listed.append(directory)
        return real_listing(prefix, directory)

    monkeypatch.setattr(restore, "_listing", listing)  # counts the real listings
    assert restore.changes(prefix, manifest, seen=settled).paths == 0
    assert listed == []
    (prefix / "lib/pkg/sub/new.py").write_text("n = 1\n")
    found = restore.changes(prefix, manifest, seen=settled)
    assert found.new == ("lib/pkg/sub/new.py",) and listed == ["lib/pkg/sub"]
    listed.clear()
    recent = restore.Seen(seen, 0)
    assert restore.changes(prefix, manifest, seen=recent).new == ("lib/pkg/sub/new.py",)
    assert sorted(listed) == ["lib", "lib/pkg", "lib/pkg/sub"]


def test_changes_read_files_of_unchanged_directories_through_held_links(
    tmp_path: Path,
) -> None:
    """A file of a directory whose names are as snapshotted is read through its held
    link, and a write in place shows there as it shows by path."""
    prefix = tree(tmp_path / "env")
    seen: dict[str, os.stat_result] = {}
    opened = snapshot.Opened(room=10, widen=None)
    tx = TxDir(prefix / ".cudafix/transactions/t1")
    manifest = snapshot.take(prefix, tx, ["lib"], seen=seen, opened=opened)
    settled = restore.Seen(seen, time.time_ns() + 10 * restore.TICK_NS)
    a, b = (stored(manifest.by_path()[p]) for p in ("lib/pkg/a.so", "lib/pkg/sub/b.py"))
    try:
        assert restore.changes(prefix, manifest, seen=settled, held=opened.fds).paths == 0
        crossed = {**opened.fds, a: opened.fds[b]}  # what is read is the held link
        assert restore.changes(prefix, manifest, seen=settled, held=crossed).paths == 1
        with (prefix / "lib/pkg/a.so").open("r+b") as fh:  # the same inode, other bytes
            fh.write(b"B")
        by_link = restore.changes(prefix, manifest, in_place=True, seen=settled, held=opened.fds)
        by_path = restore.changes(prefix, manifest, in_place=True)
        assert by_link == by_path and by_link.in_place == ("lib/pkg/a.so",)
    finally:
        opened.close()


def test_a_manifest_without_slots_reads_as_mirrored_and_a_wrong_slot_is_refused() -> None:
    entries = (Entry("a", "dir", mode=0o755), Entry("a/b", "file", mode=0o644, slot=7))
    manifest = Manifest(entries, {"a": ("b",)})
    data = json.loads(json.dumps(manifest.to_json()))
    assert Manifest.from_json(data).entries == entries
    assert data["rows"][1] == list(entries[1])  # each entry's fields, in the order named
    at = data["fields"].index("slot")
    older = {
        **data,
        "fields": [f for f in data["fields"] if f != "slot"],
        "rows": [row[:at] + row[at + 1 :] for row in data["rows"]],
    }
    assert [stored(e) for e in Manifest.from_json(older).entries] == ["a", "a/b"]
    assert stored(entries[1]) == "0/7" and stored(entries[1]._replace(slot=300)) == "2/300"
    for wrong in ({"slot": 3}, {"slot": -2}):
        rows = [list(row) for row in data["rows"]]
        rows[0 if wrong["slot"] == 3 else 1][at] = wrong["slot"]
        with pytest.raises(ValueError, match="slot"):
            Manifest.from_json({**data, "rows": rows})
    with pytest.raises(ValueError, match="unknown manifest fields"):
        Manifest.from_json({**data, "fields": [*data["fields"][:-1], "elsewhere"]})


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
    assert (tx.snapshot / stored(manifest.by_path()["lib/pkg/a.so"])).read_bytes() == b"A" * 1000
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
