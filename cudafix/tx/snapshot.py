"""Taking a snapshot: hard links of the paths a transaction touches, and their manifest.

A hard link costs O(1) whatever the file size; where one is impossible (EXDEV, EPERM,
EMLINK) the file is copied and its sha256 recorded. The store is flat: files are kept by
number (their entries say which), 128 to a directory whatever their paths; directories,
symlinks and FIFOs are kept in the manifest alone. Every path is examined with ``lstat``:
a symlink is snapshotted as a symlink, never followed. Only paths that pass
:func:`~cudafix.tx.manifest.check_path` (inside the prefix, no symlinked ancestor) are
touched.
"""

from __future__ import annotations

import errno
import hashlib
import os
import posixpath
import shutil
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path

from cudafix.env import statedir
from cudafix.env.statedir import STATE_DIR_NAME, TxDir
from cudafix.faults import crash_point, fail_point, hooks_armed
from cudafix.tx.manifest import (
    ROOT,
    SLOTS_PER_DIR,
    Entry,
    Manifest,
    checked,
    slot_name,
    write_json,
)

_COPY_ERRNOS = frozenset({errno.EXDEV, errno.EPERM, errno.EMLINK})


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def expand(prefix: Path, paths: Iterable[str]) -> list[str]:
    """``paths`` plus everything below those that are real directories (symlinks not followed)."""
    out: set[str] = set()
    for path in paths:
        out.add(path)
        live = prefix / path
        if live.is_dir() and not live.is_symlink():
            cut = len(str(prefix)) + 1
            for root, dirs, files in os.walk(live):
                rel = root[cut:]  # os.walk's roots all start with str(live)
                out.update(f"{rel}/{n}" if rel else n for n in (*dirs, *files))
    return sorted(out)


def ancestors(paths: Iterable[str]) -> set[str]:
    """Every proper ancestor directory of ``paths``, the prefix itself excluded."""
    out: set[str] = set()
    for path in paths:
        parent = posixpath.dirname(path)
        while parent and parent not in out:  # its own ancestors are in already
            out.add(parent)
            parent = posixpath.dirname(parent)
    return out


def _link_or_copy(src: str | Path, dest: str | Path, copy: bool = False) -> str | None:
    """Hard-link ``src`` to ``dest``; copy (when asked, or where linking is impossible) and
    return the copy's sha256."""
    return None if not copy and _linked(src, dest, None, None) else _copied(src, dest)


def _copied(src: str | Path, dest: str | Path) -> str:
    """Copy ``src`` to ``dest`` (a symlink as a symlink); the copy's sha256."""
    shutil.copy2(src, dest, follow_symlinks=False)
    return sha256_file(Path(dest))


CopyWhen = Callable[[str, int], bool]
"""Whether a file (its EnvPath and size) is snapshotted by copy rather than by hard link."""


def never(_path: str, _size: int) -> bool:
    """Link every file (the default)."""
    return False


_HOLD_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
"""Never follows, never blocks: a name replaced by a symlink or a FIFO since it was listed
is found no regular file by its stat."""


def _opened(name: str, store: int) -> int | None:
    """``name`` in the store opened (None where it cannot be: unreadable, a symlink)."""
    try:
        return os.open(name, _HOLD_FLAGS, dir_fd=store)
    except OSError:
        return None


@dataclass
class Opened:
    """Snapshotted files held open as they are stored, for ``run``, whose command may
    delete cudafix's own state (:mod:`cudafix.tx.hold` takes them over): opening each as
    it is linked gives its stat too, where a later pass would open all 22k again."""

    room: int
    """How many more may be opened now."""
    widen: Callable[[], int] | None
    """Makes more room once ``room`` is spent (the open-file limit raised, once): how
    much. None once called."""
    fds: dict[str, int] = field(default_factory=dict)
    """By the file's name in the store (:func:`~cudafix.tx.manifest.stored`)."""
    unheld: set[str] = field(default_factory=set)
    """Stored files there was no room (or no way) to hold."""

    def stat(self, name: str, store: int) -> os.stat_result:
        """The stat of the store's ``name`` (never followed), held open where there is room."""
        fd = self.hold(name, store)
        if fd is None:
            return os.stat(name, dir_fd=store, follow_symlinks=False)
        return os.fstat(fd)

    def hold(self, name: str, store: int) -> int | None:
        """The store's ``name`` opened and held, where there is room (None: not held, and
        counted among :attr:`unheld`)."""
        if self.room <= 0 and self.widen is not None:
            self.room, self.widen = self.widen(), None
        fd = _opened(name, store) if self.room > 0 else None
        if fd is None:
            self.unheld.add(name)
            return None
        self.fds[name] = fd
        self.room -= 1
        self.unheld.discard(name)
        return fd

    def drop(self, name: str) -> None:
        """Let go of ``name``, no longer stored as it was opened."""
        self.unheld.discard(name)
        if (fd := self.fds.pop(name, None)) is not None:
            os.close(fd)
            self.room += 1

    def close(self) -> None:
        """Close every descriptor still held (none once :mod:`.hold` has closed them)."""
        close_all(self.fds)


def close_all(fds: dict[str, int]) -> None:
    """Close each of ``fds`` (20k on a torch venv, so no context manager per descriptor)
    and forget them."""
    for fd in fds.values():
        try:  # noqa: SIM105 - not a context manager per descriptor: 20k of them
            os.close(fd)
        except OSError:
            pass
    fds.clear()


def _listing(prefix: Path, directory: str) -> tuple[str, ...] | None:
    """The names in ``directory`` (cudafix's own state left out of the prefix's); None when
    it is not a directory, or a symlink (opened with ``O_NOFOLLOW``, never followed)."""
    try:
        fd = os.open(f"{prefix}/{directory}", _LIST_FLAGS)
    except OSError:
        return None
    try:
        names = os.listdir(fd)  # noqa: PTH208 - a descriptor, not a path
    finally:
        os.close(fd)
    return tuple(sorted(n for n in names if directory != ROOT or n != STATE_DIR_NAME))


_LIST_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_ROOT_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def _join(directory: str, name: str) -> str:
    return f"{directory}/{name}" if directory != ROOT else name


def take(
    prefix: Path,
    tx: TxDir,
    paths: Iterable[str],
    detach: Iterable[str] = (),
    copy: CopyWhen = never,
    whole: bool = False,
    seen: dict[str, os.stat_result] | None = None,
    opened: Opened | None = None,
) -> Manifest:
    """Snapshot ``paths`` (expanded, plus ancestor dirs) into ``tx``; write the manifest.

    Files ``copy`` picks are copied, so even a write in place can be undone. ``whole``:
    ``paths`` are every entry of the prefix, so what appears beside them goes on restore.
    ``seen`` is given each snapshotted path's stat as snapshotted, by its full name: the
    state the transaction starts from, with no path statted again. ``opened`` holds each
    stored file open (where there is room) as it is stored."""
    # A path below a symlink is the symlink's (its entry restores it); never followed. The
    # paths asked for are checked; what expanding them walks below is sound by construction
    # (names from listing a real directory by descriptor, symlinked directories not entered).
    asked = set(_acceptable(prefix, paths))
    statedir.ensure_dir(tx.snapshot, mode=0o700)
    store = os.open(tx.snapshot, _ROOT_FLAGS | os.O_NOFOLLOW)
    try:
        snap = _Snapper(prefix, tx.snapshot, store, set(detach), copy, hooks_armed())
        if seen is not None:
            snap.seen = seen
        snap.opened = opened
        walked: set[str] = set()
        for path in sorted(asked | ancestors(asked)):
            if walked and any(a in walked for a in ancestors([path])):
                continue  # a tree walked below already holds it
            if snap.one(path).kind == "dir" and path in asked:
                snap.walk(path)
                walked.add(path)
    finally:
        os.close(store)
    entries, listings = snap.entries, snap.listings
    for e in entries:
        unlisted = e.kind == "dir" and e.path not in listings  # an ancestor of what was asked
        if unlisted and (names := _listing(prefix, e.path)) is not None:
            listings[e.path] = names
    if whole and (names := _listing(prefix, ROOT)) is not None:
        listings[ROOT] = names
    entries.sort(key=attrgetter("path"))
    manifest = Manifest(tuple(entries), listings)
    write_json(tx.manifest, manifest.to_json())
    return manifest


@dataclass
class _Snapper:
    """Snapshots paths into ``store``, collecting their entries and the listing of each
    directory it walks. A tree is walked in one pass: each directory is listed once, by
    descriptor, and its names are linked, statted and recorded relative to it (no path is
    resolved from the root again). A whole-venv snapshot is 24k entries.

    The store is flat: each file is linked into it under its slot's number (recorded in
    its entry, :func:`~cudafix.tx.manifest.stored`), 128 to a directory, so a snapshot
    makes one directory per 128 files, none per snapshotted one. Directories, symlinks
    and FIFOs are kept in the manifest alone (mode, listing, target), which is all a
    restore makes them again from."""

    prefix: Path
    store: Path
    dst: int
    """The store, open: every link is made relative to it."""
    rewritten: set[str]
    copy: CopyWhen
    hooks: bool
    entries: list[Entry] = field(default_factory=list)
    listings: dict[str, tuple[str, ...]] = field(default_factory=dict)
    slots: int = 0
    """Files linked or copied into the store so far: the next one's slot."""
    made: int = 0
    """Directories of the store made so far."""
    seen: dict[str, os.stat_result] = field(default_factory=dict)
    """Each snapshotted path's stat as snapshotted, by its full name (a linked file's
    through its link: its ctime is the link's), for :func:`take`'s caller."""
    opened: Opened | None = None

    def one(self, path: str) -> Entry:
        """Snapshot one path by its full name (a directory's content is not walked)."""
        live = f"{self.prefix}/{path}"
        try:
            st = os.lstat(live)
        except FileNotFoundError:
            return self._add(Entry(path, "absent"))
        return self._add(self._record(path, st, live, None))

    def walk(self, top: str) -> None:
        """Entries for everything below the real directory ``top`` (snapshotted already)."""
        base = os.open(self.prefix, _ROOT_FLAGS)  # the prefix may be reached by a symlink
        try:
            pending = [top]
            while pending:
                directory = pending.pop()
                try:
                    src = os.open(directory, _LIST_FLAGS, dir_fd=base)
                except OSError:
                    continue  # unreadable: recorded as a directory, its content not
                try:
                    pending += self._directory(directory, src)
                finally:
                    os.close(src)
        finally:
            os.close(base)

    def _directory(self, directory: str, src: int) -> list[str]:
        """Snapshot the names in one directory; its subdirectories, to be walked next."""
        with os.scandir(src) as listed:
            found = list(listed)
        names, below = [], []
        for item in found:
            path = f"{directory}/{item.name}"
            # a regular file (the directory's own type field says so, no stat) is linked
            # first and statted once, through its link
            entry = None
            if item.is_file(follow_symlinks=False):
                entry = self._linked_file(path, item.name, src)
            if entry is None:
                try:
                    st = item.stat(follow_symlinks=False)
                except FileNotFoundError:
                    self._add(Entry(path, "absent"))
                    continue
                entry = self._record(path, st, item.name, src)
            names.append(item.name)
            if self._add(entry).kind == "dir":
                below.append(path)
        self.listings[directory] = tuple(sorted(names))
        return below

    def _add(self, entry: Entry) -> Entry:
        self.entries.append(entry)
        return entry

    def _record(self, path: str, st: os.stat_result, live: str, src: int | None) -> Entry:
        """Snapshot ``path``, whose lstat is ``st``: ``live`` is its name relative to the
        descriptor ``src`` (its full path where that is None). A directory is not walked."""
        self.seen[f"{self.prefix}/{path}"] = st
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISDIR(st.st_mode):
            return Entry(path, "dir", mode=mode)
        if stat.S_ISLNK(st.st_mode):
            return Entry(path, "symlink", target=os.readlink(live, dir_fd=src))
        if stat.S_ISFIFO(st.st_mode):  # never opened (it would block); recreated on restore
            return Entry(path, "fifo", mode=mode)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, _NOT_SNAPSHOTTABLE, f"{self.prefix}/{path}")
        if not self.copy(path, st.st_size) and (done := self._linked_file(path, live, src)):
            return done
        if self.hooks:
            fail_point("snapshot")
        name = self._slot()
        sha = _copied(f"{self.prefix}/{path}", f"{self.store}/{name}")
        if self.opened is not None:
            self.opened.hold(name, self.dst)
        entry = Entry(
            path, "file", mode, st.st_size, None, st.st_dev, st.st_ino, st.st_mtime_ns, sha,
            path in self.rewritten, slot=self.slots,
        )  # fmt: skip
        self.slots += 1
        if self.hooks:
            crash_point("snapshot-file")
        return entry

    def _linked_file(self, path: str, live: str, src: int | None) -> Entry | None:
        """Snapshot the regular file ``path`` by a hard link, its entry read from the link's
        stat: the very inode kept, and the ctime the link gave it (the mark a later write
        in place is told by, :func:`cudafix.tx.restore.written_in_place`). None, with the
        link undone, where it must be copied instead (``copy``, or linking is impossible),
        or it is no longer a regular file (replaced since it was listed)."""
        if self.hooks:
            fail_point("snapshot")
        name = self._slot()
        try:
            if not _linked(live, name, src, self.dst):
                return None  # to be copied
        except FileNotFoundError:
            return None  # gone since it was listed: statted again, recorded absent
        if self.opened is not None:
            st = self.opened.stat(name, self.dst)
        else:
            st = os.stat(name, dir_fd=self.dst, follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode) or self.copy(path, st.st_size):
            if self.opened is not None:
                self.opened.drop(name)
            os.unlink(name, dir_fd=self.dst)
            return None
        self.seen[f"{self.prefix}/{path}"] = st  # the prefix's name links the same inode
        entry = Entry(
            path, "file", stat.S_IMODE(st.st_mode), st.st_size, None, st.st_dev, st.st_ino,
            st.st_mtime_ns, None, path in self.rewritten, ctime_ns=st.st_ctime_ns,
            nlink=st.st_nlink, slot=self.slots,
        )  # fmt: skip
        self.slots += 1
        if self.hooks:
            crash_point("snapshot-file")
        return entry

    def _slot(self) -> str:
        """The name of the next free slot in the store, its directory made when new."""
        if self.slots // SLOTS_PER_DIR == self.made:
            os.mkdir(str(self.made), 0o700, dir_fd=self.dst)
            self.made += 1
        return slot_name(self.slots)


def _linked(live: str | Path, dest: str | Path, src: int | None, dst: int | None) -> bool:
    """Hard-link ``live`` to ``dest`` (names relative to ``src`` and ``dst``); False where
    linking is impossible (:data:`_COPY_ERRNOS`), so the file is copied instead."""
    try:
        os.link(live, dest, src_dir_fd=src, dst_dir_fd=dst, follow_symlinks=False)
    except OSError as exc:
        if exc.errno not in _COPY_ERRNOS:
            raise
        return False
    return True


_NOT_SNAPSHOTTABLE = "not a file, symlink, FIFO or directory (a socket?)"


def _acceptable(prefix: Path, paths: Iterable[str]) -> list[str]:
    """``paths`` that :func:`~cudafix.tx.manifest.check_path` accepts (a whole-venv snapshot
    names 24k paths below a few thousand directories, each asked once)."""
    return [path for path, why in checked(prefix, paths) if why is None]
