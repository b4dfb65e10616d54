"""RECORD rows, path syntax, the file walk and hashing on hand-made trees (no venv)."""

from __future__ import annotations

import hashlib
import os
import posixpath
import sqlite3
import stat
from contextlib import closing
from pathlib import Path

import pytest

from cudafix.env.hashing import HashCache, hash_bytes
from cudafix.env.inventory import is_bytecode, pyc_source
from cudafix.env.memo.index import FactIndex
from cudafix.env.reading import read_inventory, walk_files
from cudafix.env.record import (
    Refusal,
    parse_record,
    resolve_record_path,
    without_entries,
)
from cudafix.model.names import EnvPath
from cudafix.tx.manifest import path_syntax
from tests.support.loadertree import backdate
from tests.support.wheels import record_hash

SP = EnvPath("lib/python3.11/site-packages")


def test_walk_skips_state_dir_and_symlinked_dirs(tmp_path: Path) -> None:
    (tmp_path / ".cudafix").mkdir()
    (tmp_path / ".cudafix" / "journal").write_text("j")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "a.so").write_bytes(b"a")
    (tmp_path / "lib64").symlink_to("lib")
    files = walk_files(tmp_path)
    assert set(files) == {"lib/a.so", "lib64"}
    assert files[EnvPath("lib64")].link_target == "lib"
    assert files[EnvPath("lib/a.so")].size == 1


# --- record (pure) ----------------------------------------------------------------------


def test_parse_record_tolerates_missing_hash_and_size() -> None:
    parsed = parse_record('a.py,sha256=AbC,12\n"we,ird.py",,\n\nb.py,sha512=xyz,\n')
    assert [(e.path, e.sha256, e.size) for e in parsed.entries] == [
        ("a.py", "AbC", 12),
        ("we,ird.py", None, None),
        ("b.py", None, None),
    ]
    assert parsed.problems == ()


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("pkg/mod.py", f"{SP}/pkg/mod.py"),
        ("./pkg/mod.py", f"{SP}/pkg/mod.py"),
        ("../../../bin/tool", "bin/tool"),
        ("../../../../etc/x", Refusal("escapes the environment")),
        ("../../..", Refusal("names the environment itself")),
        ("/etc/passwd", Refusal("absolute path")),
        ("pkg/../../../../../x", Refusal("'..' after a directory name")),
    ],
)
def test_resolve_record_path(raw: str, expected: str | Refusal) -> None:
    assert resolve_record_path(SP, raw) == expected


@pytest.mark.parametrize("bad", ["", "/abs", "../x", "a/../b", "a//b", "."])
def test_path_syntax_refuses(bad: str) -> None:
    assert path_syntax(bad) is not None


def test_path_syntax_accepts() -> None:
    assert path_syntax("lib/x.so") is None


# --- hashing ----------------------------------------------------------------------------


def test_hash_streams_and_matches_record_encoding(tmp_path: Path) -> None:
    data = os.urandom(3 * (1 << 20) + 17)
    (tmp_path / "big.so").write_bytes(data)
    cache = HashCache(tmp_path)
    assert f"sha256={cache(EnvPath('big.so'))}" == record_hash(data)
    assert hashlib.sha256(data).digest()  # sanity: the oracle is hashlib itself
    assert cache(EnvPath("absent")) is None


def test_hash_follows_symlinks_only_inside(tmp_path: Path) -> None:
    prefix, outside = tmp_path / "env", tmp_path / "outside"
    prefix.mkdir()
    outside.mkdir()
    (outside / "secret").write_bytes(b"s")
    (prefix / "real").write_bytes(b"r")
    (prefix / "in").symlink_to("real")
    (prefix / "out").symlink_to(outside / "secret")
    cache = HashCache(prefix)
    assert cache(EnvPath("in")) == cache(EnvPath("real")) is not None
    assert cache(EnvPath("out")) is None


def _digest(prefix: Path, path: str) -> tuple[str | None, int]:
    """One run's digest of ``path`` with the environment's index, and the files it read."""
    with FactIndex.open(prefix) as facts:
        hashes = HashCache(prefix, facts)
        digest = hashes(EnvPath(path))
        hashes.save()
        return digest, hashes.hashed


def test_hash_cache_roundtrip_planted_and_unwritable(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"abc")
    digest, read = _digest(backdate(tmp_path), "f")
    assert digest == hash_bytes(b"abc") and read == 1
    assert _digest(tmp_path, "f") == (digest, 0)
    # the index answers without reading: prove it by planting a wrong value
    db = tmp_path / ".cudafix" / "cache" / "index.sqlite"
    with closing(sqlite3.connect(db)) as conn, conn:
        assert conn.execute("UPDATE digests SET sha256 = 'planted'").rowcount == 1
    assert _digest(tmp_path, "f") == ("planted", 0)
    db.write_text("{not a database")
    assert _digest(tmp_path, "f") == (digest, 1)
    assert _digest(tmp_path, "f") == (digest, 0)  # built again
    (tmp_path / "g").write_bytes(b"just now")  # within the racy window: read, not kept
    assert _digest(tmp_path, "g")[1] == _digest(tmp_path, "g")[1] == 1
    blocked = tmp_path / "blocked"
    (blocked / ".cudafix").mkdir(parents=True)
    (blocked / ".cudafix" / "cache").write_text("a file, not a dir")
    (blocked / "f").write_bytes(b"abc")
    unkept = HashCache(blocked, FactIndex.open(blocked))
    assert unkept(EnvPath("f")) == digest and not unkept.save()
    assert _digest(blocked, "f") == (digest, 1)


def test_hash_cache_reads_no_bytes_when_only_ctime_moved(tmp_path: Path) -> None:
    """A hard link or a chmod moves ctime and no byte: no re-read, but by the strict check
    under the lock (a write in place that restores mtime moves only ctime too). A write that
    moves mtime or size is read again."""
    lib = tmp_path / "lib.so"
    lib.write_bytes(b"A" * 4096)
    first = HashCache(backdate(tmp_path), FactIndex.open(tmp_path))
    digest = first(EnvPath("lib.so"))
    assert first.save()
    before = lib.stat().st_ctime_ns
    os.link(lib, tmp_path / "copy.so")
    lib.chmod(0o600)
    assert lib.stat().st_ctime_ns != before
    again = HashCache(tmp_path, FactIndex.open(tmp_path))
    assert again(EnvPath("lib.so")) == digest
    assert again.hashed == 0
    strict = HashCache(tmp_path, FactIndex.open(tmp_path), strict=True)  # under the lock
    assert strict(EnvPath("lib.so")) == digest
    assert strict.hashed == 1
    st = lib.stat()
    with lib.open("r+b") as fh:  # same size, new bytes, mtime moved
        fh.write(b"B")
    os.utime(lib, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    assert again(EnvPath("lib.so")) != digest
    assert again.hashed == 1
    lib.write_bytes(b"A" * 4097)  # size moved
    os.utime(lib, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert again(EnvPath("lib.so")) not in (None, digest)
    assert again.hashed == 2


@pytest.mark.parametrize(
    "raw",
    [
        "a/b.py",
        "../../../bin/x",
        "a/./b",
        "a//b",
        "/etc/x",
        "//x",
        "a\\b",
        "C:x",
        ".hidden",
        "a/.h",
        "a/b/",
        "../../../../etc/x",
        "pkg/../../x",
        "nvidia/cudnn/lib/libcudnn.so.9",
    ],
)
def test_fast_path_agrees_with_the_lexical_rules(raw: str) -> None:
    """The plain-path shortcut must give exactly what the full normalisation gives."""
    site = EnvPath("lib/python3.11/site-packages")
    got = resolve_record_path(site, raw)
    if raw.startswith("/") or raw.startswith("//"):
        assert isinstance(got, Refusal)
    if not isinstance(got, Refusal):
        assert got == posixpath.normpath(posixpath.join(site, raw.replace("\\", "/")))


def test_without_entries_drops_only_the_named_rows_and_keeps_csv_quoting() -> None:
    text = 'a/x.py,sha256=AA,3\n"odd,name.py",sha256=BB,4\n/etc/evil,,\n../../../../x,,\n'
    kept = without_entries(text, {"/etc/evil", "../../../../x"})
    assert [e.path for e in parse_record(kept).entries] == ["a/x.py", "odd,name.py"]


# --- bytecode ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "bytecode", "source"),
    [
        ("pkg/__pycache__/mod.cpython-311.pyc", True, "pkg/mod.py"),
        ("pkg/__pycache__/mod.cpython-311.opt-1.pyc", True, "pkg/mod.py"),
        ("__pycache__/single.cpython-311.pyc", True, "single.py"),
        ("pkg/mod.pyc", True, None),  # sourceless bytecode: nothing recompiles it
        ("pkg/__pycache__", True, None),  # the directory itself
        ("__pycache__", True, None),  # a bare name from a directory listing
        ("pkg/__pycache__/sub/x.pyc", True, None),
        ("pkg/__pycache__/notes.txt", True, None),
        ("pkg/mod.py", False, None),
        ("pkg/my__pycache__/x.txt", False, None),  # a whole path component only
        ("pkg/__pycache__x/y.txt", False, None),
    ],
)
def test_bytecode_and_the_source_of_a_cache_file(
    path: str, bytecode: bool, source: str | None
) -> None:
    assert (is_bytecode(path), pyc_source(path)) == (bytecode, source)


def test_what_the_walk_settles_about_record_paths_is_what_lstat_says(tmp_path: Path) -> None:
    """Rows the walk did not see as files are told apart (gone, a directory, or there
    through a symlinked directory) from the directories it listed: the same as one lstat
    per row would tell, which the reading asks only where the walk cannot say."""
    site = tmp_path / SP
    for d in ("pkg/sub", "real/deep", "real/empty"):
        (site / d).mkdir(parents=True)
    (site / "pkg" / "here.py").write_text("x = 1\n")
    (site / "real" / "deep" / "there.py").write_text("y = 2\n")
    (site / "link").symlink_to("real")
    (tmp_path / ".lock").write_text("")  # uv's, at the prefix: the walk leaves it out
    rows = [
        "pkg/here.py",  # a file the walk saw
        "pkg/gone.py",  # gone, in a listed directory
        "pkg/sub",  # a listed directory
        "pkg/sub/gone.py",
        "nodir/gone.py",  # gone, and so is its directory
        "link/deep/there.py",  # there, through a symlinked directory
        "link/deep/gone.py",
        "link/empty",  # a directory, through a symlinked directory
        "link",  # the symlink itself: a file to the walk
        "../../../.lock",
        "../../../bin/gone",
    ]
    info = site / "odd-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: odd\nVersion: 1.0\n")
    (info / "RECORD").write_text("".join(f"{r},,\n" for r in rows) + "odd-1.0.dist-info/RECORD,,\n")
    inv = read_inventory(tmp_path, [SP], None)
    oracle_gone, oracle_dirs = [], []
    for raw in rows:
        path = posixpath.normpath(f"{SP}/{raw}")
        try:
            st = os.lstat(tmp_path / path)
        except FileNotFoundError:
            oracle_gone.append(path)
            continue
        if stat.S_ISDIR(st.st_mode):
            oracle_dirs.append(raw)
    assert sorted(inv.missing["odd"]) == sorted(oracle_gone)
    assert sorted(u.raw for u in inv.unsafe) == sorted(oracle_dirs) == ["link/empty", "pkg/sub"]
    assert len(oracle_gone) == 5
