"""Stopping every process a command started, whatever group or session it moved to.

A process group is no fence: a descendant may ``setsid``, fork twice, or join cudafix's own
process group, and go on writing into the environment after the transaction is judged. Two
ways to find them all, the first the host allows:

* a cgroup v2 of the command's own (:class:`Cell`), where the host delegates a writable one:
  every process the command starts is born in it and cannot leave it (moving out needs write
  access to a common ancestor), and ``cgroup.kill`` stops them all at once, forks included;
* else the process tree: cudafix is the subreaper of what it starts, so a descendant that
  loses its parent is re-parented to cudafix, never to init, and every process the command
  started stays a descendant of cudafix for as long as it lives (:func:`stop_descendants`).
  Each is signalled through a pidfd opened and checked first, so a recycled pid is never
  signalled.

``CUDAFIX_TEST_NO_CGROUP=1`` makes the tests take the second way on a host that has the first.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import itertools
import logging
import os
import signal
import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("cudafix.process")

NO_CGROUP_ENV = "CUDAFIX_TEST_NO_CGROUP"
CELL_PREFIX = "cudafix-run-"
_PR_SET_CHILD_SUBREAPER = 36
_counter = itertools.count()

Identity = tuple[int, int]
"""A process as (pid, start time in clock ticks since boot): unique while the host runs."""


def become_subreaper() -> None:
    """Make this process the subreaper of what it starts (prctl(2)): a descendant that
    leaves the command's process group and outlives its parent is then re-parented here
    rather than to init, so :func:`stop_descendants` still finds it."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


# -- the process table ---------------------------------------------------------------------


@dataclass(frozen=True)
class Proc:
    """One line of ``/proc/PID/stat``: what the process tree is built from."""

    pid: int
    state: str
    ppid: int
    pgid: int
    start: int

    @property
    def identity(self) -> Identity:
        return (self.pid, self.start)


def read_proc(pid: int) -> Proc | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        f = stat[stat.rindex(")") + 2 :].split()
        return Proc(pid, f[0], int(f[1]), int(f[2]), int(f[19]))
    except (OSError, ValueError, IndexError):
        return None


def processes() -> Iterator[Proc]:
    """Every process on the host (that can be read)."""
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and (p := read_proc(int(entry.name))) is not None:
            yield p


def descendants(
    root: int, skip: Collection[int] = (), before: Collection[Identity] = ()
) -> list[Proc]:
    """The processes below ``root`` in the process tree, leaving out the subtrees of the
    pids in ``skip`` and of the processes in ``before``."""
    children: dict[int, list[Proc]] = {}
    for p in processes():
        children.setdefault(p.ppid, []).append(p)
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child.pid not in skip and child.identity not in before:
                found.append(child)
                todo.append(child.pid)
    return found


def identities(root: int) -> frozenset[Identity]:
    """The descendants of ``root`` now, as identities (what was there before a command)."""
    return frozenset(p.identity for p in descendants(root))


def _kill_checked(p: Proc, root: int) -> None:
    """SIGKILL ``p`` through a pidfd, once the pidfd is known to hold the same process (its
    start time) and it is still below ``root``."""
    try:
        fd = os.pidfd_open(p.pid)
    except OSError as exc:
        if exc.errno == errno.ENOSYS:  # a kernel before 5.3: checked, then signalled by pid
            now = read_proc(p.pid)
            if now is not None and now.start == p.start and _below(now, root):
                with contextlib.suppress(OSError):
                    os.kill(p.pid, signal.SIGKILL)
        return  # else gone
    try:
        now = read_proc(p.pid)
        if now is None or now.start != p.start or not _below(now, root):
            return  # another process got the pid
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(fd, signal.SIGKILL)
    finally:
        os.close(fd)


def _below(p: Proc, root: int) -> bool:
    for _ in range(4096):
        if p.ppid == root:
            return True
        if p.ppid <= 1 or (up := read_proc(p.ppid)) is None:
            return False
        p = up
    return False


def stop_descendants(
    before: Collection[Identity], skip: Collection[int] = (), limit: float = 10.0
) -> list[int]:
    """SIGKILL every descendant of this process that is not below one there ``before`` or a
    pid in ``skip``, reap those that are its children, and go on until none is
    left: one killed hands its own children to this process, the subreaper. Returns the
    pids still alive after ``limit`` seconds (none unless they fork faster than they die)."""
    me = os.getpid()
    deadline = time.monotonic() + limit
    while True:
        found = descendants(me, skip, before)
        for p in found:
            if p.ppid == me:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(p.pid, os.WNOHANG)
        live = [p for p in found if p.state != "Z"]
        if not found:
            return []
        if time.monotonic() > deadline:
            return [p.pid for p in live]
        for p in live:
            _kill_checked(p, me)
        time.sleep(0.002)


# -- the command's own cgroup ---------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """A cgroup v2 made for one command: it and all it starts live in it."""

    path: Path

    def join(self) -> None:
        """Move the calling process into the cell (run in the child before ``exec``)."""
        fd = os.open(self.path / "cgroup.procs", os.O_WRONLY)
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)

    def pids(self) -> list[int]:
        try:
            return [int(x) for x in (self.path / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []

    def populated(self) -> bool:
        try:
            events = (self.path / "cgroup.events").read_text().split()
        except OSError:
            return bool(self.pids())
        return "populated" in events and events[events.index("populated") + 1] != "0"

    def kill(self, limit: float = 10.0) -> bool:
        """SIGKILL everything in the cell (``cgroup.kill``, or a frozen cell's members one by
        one on kernels without it) and wait until it is empty; False if it is not."""
        deadline = time.monotonic() + limit
        try:
            (self.path / "cgroup.kill").write_text("1")
        except OSError:
            self._kill_frozen()
        while self.populated():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.002)
        return True

    def _kill_frozen(self) -> None:
        with contextlib.suppress(OSError):
            (self.path / "cgroup.freeze").write_text("1")
        for pid in self.pids():  # frozen: none of them can exit but by this signal
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            (self.path / "cgroup.freeze").write_text("0")

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            self.path.rmdir()


def _own_cgroup() -> Path | None:
    """This process's cgroup v2 directory, where one is mounted."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    rel = next((line[3:] for line in lines if line.startswith("0::")), None)
    if rel is None:
        return None
    for m in mounts:
        before, _, after = m.partition(" - ")
        f = before.split()
        if after.split()[:1] == ["cgroup2"] and len(f) > 4:
            root, point = f[3], f[4]
            if rel == root or rel.startswith(root.rstrip("/") + "/"):
                return Path(point) / rel[len(root) :].lstrip("/")
    return None


def open_cell() -> Cell | None:
    """A new cgroup for a command below this process's own, where the host lets this user
    make one and move a process into it; else None (the process tree is used)."""
    if os.environ.get(NO_CGROUP_ENV):
        return None
    base = _own_cgroup()
    if base is None or not os.access(base / "cgroup.procs", os.W_OK):
        return None
    _sweep(base)
    path = base / f"{CELL_PREFIX}{os.getpid()}-{next(_counter)}"
    try:
        path.mkdir()
    except OSError:
        return None
    return Cell(path)


def _sweep(base: Path) -> None:
    """Remove the empty cells of cudafix runs that are gone (one killed left its cell)."""
    with contextlib.suppress(OSError), os.scandir(base) as it:
        for e in it:
            owner = e.name.removeprefix(CELL_PREFIX).partition("-")[0]
            gone = owner.isdigit() and read_proc(int(owner)) is None
            if e.name.startswith(CELL_PREFIX) and gone:
                with contextlib.suppress(OSError):
                    Path(e.path).rmdir()
