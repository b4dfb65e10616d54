"""Each path's ``lstat`` and ``stat`` taken once per reading.

A read-only command stats the same paths three times: the stamp of its last answer's read
set (:mod:`.answers`, to see whether it holds), the walk (:mod:`.treecache`, to see what
to read again) and the stamp it remembers its new answer with: about 19k paths each on a
torch venv. Inside :func:`one_reading` each is taken once and given again.

Giving an earlier stat again is safe because every stat of a reading is taken before what
it vouches for is read: a path changed after its stat was taken is read new and stamped
old, so the next reading sees the stamp differ and computes again; never the reverse.
Only a reading that changes nothing of what it stats may be one reading: ``run`` stamps
before and after its command, with a snapshot's links between (they move ctimes), so it
takes its stats fresh.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_Taken = tuple[dict[str, "os.stat_result | OSError"], dict[str, "os.stat_result | OSError"]]
"""What a reading took: by ``lstat``, and by ``stat``."""
_TAKEN: ContextVar[_Taken | None] = ContextVar("cudafix_stats", default=None)


@contextmanager
def one_reading() -> Iterator[None]:
    """Within it, :func:`lstat` and :func:`stat` give each path's first answer again."""
    token = _TAKEN.set(({}, {}))
    try:
        yield
    finally:
        _TAKEN.reset(token)


def lstat(path: str) -> os.stat_result:
    """``os.lstat(path)``, taken once per reading."""
    taken = _TAKEN.get()
    if taken is None:
        return os.lstat(path)
    return _given(taken[0], path, os.lstat)


def stat(path: str) -> os.stat_result:
    """``os.stat(path)`` (links followed, as the loader follows them), taken once per reading."""
    taken = _TAKEN.get()
    if taken is None:
        return os.stat(path)  # noqa: PTH116 - str paths on a hot path
    return _given(taken[1], path, os.stat)


def _given(
    taken: dict[str, os.stat_result | OSError],
    path: str,
    how: Callable[[str], os.stat_result],
) -> os.stat_result:
    found = taken.get(path)
    if found is None:
        try:
            found = how(path)
        except OSError as exc:
            found = exc
        taken[path] = found
    if isinstance(found, OSError):  # raised anew, so no traceback accumulates on it
        raise type(found)(found.errno, found.strerror, path)
    return found
