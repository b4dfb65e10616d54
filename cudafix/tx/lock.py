"""The environment's locks: cudafix's own, and the installers' (uv's ``<venv>/.lock``).

Both are ``flock`` locks, so cudafix interoperates with ``filelock`` users and with uv,
which takes an exclusive ``flock`` on ``<venv>/.lock`` for every ``uv pip`` command that
changes the environment. The lock files are opened without following symlinks
(``O_NOFOLLOW``, parents through :func:`cudafix.env.statedir.open_dir`), so a symlinked
lock never makes cudafix create or truncate a file outside the environment.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from collections.abc import Callable
from pathlib import Path

from cudafix.env.statedir import open_file

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
