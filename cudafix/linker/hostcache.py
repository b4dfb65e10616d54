"""Host facts remembered across runs, each keyed on the stat of the file it comes from.

Every run asks the same questions of the host: the ELF facts of a dozen system libraries
(libc, libstdc++ ...) and of cudafix's own interpreter, what the host ld.so answers to
``--help`` (a subprocess), and the parsed ``/etc/ld.so.cache``. None of it changes unless
its file does, so a warm run answers from ``.cudafix/cache/host-cache.json`` without
parsing any of it again. A file changed within ``treecache.RACY_NS`` of the read is not
remembered (its mtime cannot vouch for its bytes yet).

System lookups happen while resolving, after the facts are gathered, so the cache is
written when the process exits (``atexit``) if anything new was learnt; an unwritable
location is silently skipped, as for every cache.
"""

from __future__ import annotations

import atexit
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from cudafix.env.memo.treecache import RACY_NS
from cudafix.env.statedir import load_cache, save_cache

FORMAT = "cudafix-host-cache"
VERSION = 1

T = TypeVar("T")


class HostCache:
    """``(kind, path) -> (stat key, JSON value)``; mutable memo, like ``HashCache``."""

    def __init__(self) -> None:
        self._rows: dict[str, list[Any]] = {}
        self._dirty = False
        self._path: Path | None = None
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

    def use(self, cache_file: Path) -> None:
        """Read ``cache_file`` (once per process) and write it back at exit if it changed."""
        if self._path is not None:
            return
        self._path = cache_file
        self._rows = {**_load(cache_file), **self._rows}
        atexit.register(self.save)

    def paths(self) -> list[str]:
        """The host files this process asked about (an answer that used them depends on them)."""
        return sorted(self._asked)

    def save(self) -> bool:
        if not self._dirty or self._path is None:
            return True
        ok = save_cache(self._path, FORMAT, VERSION, {"rows": self._rows})
        self._dirty = not ok
        return ok


def _key(path: str) -> list[int] | None:
    try:
        st = os.stat(path)  # noqa: PTH116 - follows links, as the loader does
    except OSError:
        return None
    return [st.st_dev, st.st_ino, st.st_size, max(st.st_mtime_ns, st.st_ctime_ns)]


def _load(cache_file: Path) -> dict[str, list[Any]]:
    rows = (load_cache(cache_file, FORMAT, VERSION) or {}).get("rows")
    if not isinstance(rows, dict):
        return {}
    return {str(k): v for k, v in rows.items() if isinstance(v, list) and len(v) == 2}


HOST = HostCache()
"""The process-wide host cache (host facts are the same for every environment)."""
