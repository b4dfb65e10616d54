"""Old snapshots deleted off the user's wait.

Unlinking a whole-environment snapshot (~20k hard links) takes longer than the rest of a
commit. So a snapshot is first renamed into ``.cudafix/trash/`` (one rename: ``history``
and ``undo`` stop seeing it at once), and the trash is emptied by a process of its own
that a commit does not wait for (``cudafix gc`` does). Whatever an interrupted emptying
left is emptied by the next one.

Unlinking a snapshot's hard link moves the ctime of the environment's file it shares an
inode with, and a transaction counts a moved ctime as a write in place. So the emptying
unlinks in short batches, each under an exclusive ``flock`` of the trash directory, and
pauses between two while a transaction runs (:func:`quiet`, from its snapshot to its
verdict), instead of making every file look rewritten.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from cudafix import process
from cudafix.env.statedir import StateDir, open_dir
from cudafix.faults import crash_point, fail_point
from cudafix.model.errors import UnsafeState

PAUSE_NAME = "trash-pause.lock"
"""The file in ``.cudafix/`` a transaction holds (shared ``flock``) to pause the emptying."""

_EMPTY = r"""
import fcntl, os, signal, sys
fd = int(sys.argv[1])
crash, _, how = os.environ.get("CUDAFIX_TEST_CRASH_AFTER", "").partition(":")
batch = 0


def pause():
    fcntl.flock(fd, fcntl.LOCK_UN)
    try:
        wait = os.open("../@PAUSE@", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
    except OSError:
        wait = -1
    if wait >= 0:
        try:
            fcntl.flock(wait, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fcntl.flock(wait, fcntl.LOCK_EX)  # a transaction runs: until it ends
        os.close(wait)


fcntl.flock(fd, fcntl.LOCK_EX)
for _, dirs, files, at in os.fwalk(".", topdown=False, dir_fd=fd):
    for name in files:
        try:
            os.unlink(name, dir_fd=at)
        except OSError:
            pass
        batch += 1
        if batch % 256 == 0 or crash == "trash-unlink":
            pause()
            if crash == "trash-unlink":
                crash = ""
                os.kill(os.getpid(), getattr(signal, how or "SIGKILL"))
            fcntl.flock(fd, fcntl.LOCK_EX)
    for name in dirs:
        try:
            os.rmdir(name, dir_fd=at)
        except NotADirectoryError:
            try:
                os.unlink(name, dir_fd=at)
            except OSError:
                pass
        except OSError:
            pass
""".replace("@PAUSE@", PAUSE_NAME)
"""Delete everything below the directory open as fd ``argv[1]``, never following a symlink
(``fwalk`` does not descend into one; a link listed among directories is unlinked); files
in batches of 256, each under an exclusive ``flock`` of that directory; between two, while
a transaction holds :data:`PAUSE_NAME` (:func:`quiet`), it waits for that to end.
``CUDAFIX_TEST_CRASH_AFTER=trash-unlink[:SIGNAL]`` (:mod:`cudafix.faults`, tests only) kills
it, or sends it ``SIGNAL``, after its first unlink, between two batches."""


def discard(state: StateDir, txids: Iterable[str]) -> list[str]:
    """Move these transactions' snapshots into the trash; the ids whose snapshot moved."""
    moved: list[str] = []
    doomed = list(txids)
    if not doomed:
        return moved
    with open_dir(state.trash, create=True) as into:
        for txid in doomed:
            with contextlib.suppress(OSError, UnsafeState), open_dir(state.tx(txid).root) as at:
                aside = f"{txid}-{secrets.token_hex(3)}"
                fail_point("trash", txid)
                os.rename("snapshot", aside, src_dir_fd=at, dst_dir_fd=into)
                moved.append(txid)
                crash_point("trash-moved", txid)
    return moved


def empty(state: StateDir, *, wait: bool) -> None:
    """Delete what the trash holds: now, or (``wait=False``) in a detached process."""
    try:
        with open_dir(state.trash) as fd:
            pid = process.spawn_detached(_EMPTY, fd)
    except FileNotFoundError:
        return  # no trash: nothing was ever set aside
    crash_point("trash-emptying")
    if wait:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


QUIET_WAIT = 5.0
"""Seconds a transaction waits for the emptying to pause. A working emptying pauses after
its batch (milliseconds); one that does not in this time is stopped, and unlinks nothing."""


@contextlib.contextmanager
def quiet(state: StateDir, wait: float = QUIET_WAIT) -> Iterator[None]:
    """While the block runs, no emptying of the trash unlinks anything.

    The block holds :data:`PAUSE_NAME` shared, which an emptying looks at between two
    batches and then waits on, and the trash directory shared, which each batch holds
    exclusively (so the block starts once the batch under way ends). An emptying started
    meanwhile waits for the block to end; one that holds its batch past ``wait`` (stopped)
    is not waited for."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(state.trash, flags | os.O_DIRECTORY)
    except OSError:
        yield  # no trash: nothing is being emptied
        return
    try:
        pause = os.open(state.root / PAUSE_NAME, flags | os.O_CREAT, 0o644)
    except OSError:
        pause = -1  # a reader's transaction cannot pause it: judged as before
    try:
        if pause >= 0:
            fcntl.flock(pause, fcntl.LOCK_SH)
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.005)
        yield
    finally:
        os.close(fd)  # releases the locks
        if pause >= 0:
            os.close(pause)


def held(state: StateDir) -> list[Path]:
    """The snapshots the trash holds now (a deletion interrupted, or still under way)."""
    try:
        with open_dir(state.trash) as fd, os.scandir(fd) as it:
            return [state.trash / e.name for e in it if e.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return []


def txid_of(path: Path) -> str:
    """The transaction id of a snapshot in the trash (``<id>-<random>``)."""
    return path.name.rpartition("-")[0]
