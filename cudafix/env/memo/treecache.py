"""What a warm run may reuse of an environment's tree: directory listings and parsed dist-infos.

A warm run must not touch every file. pip and uv never write a file in place: they unlink,
create or rename into place, and each of those changes the directory's mtime and ctime. So
an unchanged directory's listing, and the lstat of its files, are reused; what an in-place
overwrite could change without touching the directory is lstat'ed on every run anyway
(:func:`watched`: every file but bytecode, and the paths the caller marks). A dist-info is
re-parsed when the stat of its RECORD, METADATA, INSTALLER or top_level.txt changed, or
when any symlink of the environment did (they decide which RECORD paths escape it).

File timestamps come from a clock coarser than ``time.time_ns``: a directory or RECORD
whose timestamp lies within :data:`RACY_NS` of the scan is not remembered, so a change in
the same tick as the scan can never hide behind an equal mtime (git's "racy clean" rule).

The cache is JSON text in ``.cudafix/cache/`` (written by ``statedir.save_cache_file``):
``tree-cache.json``, a header line (format, version, watched paths, how many listings) then
one line per directory, its name and its listing; and ``dist-infos.json``, the parsed
dist-infos with every RECORD row (:mod:`.distinfos`), read only by a reading that needs
them. A listing nothing changed in is written again as the text it was read from: after one
wheel changed, a save encodes the few directories it touched, not 2,000. A missing,
foreign, corrupt or cut-short file is an empty cache, never an error.
"""

from __future__ import annotations

import json
import os
import posixpath
import stat
import time
from collections.abc import Callable, Iterable, Mapping, Set
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from cudafix.env.memo import distinfos, stats
from cudafix.env.memo.stats import RACY_NS
from cudafix.env.statedir import TOOLS_STATE, compact_json, load_cache_lines, save_cache_lines
from cudafix.model.names import EnvPath

FORMAT = "cudafix-tree-cache"
VERSION = 9
"""4: no ctime per file (a hard link or copy moves it, and nothing decides on it);
5: RECORDs read as uv reads them (no field limit, BOM, strict quoting);
6: every file but bytecode watched (a cache of 5 left ``.py`` files unwatched);
7: a dist-info's RECORD entries kept as columns (paths, hashes, sizes), not one list per
row, and the parsed dist-infos in a file of their own;
8: the listings one line each, after a header line;
9: a RECORD's hashes one string and its sizes one array (-1: none), its odd rows apart."""
DIST_INFO_FILES = ("RECORD", "METADATA", "INSTALLER", "top_level.txt")
"""The files of a dist-info that the parsed distribution is made of."""

DirKey = tuple[int, int, int, int]
"""(st_dev, st_ino, st_mtime_ns, st_ctime_ns) of a directory."""


class FileStat(NamedTuple):
    """What ``lstat`` said about one path in the environment.

    A named tuple rather than a frozen dataclass: a warm run builds one per file from the
    cache, and a tuple is several times cheaper to make.
    """

    kind: str
    """``file``, ``symlink`` or ``other``."""
    size: int
    mode: int
    dev: int
    ino: int
    mtime_ns: int
    link_target: str | None = None


@dataclass
class _Listing:
    key: DirKey
    files: dict[str, FileStat]
    subdirs: tuple[str, ...]
    watched: tuple[str, ...] | None = None
    """Names lstat'ed again on reuse; None until decided (at save, from :func:`watched`)."""
    text: str | None = None
    """The JSON it was read from, while nothing in it changed (written again as it was)."""


def watched(path: str, st: FileStat) -> bool:
    """Paths lstat'ed on every run even in an unchanged directory: every one but bytecode.

    A write in place keeps the directory's mtime, and the diagnosis depends on the bytes of
    more than libraries and executables (what the loader reads) and dist-info files (what
    the distribution cache is keyed on): doctor hashes any file of a library distribution
    whose mtime is newer than its RECORD (``torch/__init__.py`` overwritten in place holds
    another build's bytes). Bytecode is derived data no finding rests on.
    """
    return st.kind != "file" or not (path.endswith(".pyc") or "/__pycache__/" in f"/{path}")


class TreeCache:
    """Memo of one environment's listings and parsed dist-infos, loaded and saved as JSON.

    Mutable on purpose, like ``HashCache``: a run reads through it and it remembers what
    the run saw; :meth:`save` writes only when something changed.
    """

    def __init__(self) -> None:
        self._listings: dict[str, _Listing] = {}
        self._watch: set[str] = set()
        self._dists: dict[str, tuple[Any, Any]] = {}
        self._used_dists: set[str] = set()
        self._dists_read = True
        """Whether the dist-infos were loaded (else they are neither given nor saved)."""
        self._dirty = False
        self._dists_dirty = False
        self.reused_dirs = 0
        """Directories whose listing this run reused (0 on a cold run)."""
        self.scanned_dirs = 0
        self.restatted = 0
        """Files of reused listings lstat'ed again because they are watched."""

    # -- the walk ---------------------------------------------------------------------------

    def walk(self, prefix: Path) -> dict[EnvPath, FileStat]:
        """lstat every non-directory under ``prefix`` (symlinked dirs not descended; the
        tools' state in it, :data:`~cudafix.env.statedir.TOOLS_STATE`, left out), reusing
        unchanged directories' listings."""
        start = time.time_ns()
        fresh: dict[str, _Listing] = {}
        out: dict[EnvPath, FileStat] = {}
        stack: list[str] = [""]
        while stack:
            rel = stack.pop()
            full = f"{prefix}/{rel}" if rel else str(prefix)
            listing = self._list(full, rel, start)
            if listing is None:
                continue
            fresh[rel] = listing
            base = rel + "/" if rel else ""
            for name, st in listing.files.items():
                out[EnvPath(base + name)] = st
            stack.extend(base + d for d in listing.subdirs)
        if fresh.keys() != self._listings.keys():
            self._dirty = True
        self._listings = fresh
        return dict(sorted(out.items()))

    def listed(self) -> Set[str]:
        """The directories the last walk listed (``""``: the prefix itself). A path whose
        parent is one of them, and which is neither in the walk's files nor listed itself,
        was not there: no lstat needs to ask (the prefix's own :data:`TOOLS_STATE` aside)."""
        return self._listings.keys()

    def _list(self, full: str, rel: str, start: int) -> _Listing | None:
        try:
            st = stats.stat(full) if not rel else stats.lstat(full)
        except OSError:
            return None
        if not stat.S_ISDIR(st.st_mode):
            return None  # replaced by a file or symlink since the parent was listed
        key: DirKey = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
        old = self._listings.get(rel)
        if old is not None and old.key == key:
            self.reused_dirs += 1
            files, same = self._refresh(full, rel, old)
            return _Listing(key, files, old.subdirs, old.watched, old.text if same else None)
        self.scanned_dirs += 1
        listing = _scan(full, rel, key)
        if max(st.st_mtime_ns, st.st_ctime_ns) >= start - RACY_NS:
            listing.key = (-1, -1, -1, -1)  # too recent to vouch for: list it again next run
        self._dirty = True
        return listing

    def _refresh(self, full: str, rel: str, old: _Listing) -> tuple[dict[str, FileStat], bool]:
        """The cached stats, with every watched path lstat'ed again; and whether all held."""
        out = dict(old.files)
        same = True
        names = old.watched if old.watched is not None else self._watched_names(rel, old)
        for name in names:
            if name not in out:
                continue
            self.restatted += 1
            new = _lstat(f"{full}/{name}")
            if new is None:
                del out[name]  # vanished during the run: as a fresh walk would see it
                same = False
            elif new != out[name]:
                out[name] = new
                self._dirty, same = True, False
        return out, same

    def _watched_names(self, rel: str, listing: _Listing) -> tuple[str, ...]:
        base = rel + "/" if rel else ""
        return tuple(
            name
            for name, st in listing.files.items()
            if base + name in self._watch or watched(base + name, st)
        )

    def watch(self, paths: Iterable[str]) -> None:
        """Also lstat ``paths`` on every run (shared paths, ELF objects)."""
        before = len(self._watch)
        self._watch.update(paths)
        self._dirty |= len(self._watch) != before

    def read_paths(self) -> list[str]:
        """Every directory the walk listed and every watched file: what may change an answer
        read from this tree (:mod:`cudafix.env.memo.answers`); ``.`` is the prefix itself."""
        out: list[str] = []
        for rel, listing in self._listings.items():
            out.append(rel or ".")
            base = rel + "/" if rel else ""
            names = listing.watched
            if names is None:
                names = self._watched_names(rel, listing)
            out.extend(base + name for name in names)
        return out

    # -- dist-infos -------------------------------------------------------------------------

    def distribution(self, key: object, dist_info: str, parse: Callable[[], Any]) -> Any:
        """The parsed dist-info, from the cache when ``key`` (JSON-able) is unchanged."""
        self._used_dists.add(dist_info)
        hit = self._dists.get(dist_info)
        if hit is not None and hit[0] == key:
            return hit[1]
        value = parse()
        if key is not None:
            self._dists[dist_info] = (key, value)
            self._dists_dirty = True
        return value

    # -- persistence ------------------------------------------------------------------------

    @classmethod
    def load(cls, cache_file: Path, *, dists: bool = True) -> TreeCache:
        """A saved cache; a missing, foreign-version or corrupt file gives an empty one.

        The parsed dist-infos, which hold every RECORD row, are a file of their own
        (:func:`dists_file`), read only with ``dists``: :meth:`read_paths` needs the listings
        alone, and a cache loaded without them never saves.
        """
        cache = cls()
        cache._dists_read = dists
        found = load_cache_lines(cache_file, FORMAT, VERSION)
        try:
            if found is not None:
                header, lines = found
                cache._listings = dict(map(_listing_line, lines))
                cache._watch = {str(p) for p in header["watch"]}
                if len(cache._listings) != header["dirs"]:
                    raise ValueError("cut short")
        except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError):
            cache._listings, cache._watch = {}, set()
        cache._dists = distinfos.load(dists_file(cache_file)) if dists else {}
        return cache

    def save(self, cache_file: Path) -> bool:
        """Write the cache if this run changed it (each of its two files only if changed);
        False when it could not be written."""
        ok = True
        if self._dists_read:
            for gone in set(self._dists) - self._used_dists:
                del self._dists[gone]
                self._dists_dirty = True
            if self._dists_dirty:
                ok = distinfos.save(dists_file(cache_file), self._dists)
                self._dists_dirty = not ok
        if not self._dirty:
            return ok
        lines = []
        for rel, listing in self._listings.items():
            names = self._watched_names(rel, listing)  # read_paths reuses them
            if listing.text is None or names != listing.watched:
                listing.text = compact_json(_encode_listing(listing, names))
            listing.watched = names
            lines.append(f"{compact_json(rel)}\t{listing.text}")
        header = {"watch": sorted(self._watch), "dirs": len(lines)}
        saved = save_cache_lines(cache_file, FORMAT, VERSION, header, lines)
        self._dirty = not saved
        return ok and saved


def dists_file(cache_file: Path) -> Path:
    """Where the parsed dist-infos of the tree cache in ``cache_file`` are kept."""
    return cache_file.with_name("dist-infos.json")


def stat_key(st: FileStat | None) -> list[int] | None:
    """A JSON-able identity of a file's stat (None when absent)."""
    if st is None:
        return None
    return [st.dev, st.ino, st.size, st.mtime_ns]


def racy(st: FileStat | None) -> bool:
    """A file changed within :data:`RACY_NS` of now: its stat cannot vouch for its bytes."""
    return st is not None and st.mtime_ns >= time.time_ns() - RACY_NS


def symlink_fingerprint(prefix: Path, files: Mapping[EnvPath, FileStat]) -> list[Any]:
    """Every symlink of the environment, and where those leaving it resolve to.

    Which RECORD paths escape the environment depends only on these and on the prefix.
    """
    out: list[Any] = [os.path.realpath(prefix)]
    for path, st in files.items():
        if st.kind != "symlink":
            continue
        target = st.link_target or ""
        joined = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
        outside = target.startswith("/") or joined == ".." or joined.startswith("../")
        out.append([path, target, os.path.realpath(prefix / path) if outside else None])
    return out


def _scan(full: str, rel: str, key: DirKey) -> _Listing:
    files: dict[str, FileStat] = {}
    subdirs: list[str] = []
    try:
        it = os.scandir(full)
    except OSError:
        return _Listing(key, files, ())
    with it:
        for entry in it:
            if not rel and entry.name in TOOLS_STATE:
                continue  # cudafix's and uv's own state, not the environment's
            try:
                if entry.is_dir(follow_symlinks=False):
                    subdirs.append(entry.name)
                    continue
                st = stats.entry_lstat(entry)
                link = os.readlink(entry.path) if stat.S_ISLNK(st.st_mode) else None  # noqa: PTH115
            except OSError:
                continue
            files[entry.name] = _from_stat(st, link)
    return _Listing(key, files, tuple(subdirs))


def _lstat(full: str) -> FileStat | None:
    try:
        st = stats.lstat(full)
        if stat.S_ISDIR(st.st_mode):
            return None
        link = os.readlink(full) if stat.S_ISLNK(st.st_mode) else None  # noqa: PTH115
    except OSError:
        return None
    return _from_stat(st, link)


def _from_stat(st: os.stat_result, link: str | None) -> FileStat:
    if stat.S_ISLNK(st.st_mode):
        kind = "symlink"
    elif stat.S_ISREG(st.st_mode):
        kind = "file"
    else:
        kind = "other"
    return FileStat(kind, st.st_size, st.st_mode, st.st_dev, st.st_ino, st.st_mtime_ns, link)


def _encode_listing(listing: _Listing, watched_names: tuple[str, ...]) -> list[Any]:
    dev = listing.key[0]
    rows = []
    for name, s in listing.files.items():
        row: list[Any] = [name, s.size, s.mode, s.ino, s.mtime_ns, s.link_target]
        if s.dev != dev:
            row.append(s.dev)
        rows.append(row)
    return [list(listing.key), list(listing.subdirs), rows, list(watched_names)]


def _listing_line(line: str) -> tuple[str, _Listing]:
    """One line of the cache: a directory's name and its listing, which keeps its text."""
    name, tab, text = line.partition("\t")
    rel = json.loads(name)
    if not tab or not isinstance(rel, str):
        raise ValueError("not a listing line")
    listing = _decode_listing(json.loads(text))
    listing.text = text
    return rel, listing


def _decode_listing(row: list[Any]) -> _Listing:
    key, subdirs, rows, names = row
    dev = int(key[0])
    files: dict[str, FileStat] = {}
    kinds = {stat.S_IFREG: "file", stat.S_IFLNK: "symlink"}
    for r in rows:
        name, size, mode, ino, mtime, link = r[:6]
        kind = kinds.get(stat.S_IFMT(mode), "other")
        st_dev = r[6] if len(r) > 6 else dev
        files[name] = FileStat(kind, size, mode, st_dev, ino, mtime, link)
    return _Listing(
        (int(key[0]), int(key[1]), int(key[2]), int(key[3])),
        files,
        tuple(map(str, subdirs)),
        tuple(map(str, names)),
    )
