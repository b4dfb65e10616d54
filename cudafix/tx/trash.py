"""Old snapshots deleted off the user's wait.

Unlinking a whole-environment snapshot (~20k hard links) takes longer than the rest of a
commit. So a snapshot is first renamed into ``.cudafix/trash/`` (one rename: ``history``
and ``undo`` stop seeing it at once), and the trash is emptied by a process of its own
that a commit does not wait for (``cudafix gc`` does). Whatever an interrupted emptying
left is emptied by the next one.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterable
from pathlib import Path

from cudafix import process
from cudafix.env.statedir import StateDir, open_dir
from cudafix.faults import crash_point, fail_point
from cudafix.model.errors import UnsafeState

_EMPTY = r"""
import os, signal, sys
fd = int(sys.argv[1])
crash, _, how = os.environ.get("CUDAFIX_TEST_CRASH_AFTER", "").partition(":")
for _, dirs, files, at in os.fwalk(".", topdown=False, dir_fd=fd):
    for name in files:
        try:
            os.unlink(name, dir_fd=at)
        except OSError:
            pass
        if crash == "trash-unlink":
            crash = ""
            os.kill(os.getpid(), getattr(signal, how or "SIGKILL"))
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
"""
"""Delete everything below the directory open as fd ``argv[1]``, never following a symlink
(``fwalk`` does not descend into one; a link listed among directories is unlinked).
``CUDAFIX_TEST_CRASH_AFTER=trash-unlink[:SIGNAL]`` (:mod:`cudafix.faults`, tests only) kills
it, or sends it ``SIGNAL``, after its first unlink."""


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
