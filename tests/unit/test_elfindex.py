"""The ELF index: classification, verdicts kept in the index of facts by (dev, ino, size,
mtime), and the environment view."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Mapping
from contextlib import closing
from pathlib import Path

from cudafix.env.inventory import FileStat
from cudafix.env.memo.index import APPLICATION_ID, SCHEMA_VERSION, FactIndex
from cudafix.linker.elf import ElfInfo, ElfProblem
from cudafix.linker.elfindex import (
    ElfIndex,
    EnvironmentView,
    Reader,
    index_environment,
    loadable,
    read_elf_nofollow,
)
from cudafix.linker.hostview import HostView
from cudafix.model.names import EnvPath
from tests.support.loadertree import ARCH, backdate, lib, scan


class Counter:
    """A real reader that counts the files it had to open."""

    def __init__(self) -> None:
        self.paths: list[Path] = []

    def __call__(self, path: str) -> ElfInfo | ElfProblem:
        self.paths.append(Path(path))
        return read_elf_nofollow(path)


def _indexed(
    env: Path, files: Mapping[EnvPath, FileStat] | None = None, *, read: Reader = read_elf_nofollow
) -> ElfIndex:
    """One run's scan with the environment's index of facts, closed after."""
    with FactIndex.open(env) as facts:
        return index_environment(env, scan(env) if files is None else files, facts,
                                 read=read, expected=ARCH)  # fmt: skip


def _env(tmp: Path) -> Path:
    env = tmp / "env"
    dep = lib(env / "lib" / "libdep.so.1")
    lib(env / "lib" / "libtop.so.1", needed=[dep], rpath=["$ORIGIN"])
    (env / "lib" / "libc.so").write_text("/* GNU ld script */\nGROUP ( libc.so.6 )\n")
    (env / "mod.py").write_text("x = 1\n")
    (env / "lib" / "libdep.so").symlink_to("libdep.so.1")
    for c in env.rglob("*.c"):
        c.unlink()
    return backdate(env)


def test_classifies_elf_linker_scripts_and_ignores_plain_files(tmp_path: Path) -> None:
    env = _env(tmp_path)
    index = index_environment(env, scan(env), None, expected=ARCH)
    assert set(index.objects) == {"lib/libdep.so.1", "lib/libtop.so.1"}
    assert index.objects[EnvPath("lib/libtop.so.1")].needed[0] == "libdep.so.1"
    assert {p: v.reason for p, v in index.problems.items()} == {"lib/libc.so": "linker-script"}
    assert index.foreign == frozenset()


def test_only_what_a_loader_could_load_is_read(tmp_path: Path) -> None:
    """Files named as libraries and executables are read; headers, sources, bytecode and
    data are not, not even one holding an ELF object, unless some object needs a file of
    its exact name (DT_NEEDED ``plugin.bin``): ld.so looks for that name, whatever it is."""
    env = _env(tmp_path)
    (env / "include").mkdir()
    (env / "include" / "api.h").write_text("int f(void);\n")
    (env / "__pycache__").mkdir()
    (env / "__pycache__" / "odd.cpython-311.pyc").write_bytes(
        (env / "lib" / "libdep.so.1").read_bytes()
    )
    (env / "data.bin").write_bytes((env / "lib" / "libdep.so.1").read_bytes())
    plugin = lib(env / "plugins" / "plugin.bin", soname="plugin.bin")
    lib(env / "plugins" / "libhost.so.1", needed=[plugin], rpath=["$ORIGIN"])
    (env / "bin").mkdir()
    (env / "bin" / "tool").write_text("#!/bin/sh\n")
    (env / "bin" / "tool").chmod(0o755)
    for c in env.rglob("*.c"):
        c.unlink()
    read = Counter()
    index = _indexed(backdate(env), read=read)
    assert sorted(p.relative_to(env).as_posix() for p in read.paths) == [
        "bin/tool", "lib/libc.so", "lib/libdep.so.1", "lib/libtop.so.1",
        "plugins/libhost.so.1", "plugins/plugin.bin",
    ]  # fmt: skip
    assert set(index.objects) == {
        "lib/libdep.so.1", "lib/libtop.so.1", "plugins/libhost.so.1", "plugins/plugin.bin",
    }  # fmt: skip
    assert loadable("bin/tool", scan(env)[EnvPath("bin/tool")])
    assert not loadable("include/api.h", scan(env)[EnvPath("include/api.h")])

    (env / "data.bin").chmod(0o755)  # now executable, its stat key unchanged: read now
    again = Counter()
    assert "data.bin" in _indexed(env, read=again).objects
    assert again.paths == [env / "data.bin"]


def test_warm_scan_opens_nothing_and_changes_are_reparsed(tmp_path: Path) -> None:
    env = _env(tmp_path)
    cold = Counter()
    first = _indexed(env, read=cold)
    assert len(cold.paths) == 3 and first.parsed == 3  # 2 ELF, 1 script (.py, symlink: never)
    warm = Counter()
    second = _indexed(env, read=warm)
    assert warm.paths == [] and second.parsed == 0
    assert second == first
    lib(env / "lib" / "libdep.so.1", soname="libdep.so.2")
    changed = Counter()
    third = _indexed(env, read=changed)
    assert changed.paths == [env / "lib" / "libdep.so.1"]
    assert third.objects[EnvPath("lib/libdep.so.1")].soname == "libdep.so.2"
    db = env / ".cudafix" / "cache" / "index.sqlite"
    with closing(sqlite3.connect(db)) as conn, conn:
        assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        rows = dict(conn.execute("SELECT path, elf_kind FROM files"))
        assert len(rows) == 4 and rows["mod.py"] == "unread"  # its key kept, never read


def test_corrupt_or_foreign_index_is_rebuilt(tmp_path: Path) -> None:
    env = _env(tmp_path)
    db = env / ".cudafix" / "cache" / "index.sqlite"
    db.parent.mkdir(parents=True)
    _indexed(env)
    full = db.read_bytes()
    other = tmp_path / "other.sqlite"
    with closing(sqlite3.connect(other)) as conn, conn:  # an SQLite file, not cudafix's
        conn.execute("CREATE TABLE files (path TEXT)")
    newer = tmp_path / "newer.sqlite"
    newer.write_bytes(full)
    with closing(sqlite3.connect(newer)) as conn, conn:  # cudafix's, another layout
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    torn = full[: len(full) // 2] + b"\xff" * (len(full) - len(full) // 2)
    for junk in (b"not a database" * 100, b"", other.read_bytes(), newer.read_bytes(), torn):
        db.write_bytes(junk)
        counter = Counter()
        index = _indexed(env, read=counter)
        assert len(counter.paths) == 3 and len(index.objects) == 2
        with closing(sqlite3.connect(db)) as conn, conn:  # built again: the next run reads nothing
            assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        again = Counter()
        _indexed(env, read=again)
        assert again.paths == []


def test_planted_verdicts_are_given_back_only_under_their_key(tmp_path: Path) -> None:
    """The index answers for a file only while its stat key is the one stored; a row whose
    key moved, or whose body is malformed, is read from the file again."""
    env = _env(tmp_path)
    _indexed(env)
    db = env / ".cudafix" / "cache" / "index.sqlite"
    with closing(sqlite3.connect(db)) as conn, conn:
        conn.execute("UPDATE files SET elf_body = '{broken' WHERE path = 'lib/libtop.so.1'")
        conn.execute("UPDATE files SET mtime_ns = mtime_ns + 1 WHERE path = 'lib/libdep.so.1'")
    counter = Counter()
    index = _indexed(env, read=counter)
    assert sorted(counter.paths) == [env / "lib/libdep.so.1", env / "lib/libtop.so.1"]
    assert set(index.objects) == {"lib/libdep.so.1", "lib/libtop.so.1"}


def test_index_never_read_or_written_through_a_symlink(tmp_path: Path) -> None:
    env = _env(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (env / ".cudafix").symlink_to(outside)  # never written through a symlinked directory
    files = {k: v for k, v in scan(env).items() if "cudafix" not in k}
    assert not FactIndex.open(env).kept
    assert len(_indexed(env, files).objects) == 2
    assert list(outside.iterdir()) == []
    (env / ".cudafix").unlink()
    (env / ".cudafix" / "cache").mkdir(parents=True)
    planted = outside / "planted.sqlite"
    (env / ".cudafix" / "cache" / "index.sqlite").symlink_to(planted)  # nor through a link
    index = FactIndex.open(env)
    assert index.kept and not planted.exists()
    assert not (env / ".cudafix" / "cache" / "index.sqlite").is_symlink()


def test_unwritable_index_is_not_fatal(tmp_path: Path) -> None:
    env = _env(tmp_path)
    (env / ".cudafix").write_text("a file where the directory should be")
    files = {k: v for k, v in scan(env).items() if k != ".cudafix"}
    assert not FactIndex.open(env).kept
    for _ in range(2):  # nothing kept: every file read each time
        counter = Counter()
        index = _indexed(env, files, read=counter)
        assert len(index.objects) == 2 and len(counter.paths) == 3


def test_foreign_arch_reported(tmp_path: Path) -> None:
    env = _env(tmp_path)
    good = (env / "lib" / "libdep.so.1").read_bytes()
    patched = bytearray(good)
    patched[18:20] = (183).to_bytes(2, "little")  # EM_AARCH64
    (env / "lib" / "libarm.so.1").write_bytes(bytes(patched))
    index = index_environment(env, scan(env), None, expected=ARCH)
    assert index.foreign == frozenset({"lib/libarm.so.1"})
    assert index.objects[EnvPath("lib/libarm.so.1")].machine == "EM_AARCH64"


def test_view_follows_links_within_env_only(tmp_path: Path) -> None:
    env = _env(tmp_path)
    (env / "lib64").symlink_to("lib")
    (env / "lib" / "libabs.so.1").symlink_to(env / "lib" / "libdep.so.1")
    (env / "lib" / "libout.so.1").symlink_to("/lib/x86_64-linux-gnu/libc.so.6")
    (env / "lib" / "libloop.so.1").symlink_to("libloop.so.1")
    files = scan(env)
    view = EnvironmentView(
        env, index_environment(env, files, None, expected=ARCH), files, system=HostView()
    )
    base = str(env)
    assert view.elf(f"{base}/lib64/libdep.so.1") == view.elf(f"{base}/lib/libdep.so.1")
    assert view.canonical(f"{base}/lib64/libdep.so") == f"{base}/lib/libdep.so.1"
    assert view.elf(f"{base}/lib/libabs.so.1") is not None
    assert view.elf(f"{base}/lib/libout.so.1") is None
    assert view.elf(f"{base}/lib/libloop.so.1") is None
    assert view.problem(f"{base}/lib/libc.so") is not None
    assert view.elf("/lib/x86_64-linux-gnu/libc.so.6") is not None  # system: from disk
    after = view.without(frozenset({EnvPath("lib/libdep.so.1")}))
    assert after.elf(f"{base}/lib64/libdep.so") is None
    assert view.elf(f"{base}/lib64/libdep.so") is not None


def test_many_files_warm_scan_parses_nothing(tmp_path: Path) -> None:
    env = tmp_path / "big"
    env.mkdir()
    for i in range(500):
        (env / f"libm{i}.so").write_text("x\n")
    files = scan(backdate(env))
    _indexed(env, files)
    os.utime(env / "libm7.so", ns=(1, 1))
    counter = Counter()
    _indexed(env, read=counter)
    assert counter.paths == [env / "libm7.so"]


def test_a_name_that_is_not_utf8_is_read_each_time(tmp_path: Path) -> None:
    """A file name of bytes that are not UTF-8 (kept by the walk as surrogates) cannot be a
    key of the index: that file is read every time, and the rest is remembered."""
    env = _env(tmp_path)
    odd = os.fsdecode(b"lib/libodd\xff.so.1")
    os.link(env / "lib" / "libdep.so.1", env / odd)
    first, second = Counter(), Counter()
    one = _indexed(env, read=first)
    two = _indexed(env, read=second)
    assert one == two and EnvPath(odd) in two.objects
    assert len(first.paths) == 4 and second.paths == [env / odd]


def test_a_file_written_just_now_is_read_again(tmp_path: Path) -> None:
    """A second write in the clock tick of the first, of the same size, leaves the stat key
    as it was: the verdict of a file that changed within the racy window is not kept."""
    env = _env(tmp_path)
    dep = env / "lib" / "libdep.so.1"
    lib(dep, soname="libdep.so.A")  # just written
    before = os.stat(dep)
    assert _indexed(env).objects[EnvPath("lib/libdep.so.1")].soname == "libdep.so.A"
    lib(env / "new.so", soname="libdep.so.B")
    with open(dep, "r+b") as fh:  # in place, same size, the same mtime: the same key
        fh.write((env / "new.so").read_bytes())
    os.utime(dep, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(dep).st_ino == before.st_ino and os.stat(dep).st_size == before.st_size
    files = {k: v for k, v in scan(env).items() if k != "new.so"}
    again = Counter()
    assert _indexed(env, files, read=again).objects[EnvPath("lib/libdep.so.1")].soname == (
        "libdep.so.B"
    )
    assert again.paths == [dep]
    backdate(env)
    _indexed(env)
    settled = Counter()
    _indexed(env, read=settled)
    assert settled.paths == []  # settled: kept
