"""State a command cannot take away: ``run``'s snapshot held open, and rebuilt from it.

A command may delete cudafix's own state (``uv venv --clear``, a ``.cudafix`` replaced by a
symlink). An open file outlives its last name, so with every snapshotted file held open and
the manifest and journal held as bytes, the transaction writes its state again and still
rolls back.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import resource
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from cudafix.env import statedir
from cudafix.env.statedir import STATE_DIR_NAME, TxDir, read_bytes, write_atomic
from cudafix.model.errors import UnsafeState
from cudafix.tx.journal import append as journal_append
from cudafix.tx.manifest import Manifest, stored, write_json
from cudafix.tx.restore import remove_path
from cudafix.tx.snapshot import Opened, close_all
from cudafix.tx.steps import StateRebuilt


@dataclass
class HeldState:
    """What survives a command that deletes cudafix's own state (``uv venv --clear``, a
    ``.cudafix`` replaced by a symlink): an open fd of every snapshotted file (an open file
    outlives its last name), the manifest and the journal as bytes."""

    fds: dict[str, int]
    """By the file's name in the store (:func:`~cudafix.tx.manifest.stored`)."""
    manifest: Manifest
    journal: bytes
    missed: int = 0
    """Files no fd was left for (the process's open-file limit)."""
    settled: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    """``(dev, ino, ctime_ns)`` of the store's directories (``""``: the store itself) last
    changed before the journal's last write: while one keeps them, none of its names was
    removed or replaced, so its files need no check of their own (:func:`state_lost`)."""

    def close(self) -> None:
        close_all(self.fds)


FD_RESERVE = 256
"""Descriptors :func:`hold_state` leaves free for the run itself (the lock, the journal, the
command's pipes, uv and the probes): a snapshot larger than the open-file limit allows is
held in part, never to the last descriptor."""


def opened_as_stored() -> Opened:
    """Room to hold a snapshot's files open as they are stored (:func:`hold_state` takes
    them over): up to the soft open-file limit, then the hard one, keeping
    :data:`FD_RESERVE` descriptors free."""
    return Opened(room=_room(), widen=_widen)


def _room() -> int:
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1 << 30
    return max(0, soft - FD_RESERVE - _open_fds())


def _widen() -> int:
    """The soft open-file limit raised to the hard one (once): the room that gives."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == hard:
        return 0
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return _room()


def hold_state(tx: TxDir, manifest: Manifest, opened: Opened | None = None) -> HeldState:
    """Hold the snapshot open: the files ``opened`` holds already (as the snapshot stored
    them), the others opened now (the soft open-file limit raised to the hard one if need
    be), keeping :data:`FD_RESERVE` descriptors free; those beyond that are counted as
    ``missed``."""
    if opened is None:
        opened = opened_as_stored()
        opened.unheld = {stored(e) for e in manifest.entries if e.kind == "file"}
    held = HeldState(opened.fds, manifest, read_bytes(tx.journal))
    rest = sorted(opened.unheld)
    held.missed = len(rest)
    with contextlib.suppress(OSError, UnsafeState), statedir.open_dir(tx.snapshot) as store:
        held.missed = sum(opened.hold(name, store) is None for name in rest)
    held.settled = _settled(tx, held.fds)
    return held


def _settled(tx: TxDir, names: Iterable[str]) -> dict[str, tuple[int, int, int]]:
    """The store's directories that hold ``names``, and the store itself (``""``), whose
    ctime is older than the journal's: a change to a directory's names moves its ctime
    (which, unlike its mtime, cannot be set back), and any change after the journal's last
    write gets a ctime no older than it (one clock stamps both). One stamped in the same
    tick as the journal could change unseen, so it is left out."""
    store = tx.snapshot
    try:
        now = tx.journal.lstat().st_ctime_ns
    except OSError:
        return {}
    out = {}
    for directory in {"", *(name.rpartition("/")[0] for name in names)}:
        with contextlib.suppress(OSError):
            st = os.lstat(f"{store}/{directory}" if directory else store)
            if stat.S_ISDIR(st.st_mode) and st.st_ctime_ns < now:
                out[directory] = (st.st_dev, st.st_ino, st.st_ctime_ns)
    return out


def _open_fds() -> int:
    """Descriptors this process holds now (``/proc/self/fd``; a guess of 64 elsewhere)."""
    try:
        return sum(1 for _ in Path("/proc/self/fd").iterdir())
    except OSError:
        return 64


def state_lost(tx: TxDir, held: HeldState) -> bool:
    """Whether anything of the transaction's state is gone or replaced since
    :func:`hold_state`."""
    try:
        read_bytes(tx.manifest)
        read_bytes(tx.journal)
        store = tx.snapshot
        for directory, was in held.settled.items():
            st = os.lstat(f"{store}/{directory}" if directory else store)
            if (st.st_dev, st.st_ino, st.st_ctime_ns) != was:
                return True
        for name, fd in held.fds.items():
            if name.rpartition("/")[0] in held.settled:
                continue  # its directory's names are as they were
            live, opened = os.lstat(f"{store}/{name}"), os.fstat(fd)
            if (live.st_dev, live.st_ino) != (opened.st_dev, opened.st_ino):
                return True
    except (OSError, UnsafeState):
        return True
    return False


def rebuild(prefix: Path, tx: TxDir, held: HeldState) -> tuple[Manifest, list[str]]:
    """Write the transaction's state again from :class:`HeldState`: the manifest, the journal
    (plus a ``state-rebuilt`` record), and a copy of each snapshotted file
    whose link is gone (its entry then carries the copy's sha256, so a restore is checked
    by content). Returns the manifest to restore and the files that cannot be restored."""
    state = prefix / STATE_DIR_NAME
    if state.is_symlink() or (os.path.lexists(state) and not state.is_dir()):
        state.unlink()  # the command put something else there; never followed
    statedir.ensure_dir(tx.snapshot, mode=0o700)
    entries, lost = [], []
    for e in held.manifest.entries:
        name = stored(e)
        fd = held.fds.get(name)
        if e.kind != "file" or not _link_gone(tx.snapshot / name, fd):
            entries.append(e)
        elif fd is None:
            entries.append(e)
            lost.append(e.path)
        else:
            entries.append(e._replace(sha256=_copy_fd(fd, tx.snapshot / name)))
    manifest = Manifest(tuple(entries), held.manifest.listings)
    write_json(tx.manifest, manifest.to_json())
    write_atomic(tx.journal, held.journal.decode("utf-8"))
    journal_append(tx.journal, StateRebuilt(missed=held.missed, unrestorable=tuple(lost)))
    return manifest, lost


def _link_gone(path: Path, fd: int | None) -> bool:
    try:
        live = os.lstat(path)
    except FileNotFoundError:
        return True
    if fd is None:
        return False
    held = os.fstat(fd)
    return (live.st_dev, live.st_ino) != (held.st_dev, held.st_ino)


def _copy_fd(fd: int, dest: Path) -> str:
    """Copy an open file's bytes to ``dest`` (not followed), with its mode; its sha256."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        remove_path(dest)
    mode = stat.S_IMODE(os.fstat(fd).st_mode)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    out = os.open(dest, flags, mode)
    digest = hashlib.sha256()
    try:
        offset = 0
        while chunk := os.pread(fd, 1 << 20, offset):
            digest.update(chunk)
            view = memoryview(chunk)
            while view:
                view = view[os.write(out, view) :]
            offset += len(chunk)
        os.fsync(out)
    finally:
        os.close(out)
    return digest.hexdigest()
