"""The environment's locks: cudafix's own, and the installers' (uv's ``<venv>/.lock``).

Both are ``flock`` locks, so cudafix interoperates with ``filelock`` users and with uv,
which takes an exclusive ``flock`` on ``<venv>/.lock`` for every ``uv pip`` command that
changes the environment. The lock files are opened without following symlinks
(``O_NOFOLLOW``, parents through :func:`cudafix.env.statedir.open_dir`), so a symlinked
lock never makes cudafix create or truncate a file outside the environment.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from cudafix.env.statedir import INSTALLER_LOCK, STATE_DIR_NAME, open_file
from cudafix.model.errors import LockedError, UnsafeState
from cudafix.model.transaction import DEFAULT_LOCK_TIMEOUT, OnEvent, RunEvent

POLL = 0.05


class Lock:
    """One exclusive ``flock`` held through an fd (released by :meth:`release`)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def try_acquire(self) -> bool:
        """Take the lock now if it is free; False when another process holds it.

        A user who may not write the lock file may not change the environment: that is
        said in one line (:class:`UnsafeState`, exit 2), not as a machine error."""
        if self._fd is not None:
            return True
        try:
            fd = open_file(self.path, os.O_RDWR | os.O_CREAT)
        except PermissionError as exc:
            raise UnsafeState(
                f"cannot take the lock {self.path}: {exc.strerror}; nothing was changed",
                hint="run cudafix as a user who can write the environment",
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
                return False
            raise
        self._fd = fd
        return True

    def acquire(self, timeout: float, on_wait: Callable[[], None] | None = None) -> bool:
        """Wait up to ``timeout`` seconds; ``on_wait`` is called once if it must wait."""
        if self.try_acquire():
            return True
        if on_wait is not None:
            on_wait()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            time.sleep(POLL)
            if self.try_acquire():
                return True
        return False

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def is_held(path: Path) -> bool:
    """Whether another process holds the lock at ``path`` (a missing lock file is free)."""
    try:
        fd = open_file(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
            return True
        raise
    finally:
        os.close(fd)
    return False


@dataclass(frozen=True)
class LockUser:
    """A process holding, or waiting for, a ``flock`` (from ``/proc/locks``)."""

    pid: int
    waiting: bool
    command: str

    def describe(self) -> str:
        doing = "waiting for" if self.waiting else "holding"
        return f"pid {self.pid} ({self.command[:80] or '?'}) {doing} it"


def lock_users(path: Path) -> list[LockUser]:
    """Every process that holds or waits for a ``flock`` on the file at ``path`` now.

    The kernel lists each lock (and each blocked request, marked ``->``) with its pid and
    the file's device and inode, so another user's ``uv pip install`` queued behind cudafix
    is seen before cudafix lets go of the lock.
    """
    try:
        st = path.lstat()
        table = Path("/proc/locks").read_text()
    except OSError:
        return []
    want = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    users = []
    for line in table.splitlines():
        fields = line.split()
        waiting = len(fields) > 1 and fields[1] == "->"
        rest = fields[2:] if waiting else fields[1:]
        with contextlib.suppress(ValueError, IndexError):
            if rest[0] != "FLOCK":
                continue
            major, minor, inode = rest[4].split(":")
            if (int(major, 16), int(minor, 16), int(inode)) == want:
                users.append(LockUser(int(rest[3]), waiting, _command(int(rest[3]))))
    return users


def outsiders(path: Path, ours: Collection[int] = ()) -> list[LockUser]:
    """Users of the lock at ``path`` that are neither this process, nor one it started,
    nor in process groups ``ours`` (the transaction's own commands).

    A user gone since the lock table was read holds nothing: the command's own uv exiting
    just then has no process group or parent left to tell it by, and is no outsider."""
    found = []
    for u in lock_users(path):
        group = _group(u.pid)
        if group is None or group in ours or _descends_from_me(u.pid):
            continue
        if _group(u.pid) is not None:  # still there once its ancestry was read
            found.append(u)
    return found


def _group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _descends_from_me(pid: int) -> bool:
    me = os.getpid()
    for _ in range(64):
        if pid == me:
            return True
        if pid <= 1:
            return False
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            pid = int(stat[stat.rindex(")") + 2 :].split()[1])
        except (OSError, ValueError, IndexError):
            return False
    return False


def _command(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


class LockIntrusion(Exception):
    """A process outside the transaction waits for uv's lock at a hand-over, or took it
    while the transaction's own command had it."""


@dataclass(frozen=True)
class Writer:
    """A process outside the transaction seen with a file of the environment open for
    writing: a writer that takes no lock (pip), or one that got uv's lock past cudafix."""

    pid: int
    command: str
    path: str
    """The file, relative to the environment's root."""

    def describe(self) -> str:
        return f"pid {self.pid} ({self.command[:80] or '?'}) wrote {self.path}"


_UNWATCHED = (INSTALLER_LOCK, STATE_DIR_NAME + "/")
"""Paths whose writers are no intrusion: the locks, cudafix's own state."""


def writers(prefix: Path, ours: Collection[int] = ()) -> list[Writer]:
    """Processes outside this one's tree (the transaction's command is in it: cudafix is
    its subreaper) and outside process groups ``ours`` holding a file below ``prefix`` open
    for writing now, read from ``/proc/PID/fd``: a sample, so a write opened and closed
    between two looks is not seen."""
    root = os.path.realpath(prefix) + "/"
    me, found = os.getpid(), []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        pid, paths = int(entry.name), []
        with contextlib.suppress(OSError):
            for link in Path(entry.path, "fd").iterdir():
                with contextlib.suppress(OSError, ValueError):
                    target = str(link.readlink())
                    rel = target[len(root) :]
                    if not target.startswith(root) or rel.startswith(_UNWATCHED):
                        continue
                    info = Path(entry.path, "fdinfo", link.name).read_text().split()
                    flags = int(info[info.index("flags:") + 1], 8)
                    if flags & os.O_ACCMODE != os.O_RDONLY and not rel.endswith(" (deleted)"):
                        paths.append(rel)
        if paths and _group(pid) not in ours and not _descends_from_me(pid):
            command = _command(pid)
            found += [Writer(pid, command, rel) for rel in paths]
    return found


SCAN_EVERY = 4
"""Handover.watch looks for writers on every this many calls (each reads all of /proc)."""


@dataclass
class Handover:
    """uv's lock while the transaction's own command has it: who else was seen using it,
    and who was seen writing into the environment without it."""

    path: Path | None
    groups: set[int] = field(default_factory=set)
    """Process groups of the transaction's own commands."""
    seen: dict[int, str] = field(default_factory=dict)
    lent: Lock | None = None
    """uv's lock, held by the transaction and lent only to its own command's processes
    while one of them waits for it (None: handed over for the whole call)."""
    prefix: Path | None = None
    """The environment whose writers are watched (None: none are)."""
    written: dict[str, Writer] = field(default_factory=dict)
    """Files written by processes outside the transaction, by path."""
    _calls: int = 0

    def watch(self) -> None:
        """Note every process outside the transaction that holds the lock (one waiting for
        it is blocked until the transaction ends, unless it gets it: then it is noted);
        lend the lock to the command's own process that waits for it, take it back once it
        is free; note who outside the transaction writes into the environment."""
        if self.path is not None:
            users = outsiders(self.path, self.groups)
            self.seen.update((u.pid, u.describe()) for u in users if not u.waiting)
            if self.lent is not None:
                self._lend()
        if self.prefix is not None and self._calls % SCAN_EVERY == 0:
            for w in writers(self.prefix, self.groups):
                self.written.setdefault(w.path, w)
        self._calls += 1

    def _lend(self) -> None:
        assert self.lent is not None and self.path is not None
        if not self.lent.held:
            self.lent.try_acquire()  # back as soon as the command's process let go
            return
        users = lock_users(self.path)
        me = os.getpid()
        if not any(u.waiting and u.pid != me and _descends_from_me(u.pid) for u in users):
            return
        if waiting := [u for u in outsiders(self.path, self.groups) if u.waiting]:
            raise LockIntrusion(
                f"the command waits for uv's lock {self.path}, and so does a process outside "
                f"this transaction ({waiting[0].describe()}): lending the lock would let it "
                "change the environment inside this transaction, so it was not lent"
            )
        self.lent.release()  # one outside that queues from now may get it next: it is seen

    def started(self, pgid: int) -> None:
        self.groups.add(pgid)


@dataclass
class EnvLocks:
    """cudafix's lock and uv's, held together for one run (see :func:`hold`)."""

    own: Lock
    installer: Lock

    @contextlib.contextmanager
    def backend_runs(self, prefix: Path | None = None) -> Iterator[Handover]:
        """Hand uv's lock to our own backend call or command (uv waits for it), take it back.

        With ``prefix`` (a user's command, which calls :meth:`Handover.watch` while it
        runs), the lock is only lent: held all along, released while one of the command's
        own processes waits for it, taken back once it is free, so an outside ``uv pip``
        waits for the whole transaction; and writers outside it are watched for.

        A process outside the transaction queued on the lock would get it at a hand-over
        and change the environment inside the transaction: then nothing is handed over
        (:class:`LockIntrusion`; the transaction rolls back and leaves the environment to
        it). One that takes the lock while the transaction's command has it is named
        (:class:`LockIntrusion` after the command).
        """
        if not self.installer.held:
            yield Handover(None, prefix=prefix)
            return
        path = self.installer.path
        lend = prefix is not None  # lent, not handed: one queued outside simply waits on
        if not lend and (waiting := outsiders(path)):
            raise LockIntrusion(
                f"another process is {waiting[0].describe()} (uv's lock {path}); handing the "
                "lock over would let it change the environment inside this transaction, so "
                "it was not handed over"
            )
        hand = Handover(path, lent=self.installer if lend else None, prefix=prefix)
        if not lend:
            self.installer.release()
        try:
            yield hand
        finally:
            if not self.installer.try_acquire():
                hand.watch()
                self.installer.acquire(DEFAULT_LOCK_TIMEOUT * 5)
        if hand.seen:
            raise LockIntrusion(
                f"a process outside this transaction used uv's lock {path} while the "
                f"transaction's own command had it ({'; '.join(hand.seen.values())}): what it "
                "changed is rolled back with the rest, but the files it was seen writing; "
                "run it again once this is over"
            )

    def retake_own(self) -> None:
        """Take cudafix's lock again on a lock file re-created after a command removed it
        (the old lock is on a file no other run can open any more)."""
        again = Lock(self.own.path)
        if again.try_acquire():
            self.own.release()
            self.own = again


def acquired(
    prefix: Path, own: Path, timeout: float, on_wait: Callable[[], None] | None = None
) -> Lock:
    """cudafix's lock of ``prefix`` (the file ``own``), taken within ``timeout``, else
    :class:`LockedError` naming the lock file; the caller releases it."""
    lock = Lock(own)
    if not lock.acquire(timeout, on_wait=on_wait):
        raise LockedError(
            f"another cudafix run holds {prefix}",
            context=[f"lock file: {own}", f"waited {timeout:g} s"],
            hint="wait for it to finish, then retry",
        )
    return lock


@contextlib.contextmanager
def hold(prefix: Path, own: Path, timeout: float, on_event: OnEvent) -> Iterator[EnvLocks]:
    """cudafix's lock (``own``), then uv's, for the whole run.

    Holding uv's own lock makes a concurrent ``uv pip install`` wait until the transaction
    has committed or rolled back, instead of being wiped by the rollback.
    """
    wait = partial(
        on_event, RunEvent("info", f"waiting for another cudafix run on {prefix} (lock {own})")
    )
    lock = acquired(prefix, own, timeout, on_wait=wait)
    try:
        installer = Lock(prefix / INSTALLER_LOCK)
        created = not os.path.lexists(installer.path)
        said = f"waiting for uv, which is changing {prefix} (lock {installer.path})"
        if not installer.acquire(timeout, on_wait=partial(on_event, RunEvent("info", said))):
            raise LockedError(
                f"uv is changing {prefix}",
                context=[f"lock file: {installer.path}", f"waited {timeout:g} s"],
                hint="wait for it to finish, then retry",
            )
        locks = EnvLocks(lock, installer)
        try:
            yield locks
        except BaseException:
            if created:  # rolled back: the environment had no lock file before this run
                with contextlib.suppress(OSError):
                    installer.path.unlink()
            raise
        finally:
            installer.release()
            lock = locks.own  # taken again if a command re-created the state directory
    finally:
        lock.release()
