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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from cudafix.env.statedir import open_file
from cudafix.model.errors import LockedError
from cudafix.model.transaction import DEFAULT_LOCK_TIMEOUT

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
        """Take the lock now if it is free; False when another process holds it."""
        fd = open_file(self.path, os.O_RDWR | os.O_CREAT)
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


INSTALLER_LOCK = ".lock"
"""uv's environment lock (``<venv>/.lock``, an exclusive flock for every ``uv pip`` change)."""


@dataclass
class EnvLocks:
    """cudafix's lock and uv's, held together for one run (see :func:`hold`)."""

    own: Lock
    installer: Lock

    @contextlib.contextmanager
    def backend_runs(self) -> Iterator[None]:
        """Hand uv's lock to our own backend call (uv waits for it), and take it back after."""
        if not self.installer.held:
            yield
            return
        self.installer.release()
        try:
            yield
        finally:
            self.installer.acquire(DEFAULT_LOCK_TIMEOUT * 5)


@contextlib.contextmanager
def hold(
    prefix: Path, own: Path, timeout: float, on_event: Callable[[str], None]
) -> Iterator[EnvLocks]:
    """cudafix's lock (``own``), then uv's, for the whole run.

    Holding uv's own lock makes a concurrent ``uv pip install`` wait until the transaction
    has committed or rolled back, instead of being wiped by the rollback.
    """
    lock = Lock(own)
    wait = partial(on_event, f"waiting for another cudafix run on {prefix} (lock {own})")
    if not lock.acquire(timeout, on_wait=wait):
        raise LockedError(
            f"another cudafix run holds {prefix}",
            context=[f"lock file: {own}", f"waited {timeout:g} s"],
            hint="wait for it to finish, then retry",
        )
    try:
        installer = Lock(prefix / INSTALLER_LOCK)
        created = not os.path.lexists(installer.path)
        said = f"waiting for uv, which is changing {prefix} (lock {installer.path})"
        if not installer.acquire(timeout, on_wait=partial(on_event, said)):
            raise LockedError(
                f"uv is changing {prefix}",
                context=[f"lock file: {installer.path}", f"waited {timeout:g} s"],
                hint="wait for it to finish, then retry",
            )
        try:
            yield EnvLocks(lock, installer)
        except BaseException:
            if created:  # rolled back: the environment had no lock file before this run
                with contextlib.suppress(OSError):
                    installer.path.unlink()
            raise
        finally:
            installer.release()
    finally:
        lock.release()
