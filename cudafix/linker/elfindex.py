"""Which files of an environment are ELF objects, and what they need; plus a view for the loader.

``index_environment`` parses every file a loader could load (:func:`loadable`: one named
as a library, an executable, one some object needs by its exact name) once and remembers
the verdict in the environment's index of facts (:mod:`cudafix.env.memo.index`) under its
stat key (st_dev, st_ino, size, mtime_ns), so a second scan opens nothing that did not
change.
``EnvironmentView`` answers the resolver's file lookups from the index (optionally with
some paths removed) without touching the environment again.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from cudafix.env.inventory import FileStat
from cudafix.env.memo.index import PLAIN, UNREAD, ElfRow, FactIndex, StatKey, stat_key
from cudafix.env.readmany import read_each
from cudafix.env.statedir import STATE_DIR_NAME
from cudafix.linker.elf import ElfInfo, ElfProblem, read_elf, verdict_from_json, verdict_to_json
from cudafix.linker.hostview import HostView
from cudafix.model.names import EnvPath, is_so_name

log = logging.getLogger("cudafix.linker.elfindex")

_NOT_ELF = ("not-elf", "linker-script")

Reader = Callable[[str], "ElfInfo | ElfProblem"]
"""Reads one file's verdict, given its absolute path as ``str``; called from several threads
at once on a first run (:mod:`cudafix.env.readmany`), so it shares no state."""
Verdict = ElfInfo | ElfProblem


@dataclass(frozen=True)
class ElfIndex:
    """The ELF facts of one environment, keyed by path relative to its prefix."""

    objects: Mapping[EnvPath, ElfInfo]
    problems: Mapping[EnvPath, ElfProblem]
    """Broken ELF files, and ``.so``-named files that are not ELF (linker scripts)."""
    foreign: frozenset[EnvPath]
    """Objects of another class/machine than ``expected``: reported, never resolved against."""
    expected: tuple[int, str]
    """(ELF class, machine) of the interpreter the environment runs."""
    parsed: int = field(default=0, compare=False)
    """Files actually opened by this scan (0 on a fully warm cache)."""


def read_elf_nofollow(path: str) -> ElfInfo | ElfProblem:
    """The index never reads through a symlink (it could point out of the environment); it
    reads each object's soname literals too, cached with the rest. Only a library-named
    file is searched for a linker script: in any other, one is no finding (:func:`_build`)."""
    return read_elf(path, follow_symlinks=False, literals=True, scripts=is_so_name(path))


def index_environment(
    prefix: Path,
    files: Mapping[EnvPath, FileStat],
    index: FactIndex | None,
    *,
    expected: tuple[int, str],
    read: Reader = read_elf_nofollow,
) -> ElfIndex:
    """Classify every file of ``files`` a loader could load (:func:`loadable`); reuse the
    verdicts ``index`` holds for files whose stat key (device, inode, size, mtime) did not
    move, and read the others several at once (:mod:`cudafix.env.readmany`).

    ``expected``: the (ELF class, machine) the environment's interpreter runs
    (:meth:`HostView.arch <cudafix.linker.hostview.HostView.arch>`); others are foreign.

    Most files are not ELF: the index keeps only their stat key (``unread`` where no
    loader could load them), so a warm run compares four integers per file and decodes
    nothing but the ELF objects. Only the verdicts read now are written, and the paths
    gone forgotten.
    """
    stored = index.elf_rows() if index is not None else {}
    fresh: dict[str, ElfRow] = {}
    seen: set[str] = set()
    moved: list[StatKey] = []
    opened: list[str] = []
    verdicts: dict[str, Verdict | None] = {}  # in the order classified; None: not ELF
    unread_now: list[tuple[str, StatKey]] = []  # classified, its verdict still to read

    def keep(rel: str, stat: FileStat) -> None:
        """A file not read: only its key, so a digest of its old bytes is forgotten."""
        seen.add(rel)
        key = stat_key(stat.dev, stat.ino, stat.size, stat.mtime_ns)
        row = stored.get(rel)
        if row is None or row[0] != key:
            if row is not None:
                moved.append(row[0])
            fresh[rel] = (key, UNREAD, None)

    def classify(rel: str, stat: FileStat) -> None:
        seen.add(rel)
        key = stat_key(stat.dev, stat.ino, stat.size, stat.mtime_ns)
        row = stored.get(rel)
        if row is not None and row[0] != key:
            moved.append(row[0])
        if row is not None and row[0] == key and row[1] != UNREAD:
            if row[1] == PLAIN:
                verdicts[rel] = None
                return
            hit = _decode(row[1], row[2])
            if hit is not None:
                verdicts[rel] = hit
                return
        verdicts[rel] = None  # its place kept: the verdict is read with the others
        unread_now.append((rel, key))

    def read_classified() -> None:
        """Read the verdicts :func:`classify` left, several at once (a cold first reading
        waits on the disk for hundreds of objects)."""
        done = read_each(read, [f"{prefix}/{rel}" for rel, _ in unread_now])
        for (rel, key), verdict in zip(unread_now, done, strict=True):
            opened.append(rel)
            if isinstance(verdict, ElfProblem) and verdict.reason == "not-elf":
                fresh[rel] = (key, PLAIN, None)
            else:
                verdicts[rel] = verdict
                kind, body = verdict_to_json(verdict)
                fresh[rel] = (key, kind, json.dumps(body, separators=(",", ":")))
        unread_now.clear()

    unread: dict[str, FileStat] = {}
    for rel, stat in files.items():
        if stat.kind != "file" or rel.startswith(STATE_DIR_NAME + "/") or rel.endswith(".pyc"):
            continue  # bytecode: not even its key (a warm walk does not stat it again)
        if loadable(rel, stat):
            classify(rel, stat)
        else:
            unread[rel] = stat
    read_classified()
    while asked := _named_like_a_need(unread, (v for v in verdicts.values() if v is not None)):
        for name in asked:
            classify(name, unread.pop(name))
        read_classified()
    for name, stat in unread.items():
        keep(name, stat)
    plain = [rel for rel, verdict in verdicts.items() if verdict is None]
    found = {rel: verdict for rel, verdict in verdicts.items() if verdict is not None}
    gone = stored.keys() - seen
    moved += (row[0] for path in gone if (row := stored[path]) is not None)
    if index is not None and (fresh or gone) and not index.save_elf(fresh, gone, moved):
        log.debug("could not write the ELF verdicts to the index")
    built = _build(prefix, plain, found, expected, len(opened))
    odd = _odd_libraries(files)
    return replace(built, problems={**built.problems, **odd}) if odd else built


def loadable(path: str, stat: FileStat) -> bool:
    """Whether a loader could be asked to load the file: one named as a library is
    (``libfoo.so.1``; every extension module's name ends in ``.so``), and so is an
    executable (any execute bit). Nothing else is opened for its ELF facts (a torch venv's
    headers, sources and bytecode: 22k of its 22.3k files), nor is what it holds reported;
    a file named like some object's DT_NEEDED entry is read too (:func:`index_environment`).
    Literals name libraries, run-time rows load them, by names like these. Bytecode is not
    even kept by its key: Python's import alone writes and reads it."""
    return bool(stat.mode & 0o111) or (".so" in path and is_so_name(path))


def _named_like_a_need(unread: Mapping[str, FileStat], found: Iterable[Verdict]) -> list[str]:
    """Files of ``unread`` whose name some object found asks for (DT_NEEDED): ld.so
    searches for that exact name, whatever it is. A need named as a library names no
    unread file (those are all read), so most environments look at none of them."""
    needed = {
        name
        for v in found
        if isinstance(v, ElfInfo)
        for n in v.needed
        if not is_so_name(name := n.rpartition("/")[2])
    }
    return [rel for rel in unread if rel.rpartition("/")[2] in needed] if needed else []


def _decode(kind: str, body: str | None) -> Verdict | None:
    """One stored verdict; None for a malformed one (the file is read again, never trusted)."""
    try:
        return verdict_from_json(kind, json.loads(body)) if body is not None else None
    except ValueError:
        return None


def _odd_libraries(files: Mapping[EnvPath, FileStat]) -> dict[EnvPath, ElfProblem]:
    """Library-named entries that are not regular files: never opened, only reported.

    A FIFO would block ``open()``; a dangling or escaping symlink loads nothing.
    """
    odd: dict[EnvPath, ElfProblem] = {}
    for rel, stat in files.items():
        if not is_so_name(rel) or stat.kind == "file":
            continue
        if stat.kind != "symlink":
            odd[rel] = ElfProblem("unreadable", "not a regular file (FIFO, socket or device)")
            continue
        target = posixpath.normpath(posixpath.join(posixpath.dirname(rel), stat.link_target or ""))
        if (stat.link_target or "").startswith("/") or target.startswith("../"):
            odd[rel] = ElfProblem(
                "unreadable", f"symlink to {stat.link_target}, outside the environment"
            )
        elif EnvPath(target) not in files:
            odd[rel] = ElfProblem("unreadable", f"dangling symlink to {stat.link_target}")
        elif _loops(files, EnvPath(target)):
            odd[rel] = ElfProblem(
                "unreadable", f"symlink loop through {stat.link_target}: nothing can load it"
            )
    return odd


def _loops(files: Mapping[EnvPath, FileStat], start: EnvPath) -> bool:
    """Whether following in-environment symlinks from ``start`` never reaches a file."""
    here, seen = start, set[EnvPath]()
    while (stat := files.get(here)) is not None and stat.kind == "symlink":
        if here in seen or len(seen) >= _MAX_LINKS:
            return True
        seen.add(here)
        link = stat.link_target or ""
        if link.startswith("/"):
            return False
        here = EnvPath(posixpath.normpath(posixpath.join(posixpath.dirname(here), link)))
    return False


def _build(
    prefix: Path,
    plain: Iterable[str],
    found: Mapping[str, Verdict],
    expected: tuple[int, str],
    parsed: int,
) -> ElfIndex:
    objects: dict[EnvPath, ElfInfo] = {}
    problems: dict[EnvPath, ElfProblem] = {}
    for rel, verdict in found.items():
        path = EnvPath(rel)
        if isinstance(verdict, ElfInfo):
            objects[path] = verdict
        elif verdict.reason not in _NOT_ELF or is_so_name(rel):
            problems[path] = verdict
    for rel in plain:
        if is_so_name(rel):  # a library name without ELF magic: worth reporting
            problems[EnvPath(rel)] = ElfProblem("not-elf", f"{prefix / rel}: no ELF magic")
    foreign = frozenset(p for p, i in objects.items() if (i.elf_class, i.machine) != expected)
    return ElfIndex(objects, problems, foreign, expected, parsed)


# --- views -------------------------------------------------------------------------------


_MAX_LINKS = 40  # ld.so/kernel give up after 40 symlinks (ELOOP)


class EnvironmentView:
    """The loader's view of an environment as the index saw it, minus ``removed`` paths.

    Paths inside the prefix answer from the index; symlinks in the environment are
    followed only within it (a link out of the prefix is absent and never read). Paths
    outside the prefix are system libraries, looked up in ``system`` (the run's host view).
    """

    def __init__(
        self,
        prefix: Path,
        index: ElfIndex,
        files: Mapping[EnvPath, FileStat],
        removed: frozenset[EnvPath] = frozenset(),
        *,
        system: HostView,
    ) -> None:
        self.prefix = posixpath.normpath(str(prefix.absolute()))
        self._real_prefix = os.path.realpath(self.prefix)
        self.index = index
        self.files = files
        self.removed = removed
        self.system = system
        self._located: dict[str, EnvPath | None] = {}
        self._dirs: frozenset[str] | None = None

    def without(self, removed: frozenset[EnvPath]) -> EnvironmentView:
        """The same environment after deleting ``removed`` (shares the system memo)."""
        view = EnvironmentView(
            Path(self.prefix), self.index, self.files, self.removed | removed, system=self.system
        )
        view._dirs = self._dirs  # same files, same directories
        return view

    def elf(self, path: str) -> ElfInfo | None:
        rel = self._relative(path)
        if rel is None:
            verdict = self.system.lookup(path)
            return verdict if isinstance(verdict, ElfInfo) else None
        located = self._locate(rel)
        return self.index.objects.get(located) if located is not None else None

    def problem(self, path: str) -> ElfProblem | None:
        rel = self._relative(path)
        if rel is None:
            verdict = self.system.lookup(path)
            return verdict if isinstance(verdict, ElfProblem) else None
        located = self._locate(rel)
        if located is None or located in self.index.objects:
            return None
        found = self.index.problems.get(located)
        return found or ElfProblem("not-elf", f"{path}: no ELF magic")

    def dir_exists(self, path: str) -> bool:
        """A directory holding at least one file of the environment (after symlinks)."""
        rel = self._relative(path)
        if rel is None:
            return self.system.dir_exists(path) if path != self.prefix else True
        located = self._locate_dir(rel)
        return located is not None

    def _locate_dir(self, rel: str) -> str | None:
        key = rel + "/"
        if key not in self._located:
            self._located[key] = self._follow_dir(rel)
        return self._located[key]

    def _follow_dir(self, rel: str) -> EnvPath | None:
        """``rel`` as a directory, through in-env symlinks; None when nothing is under it."""
        parts = rel.split("/")
        for i in range(len(parts)):
            stat = self.files.get(EnvPath("/".join(parts[: i + 1])))
            if stat is not None and stat.kind == "symlink":
                target = self._link_target(parts[:i], stat.link_target)
                if target is None:
                    return None
                rest = "/".join([target, *parts[i + 1 :]])
                return self._locate_dir(rest) if rest != rel else None  # type: ignore[return-value]
            if stat is not None:
                return None  # a file where a directory should be
        return EnvPath(rel) if rel in self._directories() else None

    def _directories(self) -> frozenset[str]:
        if self._dirs is None:
            # the parents of every file, then their ancestors: a few thousand directories
            # climbed once each, instead of every prefix of 20k paths
            dirs: set[str] = set()
            for parent in {p.rpartition("/")[0] for p in self.files}:
                while parent and parent not in dirs:
                    dirs.add(parent)
                    parent = parent.rpartition("/")[0]
            self._dirs = frozenset(dirs)
        return self._dirs

    def canonical(self, path: str) -> str:
        rel = self._relative(path)
        if rel is None:
            return self.system.canonical(path)
        located = self._locate(rel)
        return posixpath.join(self.prefix, located) if located is not None else path

    def _relative(self, path: str) -> str | None:
        for base in (self.prefix, self._real_prefix):
            if path.startswith(base + "/"):
                return path[len(base) + 1 :]
        return None

    def _locate(self, rel: str) -> EnvPath | None:
        if rel not in self._located:
            self._located[rel] = self._follow(rel)
        return self._located[rel]

    def _follow(self, rel: str) -> EnvPath | None:
        """Walk ``rel`` component by component, replacing in-env symlinks by their targets."""
        parts = rel.split("/")
        hops = 0
        i = 0
        while i < len(parts):
            current = "/".join(parts[: i + 1])
            stat = self.files.get(EnvPath(current))
            if current in self.removed:
                return None
            if stat is None:
                i += 1
                continue
            if stat.kind == "symlink":
                hops += 1
                target = self._link_target(parts[:i], stat.link_target)
                if target is None or hops > _MAX_LINKS:
                    return None
                parts, i = target.split("/") + parts[i + 1 :], 0
                continue
            last = i == len(parts) - 1
            return EnvPath(current) if last and stat.kind == "file" else None
        return None

    def _link_target(self, base: list[str], target: str | None) -> str | None:
        if not target:
            return None
        if target.startswith("/"):
            return self._relative(posixpath.normpath(target))
        joined = posixpath.normpath(posixpath.join("/".join(base), target))
        return None if joined == ".." or joined.startswith("../") else joined
