"""Each path's ``lstat`` and ``stat`` taken once per reading.

A read-only command stats the same paths three times: the stamp of its last answer's read
set (:mod:`.answers`, to see whether it holds), the walk (:mod:`.treecache`, to see what
to read again) and the stamp it remembers its new answer with: about 19k paths each on a
torch venv. Inside :func:`one_reading` each is taken once and given again, the walk's
scan of a directory included (:func:`entry_lstat`).

Giving an earlier stat again is safe because every stat of a reading is taken before what
it vouches for is read: a path changed after its stat was taken is read new and stamped
old, so the next reading sees the stamp differ and computes again; never the reverse.
Only a reading that changes nothing of what it stats may be one reading. ``run`` reads
before its command what its snapshot saw (each path's stat as snapshotted, a linked
file's through its link, :func:`one_reading`'s ``lstats``): stats taken before the command
started, which is all its stamp before must be. Its stamp after is taken fresh.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TypeVar, cast

T = TypeVar("T")

RACY_NS = 2_000_000_000
"""How close to now a change may be and still hide behind an equal timestamp: file times
come from a clock coarser than ``time.time_ns``, so what changed this close to a scan is
not vouched for by its stat (git's "racy clean" rule), and is read again next time."""


@dataclass
class _Reading:
    """What one reading took: by ``lstat``, by ``stat``, and what was computed from them."""

    lstats: dict[str, os.stat_result | OSError]
    stats: dict[str, os.stat_result | OSError] = field(default_factory=dict)
    derived: dict[Hashable, object] = field(default_factory=dict)


_TAKEN: ContextVar[_Reading | None] = ContextVar("cudafix_stats", default=None)


@contextmanager
def one_reading(lstats: Mapping[str, os.stat_result] | None = None) -> Iterator[None]:
    """Within it, :func:`lstat` and :func:`stat` give each path's first answer again;
    ``lstats`` are answers taken already (by full path), given as if taken first here."""
    token = _TAKEN.set(_Reading(dict(lstats or {})))
    try:
        yield
    finally:
        _TAKEN.reset(token)


def lstat(path: str) -> os.stat_result:
    """``os.lstat(path)``, taken once per reading."""
    taken = _TAKEN.get()
    if taken is None:
        return os.lstat(path)
    return _given(taken.lstats, path, os.lstat)


def stat(path: str) -> os.stat_result:
    """``os.stat(path)`` (links followed, as the loader follows them), taken once per reading."""
    taken = _TAKEN.get()
    if taken is None:
        return os.stat(path)  # noqa: PTH116 - str paths on a hot path
    return _given(taken.stats, path, os.stat)


def entry_lstat(entry: os.DirEntry[str]) -> os.stat_result:
    """``entry.stat(follow_symlinks=False)``, kept as its path's :func:`lstat` for the rest
    of the reading: a directory's scan stats each of its files, and the stamp taken after
    (:mod:`.answers`) asks the same 19k paths again on a cold torch venv. A path statted
    earlier in the reading keeps its first answer, as :func:`lstat` would give it."""
    taken = _TAKEN.get()
    if taken is None:
        return entry.stat(follow_symlinks=False)
    return _given(taken.lstats, entry.path, lambda _path: entry.stat(follow_symlinks=False))


def lstats(paths: Sequence[str]) -> list[os.stat_result | None]:
    """:func:`lstat` of each of ``paths`` (None where there is nothing to stat): the stamp
    of a torch venv's 19k paths asks them at once, most given by the reading already."""
    taken = _TAKEN.get()
    given = taken.lstats if taken is not None else {}
    out: list[os.stat_result | None] = []
    add = out.append
    for path in paths:
        try:
            found = _taken(given, path, os.lstat)
        except ValueError:  # a NUL in the path: nothing to stat
            add(None)
            continue
        add(None if isinstance(found, OSError) else found)
    return out


def once(key: Hashable, compute: Callable[[], T]) -> T:
    """``compute()``, computed once per reading for ``key``: for what depends on nothing
    but the reading's stats (the stamp of a read set), which hold for the whole reading."""
    taken = _TAKEN.get()
    if taken is None:
        return compute()
    if key not in taken.derived:
        taken.derived[key] = compute()
    return cast(T, taken.derived[key])  # stored by this key's compute


def _given(
    taken: dict[str, os.stat_result | OSError],
    path: str,
    how: Callable[[str], os.stat_result],
) -> os.stat_result:
    found = _taken(taken, path, how)
    if isinstance(found, OSError):  # raised anew, so no traceback accumulates on it
        raise type(found)(found.errno, found.strerror, path)
    return found


def _taken(
    taken: dict[str, os.stat_result | OSError],
    path: str,
    how: Callable[[str], os.stat_result],
) -> os.stat_result | OSError:
    """``path``'s answer in ``taken`` (its error, where there was nothing to stat), taken
    now and kept where there is none yet."""
    found = taken.get(path)
    if found is None:
        try:
            found = how(path)
        except OSError as exc:
            found = exc
        taken[path] = found
    return found
