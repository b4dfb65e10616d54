"""Putting a snapshot back byte-identical, and proving it: restore, verify, detach.

A restore goes path by path and is idempotent (an identical live path is left alone), so an
interrupted rollback is run again rather than repaired. A symlink is restored as a symlink,
and nothing is done through a symlinked ancestor. A file written in place through a hard
link changed the snapshot too: :func:`written_in_place` finds those, and :func:`forget`
drops them from what a rollback restores.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import shutil
import stat
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TypeGuard

from cudafix.env.inventory import is_bytecode
from cudafix.env.memo.answers import TICK_NS
from cudafix.env.statedir import TxDir
from cudafix.faults import crash_point, fail_point
from cudafix.tx.difference import Difference, difference_text
from cudafix.tx.manifest import ROOT, Entry, Manifest, check_path, stored, write_json
from cudafix.tx.snapshot import _join, _link_or_copy, _listing, ancestors, sha256_file


def remove_path(path: Path) -> None:
    """Remove whatever is at ``path`` without following symlinks; missing is fine."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path)
    else:
        path.unlink()


def detach(prefix: Path, manifest: Manifest) -> list[str]:
    """Unlink live files the backend will rewrite, so no write can reach the snapshot."""
    done = []
    for e in manifest.entries:
        live = prefix / e.path
        if e.detach and e.kind == "file" and _same_inode(live, e):
            live.unlink()
            done.append(e.path)
    return done


def _same_inode(live: Path, e: Entry) -> bool:
    try:
        st = os.lstat(live)
    except FileNotFoundError:
        return False
    return (st.st_dev, st.st_ino) == (e.dev, e.ino)


def written_in_place(prefix: Path, manifest: Manifest) -> list[str]:
    """Snapshotted files something rewrote in place (same inode, other bytes).

    A hard-link snapshot shares the inode, so its copy changed too: those paths cannot be
    restored from it. Writers that replace files (uv, pip) create new inodes and are safe.
    A write shows as another size or mtime, or, when those were put back, as a moved
    ctime, whatever the link count or mode did: a link made or removed (``uv cache clean``
    unlinking uv's cached copy) or a chmod moves ctime too, but so does the write beside
    it, and only a copy could tell them apart.
    """
    return [
        e.path
        for e in manifest.entries
        if e.kind == "file" and _in_place(e, _lstat(f"{prefix}/{e.path}"))
    ]


def _in_place(e: Entry, st: os.stat_result | None) -> bool:
    """Whether the linked file ``e`` (whose live ``lstat`` is ``st``) was written in place;
    copies (``sha256`` set) were not linked."""
    if e.sha256 is not None or st is None:
        return False
    return (st.st_dev, st.st_ino) == (e.dev, e.ino) and _written(st, e)


def _written(st: os.stat_result, e: Entry) -> bool:
    if st.st_size != e.size or st.st_mtime_ns != e.mtime_ns:
        return True
    return e.ctime_ns != 0 and st.st_ctime_ns != e.ctime_ns


def mismatch(prefix: Path, e: Entry) -> Difference | None:
    """How the live path differs from entry ``e``, or None when it is identical."""
    return _differs(prefix, e, _lstat(f"{prefix}/{e.path}"))


def _lstat(path: str) -> os.stat_result | None:
    try:
        return os.lstat(path)  # a str: this runs once per snapshotted path
    except FileNotFoundError:
        return None


def _differs(prefix: Path, e: Entry, st: os.stat_result | None) -> Difference | None:
    """:func:`mismatch`, given the live path's ``lstat`` (None: it is not there)."""
    if st is None:
        return None if e.kind == "absent" else Difference(e.path, "missing")
    if e.kind == "absent":
        return Difference(e.path, "appeared")
    if e.kind == "dir":
        return None if stat.S_ISDIR(st.st_mode) else Difference(e.path, "not-a-directory")
    if e.kind == "symlink":
        ok = stat.S_ISLNK(st.st_mode) and str((prefix / e.path).readlink()) == e.target
        return None if ok else Difference(e.path, "not-the-symlink", target=e.target)
    if e.kind == "fifo":
        ok = stat.S_ISFIFO(st.st_mode) and stat.S_IMODE(st.st_mode) == e.mode
        return None if ok else Difference(e.path, "not-the-fifo")
    if not stat.S_ISREG(st.st_mode):
        return Difference(e.path, "not-a-regular-file")
    if e.sha256 is None:
        ok = _same_linked_file(st, e)
    else:
        ok = st.st_size == e.size and sha256_file(prefix / e.path) == e.sha256
        ok = ok and stat.S_IMODE(st.st_mode) == e.mode
    return None if ok else Difference(e.path, "content-or-mode")


def restore_entry(prefix: Path, tx: TxDir, e: Entry) -> None:
    """Put one entry back (idempotent: an identical live path is left alone)."""
    if e.kind == "dir" or mismatch(prefix, e) is None:
        return
    live = prefix / e.path
    fail_point("restore", e.path)
    remove_path(live)
    if e.kind == "absent":
        return
    if e.kind == "symlink":
        live.symlink_to(str(e.target))
    elif e.kind == "fifo":
        os.mkfifo(live, e.mode)
        live.chmod(e.mode)
    else:
        _link_or_copy(tx.snapshot / stored(e), live)
        live.chmod(e.mode)
    crash_point("restore-file")


def ensure_dir(prefix: Path, e: Entry) -> None:
    """Make ``e.path`` a real directory with its recorded mode (chmod only if it differs:
    an immutable directory with the right mode is left alone)."""
    live = prefix / e.path
    if not (live.is_dir() and not live.is_symlink()):
        remove_path(live)
        live.mkdir()
    set_dir_mode(live, e.mode)


def set_dir_mode(path: Path, mode: int) -> None:
    """chmod a real directory (never through a symlink), only when its mode differs."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) != mode:
            fail_point("restore", str(path))
            os.fchmod(fd, mode)
    finally:
        os.close(fd)


def new_names(
    prefix: Path, manifest: Manifest, unchanged: Collection[str] = frozenset()
) -> list[str]:
    """Paths that appeared in a touched directory since the snapshot (those
    ``unchanged`` are known to hold the same names, and are not listed)."""
    return [
        _join(directory, name)
        for directory, before in manifest.listings.items()
        if directory not in unchanged
        for name in sorted(set(_listing(prefix, directory) or ()) - set(before))
    ]


def verify(prefix: Path, manifest: Manifest) -> list[Difference]:
    """Every way the live tree differs from the manifest (empty: byte-identical).

    Bytecode (``__pycache__``, ``*.pyc``) is derived data: Python writes it again on import,
    and uv deletes it beside every ``.py`` it removes, also where the snapshot never held
    it. Its absence is no difference; anything present is still compared."""
    problems = [
        m
        for e in manifest.entries
        if (m := mismatch(prefix, e)) is not None
        and not (is_bytecode(e.path) and m.kind == "missing")
    ]
    modes = {e.path: e.mode for e in manifest.entries if e.kind == "dir"}
    for directory, before in manifest.listings.items():
        now = _listing(prefix, directory)
        if now is not None and now != before:
            extra = sorted(set(now) - set(before))
            if extra:
                problems.append(Difference(directory, "unexpected-names", tuple(extra)))
            missing = sorted(n for n in set(before) - set(now) if not is_bytecode(n))
            if missing:
                problems.append(Difference(directory, "missing-names", tuple(missing)))
        if now is None:
            if not is_bytecode(directory):
                problems.append(Difference(directory, "missing-directory"))
        elif directory != ROOT and stat.S_IMODE(os.lstat(prefix / directory).st_mode) != modes.get(
            directory
        ):
            problems.append(Difference(directory, "mode-differs"))
    return problems


@dataclass(frozen=True)
class Changes:
    """How the live tree differs from a manifest, path by path: what a rollback restores."""

    dirs: tuple[Entry, ...] = ()
    """Directories that are no longer a real directory, or have another mode."""
    new: tuple[str, ...] = ()
    """Paths that appeared in a snapshotted directory."""
    entries: tuple[Entry, ...] = ()
    """Other entries whose live path differs (missing, other content, mode, kind)."""
    in_place: tuple[str, ...] = ()
    """Hard-linked files rewritten in place (:func:`written_in_place`)."""

    @property
    def paths(self) -> int:
        """How many paths differ."""
        return len(self.dirs) + len(self.new) + len(self.entries) + len(self.in_place)

    def derived_only(self) -> bool:
        """Whether only bytecode changed (derived data an import writes): nothing did."""
        return all(
            is_bytecode(p)
            for p in (
                *(e.path for e in self.dirs),
                *self.new,
                *(e.path for e in self.entries),
                *self.in_place,
            )
        )


@dataclass(frozen=True)
class Seen:
    """Each path's stat as a snapshot took it (by full name), from ``since_ns`` on."""

    stats: Mapping[str, os.stat_result]
    since_ns: int

    def same_names(self, path: str, st: os.stat_result) -> bool:
        """Whether the directory at ``path``, whose ``lstat`` is now ``st``, still holds the
        names it held: the same inode, mtime and ctime as when seen, last changed a tick
        before the snapshot began (a change of its names moves both times, and any change
        after that tick gets a later ctime than the one seen)."""
        was = self.stats.get(path)
        return (
            was is not None
            and (was.st_ino, was.st_mtime_ns, was.st_ctime_ns)
            == (st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
            and was.st_ctime_ns < self.since_ns - TICK_NS
        )


def changes(
    prefix: Path,
    manifest: Manifest,
    *,
    in_place: bool = False,
    seen: Seen | None = None,
    held: Mapping[str, int] | None = None,
) -> Changes:
    """Every path that differs from the manifest, read with one ``lstat`` per path and one
    listing per directory (``in_place``: also the files rewritten in place).

    Given what the snapshot ``seen``, a directory whose names cannot have changed is not
    listed again; each of its files still names the inode the snapshot linked, so where
    that link is ``held`` open (by its name in the store) it is read by ``fstat``, which
    walks no path."""
    dirs, entries, found = [], [], []
    base = f"{prefix}/"
    same: set[str] = set()
    held = held or {}
    for e in manifest.entries:
        if e.kind == "dir":
            st = _lstat(base + e.path)
            if _dir_differs(e, st):
                dirs.append(e)
            elif seen is not None and st is not None and seen.same_names(base + e.path, st):
                same.add(e.path)
            continue
        linked = e.kind == "file" and e.sha256 is None  # a copy is another inode
        fd = held.get(stored(e)) if linked and same else None
        if fd is not None and e.path.rpartition("/")[0] in same:
            st = os.fstat(fd)
        else:
            st = _lstat(base + e.path)
        if _same_linked_file(st, e):  # the common case, first: 22k files on a torch venv
            if in_place and _in_place(e, st):
                found.append(e.path)
            continue
        if _differs(prefix, e, st) is not None:
            entries.append(e)
        if in_place and e.kind == "file" and _in_place(e, st):
            found.append(e.path)
    appeared = new_names(prefix, manifest, unchanged=same)
    return Changes(tuple(dirs), tuple(appeared), tuple(entries), tuple(found))


def _same_linked_file(st: os.stat_result | None, e: Entry) -> TypeGuard[os.stat_result]:
    """Whether ``st`` is the hard-linked file ``e`` as snapshotted, its bytes and mode (so
    :func:`_differs` finds nothing; a write in place is told by its ctime alone)."""
    return (
        st is not None
        and e.kind == "file"
        and e.sha256 is None
        and st.st_ino == e.ino
        and st.st_dev == e.dev
        and st.st_size == e.size
        and st.st_mtime_ns == e.mtime_ns
        and st.st_mode == stat.S_IFREG | e.mode
    )


def _dir_differs(e: Entry, st: os.stat_result | None) -> bool:
    """Whether the directory entry ``e`` (never the prefix's own) is no longer a directory
    of its mode, its ``lstat`` being ``st``."""
    return st is None or not stat.S_ISDIR(st.st_mode) or stat.S_IMODE(st.st_mode) != e.mode


Progress = Callable[[int, int], None]
"""Told how many of the changed paths a rollback has restored, and of how many."""


def _no_progress(_done: int, _total: int) -> None:
    return None


PROGRESS_EVERY = 500
"""A rollback tells its progress every this many paths (and at the end)."""


@dataclass(frozen=True)
class Restored:
    """What :func:`restore` did: how many paths differed, and which still do."""

    changed: int
    """Paths that differed from the snapshot (the only ones restored)."""
    left: list[str]
    """Paths that still differ, each with the error that stopped it."""


def restore(
    prefix: Path, tx: TxDir, manifest: Manifest, progress: Progress = _no_progress
) -> Restored:
    """Roll the touched paths back to the manifest, best effort path by path.

    Only what differs is touched (found by :func:`changes`); the whole tree is verified
    after. One path that cannot be restored (EPERM on an immutable file, ENOSPC for a
    copy) does not stop the others; ``left`` names every path that still differs, each
    with the error that stopped it. Nothing is done through a symlinked ancestor.
    """
    failed: dict[str, str] = {}
    found = changes(prefix, manifest)
    total, done = found.paths, 0

    def attempt(path: str, step: Callable[[], object]) -> None:
        nonlocal done
        done += 1
        if done % PROGRESS_EVERY == 0:
            progress(done, total)
        if any(path == f or path.startswith(f + "/") for f in failed):
            return
        if (why := check_path(prefix, path)) is not None:
            failed[path] = why
            return
        try:
            step()
        except OSError as exc:
            failed[path] = f"{path}: {exc.strerror or exc}"

    dirs = sorted(found.dirs, key=lambda e: e.path.count("/"))
    for e in dirs:
        attempt(e.path, partial(ensure_dir, prefix, e))
    # a directory made again is empty: what the snapshot held below it goes back too
    remade = {e.path for e in dirs}
    below = [e for e in manifest.entries if remade and e.kind != "dir" and _below(e.path, remade)]
    for path in found.new:
        attempt(path, partial(_remove_new, prefix, path))
    seen = {e.path for e in found.entries}
    for e in (*found.entries, *(e for e in below if e.path not in seen)):
        attempt(e.path, partial(restore_entry, prefix, tx, e))
    for e in dirs:
        if (prefix / e.path).is_dir():
            with contextlib.suppress(OSError):
                set_dir_mode(prefix / e.path, e.mode)
    if total:
        progress(total, total)
    left = [d for d in verify(prefix, manifest) if not _explained(d, failed)]
    return Restored(total, [*failed.values(), *map(difference_text, left)])


def _below(path: str, dirs: set[str]) -> bool:
    """Whether ``path`` is below one of ``dirs``."""
    parent = posixpath.dirname(path)
    while parent:
        if parent in dirs:
            return True
        parent = posixpath.dirname(parent)
    return False


def _remove_new(prefix: Path, path: str) -> None:
    """Remove a path that appeared since the snapshot (the fault hook sees it as a restore)."""
    fail_point("restore", path)
    remove_path(prefix / path)


def _explained(d: Difference, failed: Mapping[str, str]) -> bool:
    """Whether a difference only repeats a path whose restore failure is already reported."""
    if d.path in failed or any(d.path.startswith(f + "/") for f in failed):
        return True
    return d.kind == "missing-names" and all(f"{d.path}/{n}" in failed for n in d.names)


def unheld(prefix: Path, manifest: Manifest, written: Iterable[str]) -> list[str]:
    """Paths among ``written`` (what a backend wrote) that a rollback of ``manifest`` cannot
    put back, each with why: neither snapshotted nor new in a snapshotted directory (its old
    bytes were never held), or reached through a symlinked directory (written wherever that
    leads, perhaps outside the environment). Bytecode is derived data and left out."""
    held = {e.path for e in manifest.entries}
    out = []
    for path in dict.fromkeys(written):
        if (why := check_path(prefix, path)) is not None:
            out.append(f"{why}: written wherever that leads, where nothing was snapshotted")
        elif not (path in held or is_bytecode(path) or _new(manifest, path)):
            out.append(f"{path!r}: was never snapshotted; it keeps the bytes the backend wrote")
    return out


def _new(manifest: Manifest, path: str) -> bool:
    """Whether ``path`` or a directory above it is a name that appeared in a snapshotted
    directory: a rollback removes it, whatever the backend wrote there."""
    while path:
        parent, name = os.path.split(path)
        if parent in manifest.listings and name not in manifest.listings[parent]:
            return True
        path = parent
    return False


def put_back(prefix: Path, tx: TxDir, manifest: Manifest, paths: Iterable[str]) -> None:
    """Restore ``paths`` (``--keep-shared``) and the directories above them."""
    entries = manifest.by_path()
    for path in paths:
        for parent in sorted(ancestors([path]), key=lambda p: p.count("/")):
            if parent in entries and not (prefix / parent).is_dir():
                ensure_dir(prefix, entries[parent])
        fail_point("keep")
        restore_entry(prefix, tx, entries[path])


def forget(tx: TxDir, manifest: Manifest, paths: Iterable[str]) -> Manifest:
    """Drop entries whose snapshot is not the old content (in-place writes) from the manifest,
    so the rollback restores everything else and finishes instead of failing on them."""
    gone = set(paths)
    narrowed = Manifest(tuple(e for e in manifest.entries if e.path not in gone), manifest.listings)
    write_json(tx.manifest, narrowed.to_json())  # what recover would restore
    return narrowed


def adopt(tx: TxDir, manifest: Manifest, paths: Iterable[str]) -> Manifest:
    """Leave ``paths`` (files another writer changed during the transaction) as that writer
    left them: their entries, and those below them, leave the manifest, and a new one's name
    (or that of its first new ancestor) joins its directory's listing, so neither the
    rollback nor an undo of the transaction touches them."""
    keep = set(paths)
    entries = tuple(
        e
        for e in manifest.entries
        if not any(e.path == k or e.path.startswith(k + "/") for k in keep)
    )
    listings = {d: tuple(names) for d, names in manifest.listings.items()}
    for path in keep:
        child = path
        while child:
            parent = posixpath.dirname(child)
            if parent in listings:
                name = posixpath.basename(child)
                if name not in listings[parent]:
                    listings[parent] = tuple(sorted((*listings[parent], name)))
                break
            child = parent
    adopted = Manifest(entries, listings)
    write_json(tx.manifest, adopted.to_json())  # what recover would restore
    return adopted
