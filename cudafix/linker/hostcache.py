"""Host facts remembered across runs, each keyed on the stat of the file it comes from.

Every run asks the same questions of the host: the ELF facts of a dozen system libraries
(libc, libstdc++ ...) and of cudafix's own interpreter, what the host ld.so answers to
``--help`` (a subprocess), and the parsed ``/etc/ld.so.cache``. None of it changes unless
its file does, so a warm run answers from ``.cudafix/cache/host-cache.json`` without
parsing any of it again. A file changed within ``stats.RACY_NS`` of the read is not
remembered (its mtime cannot vouch for its bytes yet).

System lookups happen while resolving, after the facts are gathered, so the cache is
written by whoever resolved (:meth:`cudafix.linker.hostview.HostView.save`) once the
decisions are made, if anything new was learnt; an unwritable location is silently skipped,
as for every cache.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from cudafix.env.memo import stats
from cudafix.env.memo.stats import RACY_NS
from cudafix.env.statedir import load_cache, save_cache

FORMAT = "cudafix-host-cache"
VERSION = 1

T = TypeVar("T")


class HostCache:
    """``(kind, path) -> (stat key, JSON value)``; mutable memo, like ``HashCache``."""

    def __init__(self, cache_file: Path | None = None) -> None:
        """Remembered in ``cache_file`` (read now, written by :meth:`save`); None: this
        process only."""
        data = (load_cache(cache_file, FORMAT, VERSION) or {}) if cache_file is not None else {}
        self._rows = _rows(data.get("rows"))
        self._consulted = _consulted(data.get("consulted"))
        self._dirty = False
        self._path = cache_file
        self._asked: set[str] = set()

    def answer(
        self,
        kind: str,
        path: str,
        compute: Callable[[], T],
        encode: Callable[[T], Any],
        decode: Callable[[Any], T | None],
    ) -> T:
        """``compute()``'s value for ``path``, reused while the file's stat is unchanged."""
        key = _key(path)
        name = f"{kind}:{path}"
        self._asked.add(path)
        row = self._rows.get(name)
        if key is not None and row is not None and row[0] == key:
            hit = decode(row[1])
            if hit is not None:
                return hit
        value = compute()
        if key is not None and key[3] < time.time_ns() - RACY_NS:
            self._rows[name] = [key, encode(value)]
            self._dirty = True
        return value

    def paths(self) -> list[str]:
        """The host files asked about (an answer that used them depends on them)."""
        return sorted(self._asked)

    def save(self, consulted: Sequence[str] = ()) -> bool:
        """Write what was learnt to the cache file, with the host paths the run
        ``consulted`` (what its answers depend on: :func:`last_consulted`); nothing is
        written when neither changed. False when it could not be written."""
        read = sorted(set(consulted))
        if self._path is None or (not self._dirty and read == self._consulted):
            return True
        ok = save_cache(self._path, FORMAT, VERSION, {"rows": self._rows, "consulted": read})
        self._dirty = not ok
        if ok:
            self._consulted = read
        return ok


def last_consulted(cache_file: Path) -> list[str]:
    """The host paths the last run that saved ``cache_file`` consulted (empty: none known)."""
    return _consulted((load_cache(cache_file, FORMAT, VERSION) or {}).get("consulted"))


def _consulted(value: Any) -> list[str]:
    return [str(p) for p in value] if isinstance(value, list) else []


def _key(path: str) -> list[int] | None:
    try:
        st = stats.stat(path)  # follows links, as the loader does
    except OSError:
        return None
    return [st.st_dev, st.st_ino, st.st_size, max(st.st_mtime_ns, st.st_ctime_ns)]


def _rows(rows: Any) -> dict[str, list[Any]]:
    if not isinstance(rows, dict):
        return {}
    return {str(k): v for k, v in rows.items() if isinstance(v, list) and len(v) == 2}
