"""The index of facts never answers what reading the files would not.

For random sequences of additions, deletions, in-place edits, replacements, hard links and
chmods of real ELF objects, Python sources (listed in a RECORD or not) and other files (some
named by bytes that are not UTF-8), the
answers read through the index (ELF verdicts, soname literals, sha256 digests) equal a cold
reading of the same tree at every step, and only the files whose stat key moved are read.
"""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
from contextlib import closing
from dataclasses import replace
from pathlib import Path

import pytest

from cudafix.env.hashing import HashCache, hash_path
from cudafix.env.memo.index import FactIndex, StatKey, stat_key
from cudafix.env.pysources import python_literals
from cudafix.linker.elf import ElfInfo, ElfProblem
from cudafix.linker.elfindex import ElfIndex, index_environment, loadable, read_elf_nofollow
from tests.support.facts import SITE, Dist, facts
from tests.support.loadertree import ARCH, lib, scan

SOURCES = (
    b'LIB = "libfoo.so.1"\n',
    b'NAMES = ("libbar.so.2", "libfoo.so.1")\n',
    b'name = f"libcufft.so.{major}"\n',
    b"x = 1\n",
    b"",
)
NAMES = ("libx.so.1", "liby.so", "mod.py", "data.bin", "m.py")
PLAIN = (b"not an object\n", b"/* GNU ld script */\nGROUP ( libc.so.6 )\n", b"\x7fELF broken")


@pytest.fixture(scope="module")
def objects(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, ...]:
    """The bytes of a few real shared objects that differ in what they say."""
    out = tmp_path_factory.mktemp("objects")
    one = lib(out / "libone.so.1")
    two = lib(out / "libtwo.so.1", needed=[one], rpath=["$ORIGIN"])
    other = lib(out / "libone.so.2", soname="libone.so.2", dlopen=["libbar.so.2"])
    return tuple(p.read_bytes() for p in (one, two, other))


class World:
    """A tree under ``prefix`` changed at random, with one RECORD listing some of its files."""

    def __init__(self, prefix: Path, rng: random.Random, objects: tuple[bytes, ...]) -> None:
        self.prefix, self.rng, self.objects = prefix, rng, objects
        self.listed: set[str] = set()
        self.mtime = 1_700_000_000 * 10**9
        self.serial = 0
        (prefix / SITE).mkdir(parents=True, exist_ok=True)

    def content(self, name: str) -> bytes:
        if name.endswith(".py"):
            return self.rng.choice(SOURCES)
        return self.rng.choice([*self.objects, *PLAIN])

    def files(self) -> list[str]:
        return sorted(str(p) for p in scan(self.prefix) if str(p).startswith(SITE + "/"))

    def _write(self, rel: str, data: bytes) -> None:
        full = self.prefix / rel
        full.parent.mkdir(parents=True, exist_ok=True)
        with open(full, "r+b" if full.exists() else "wb") as fh:  # in place: the same inode
            fh.write(data)
            fh.truncate()
        self._stamp(rel)

    def _stamp(self, rel: str) -> None:
        """Every write moves mtime (as one a clock tick after the last does)."""
        self.mtime += self.rng.randrange(1, 10**9)
        os.utime(self.prefix / rel, ns=(self.mtime, self.mtime))

    def step(self) -> str:
        have = self.files()
        self.serial += 1
        op = self.rng.choice(["add", "add", "edit", "edit", "delete", "replace", "link", "chmod"])
        if not have or op == "add":
            name = self.rng.choice([*NAMES, os.fsdecode(b"odd\xff.py"), os.fsdecode(b"lib\xff.so")])
            rel = f"{SITE}/{self.rng.choice(['pkg', 'pkg/sub', 'other'])}/{self.serial}{name}"
            self._write(rel, self.content(rel))
            if self.rng.random() < 0.7:
                self.listed.add(rel)
            return f"add {rel}"
        rel = self.rng.choice(have)
        full = self.prefix / rel
        if op == "edit":
            self._write(rel, self.content(rel))
        elif op == "delete":
            full.unlink()
            self.listed.discard(rel)
        elif op == "replace":  # a new inode renamed over, as an installer writes
            tmp = full.with_name(full.name + ".tmp")
            tmp.write_bytes(self.content(rel))
            os.utime(tmp, ns=(self.mtime, self.mtime))  # even with the old mtime kept
            tmp.rename(full)
        elif op == "link":  # a hard link: the same key under a new path
            new = f"{rel}.link{self.serial}"
            os.link(full, self.prefix / new)
            self.listed.add(new)
        else:  # chmod moves only ctime: nothing needs reading
            full.chmod(0o600 if full.stat().st_mode & 0o044 else 0o644)
        return f"{op} {rel}"

    def inventory_files(self) -> dict[str, str]:
        return {p[len(SITE) + 1 :]: "x" for p in self.listed}


class Reads:
    def __init__(self) -> None:
        self.paths: set[str] = set()

    def __call__(self, path: str) -> ElfInfo | ElfProblem:
        self.paths.add(path)
        return read_elf_nofollow(path)


def _read(world: World, index: FactIndex | None, reads: Reads) -> tuple[object, ...]:
    prefix = world.prefix
    files = scan(prefix)
    elf: ElfIndex = index_environment(prefix, files, index, expected=ARCH, read=reads)
    inventory = replace(facts([Dist("pkg", "1.0", world.inventory_files())]).inventory, files=files)
    literals = python_literals(prefix, inventory, index)
    loose, strict = HashCache(prefix, index), HashCache(prefix, index, strict=True)
    digests = {p: (loose(p), strict(p)) for p in files}
    loose.save()
    return elf, dict(literals), digests


def _utf8(path: str) -> bool:
    """Whether a name can be a key of the index (one that is not is read every time)."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "replace") == path


def _keys(prefix: Path, *, read: bool = False) -> dict[str, tuple[int, int, int, int]]:
    """Each regular file's stat key (device, inode, size, mtime); ``read``: only those of
    the files the ELF index reads (:func:`~cudafix.linker.elfindex.loadable`; no object
    here needs a file by another name)."""
    return {
        str(prefix / p): (st.dev, st.ino, st.size, st.mtime_ns)
        for p, st in scan(prefix).items()
        if st.kind == "file" and (not read or loadable(p, st))
    }


@pytest.mark.parametrize("seed", range(6))
def test_indexed_answers_equal_a_cold_reading_at_every_step(
    tmp_path: Path, objects: tuple[bytes, ...], seed: int
) -> None:
    world = World(tmp_path / "venv", random.Random(seed), objects)
    before: dict[str, tuple[int, int, int, int]] = {}
    unnamed: set[StatKey] = set()  # keys of files no index row can name
    for number in range(30):
        done = world.step()
        with FactIndex.open(world.prefix) as index:
            assert index.kept
            reads = Reads()
            warm = _read(world, index, reads)
        cold = _read(world, None, Reads())
        assert warm == cold, (number, done)
        elf, _, digests = warm
        assert isinstance(elf, ElfIndex) and isinstance(digests, dict)
        for path, (loose, strict) in digests.items():
            assert loose == strict == hash_path(world.prefix / path), (number, done, path)
        after = _keys(world.prefix)
        read = _keys(world.prefix, read=True)
        moved = {p for p, key in read.items() if before.get(p) != key or not _utf8(p)}
        assert reads.paths == moved, (number, done)  # exactly the files whose key moved
        assert elf.parsed == len(moved)
        before = read
        now = {stat_key(*key) for key in after.values()}
        unnamed |= {stat_key(*key) for p, key in after.items() if not _utf8(p)}
        with closing(sqlite3.connect(world.prefix / ".cudafix" / "cache" / "index.sqlite")) as db:
            kept = set(db.execute("SELECT dev, ino, size, mtime_ns FROM digests"))
        assert kept <= now | unnamed, (number, done)  # no digest outlives its bytes' key


def test_a_copied_index_answers_nothing_for_other_inodes(
    tmp_path: Path, objects: tuple[bytes, ...]
) -> None:
    """An index copied with its tree (``cp -a``: new inodes) gives back nothing stale:
    every file is read again, and the answers equal a cold reading."""
    world = World(tmp_path / "venv", random.Random(99), objects)
    for _ in range(12):
        world.step()
    with FactIndex.open(world.prefix) as index:
        _read(world, index, Reads())
    copy = tmp_path / "copy"
    shutil.copytree(world.prefix, copy, symlinks=True)
    twin = World(copy, random.Random(0), objects)
    twin.listed = set(world.listed)
    with FactIndex.open(copy) as index:
        reads = Reads()
        warm = _read(twin, index, reads)
    assert warm == _read(twin, None, Reads())
    assert reads.paths == set(_keys(copy, read=True))
