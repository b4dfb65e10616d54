"""Soname literals in a distribution's Python sources: the libraries its Python code loads.

CuPy, JAX's PJRT plugin and everything built on cuda-pathfinder load CUDA libraries from
Python, by a name written as a string (``"libcurand.so.10"``) or a path built from one. Some
build the version at run time (``f"libcufft.so.{cufft_version}"``, ``"libcudart.so.%s"``):
such a template is kept as ``libcufft.so.*``, any version of that library. A cheap regex over
each ``.py`` file a RECORD lists finds those names; which of them count is decided
elsewhere (:mod:`cudafix.plan.literals`). Each file is read at most once per
content: the names found are cached by its stat key, like the ELF facts.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cudafix.env.inventory import Inventory
from cudafix.env.statedir import load_cache, save_cache
from cudafix.model.names import SONAME_LITERAL, EnvPath, Soname

log = logging.getLogger("cudafix.env.pysources")

CACHE_FORMAT = "cudafix-pysources-cache"
CACHE_VERSION = 2
MAX_READ = 1 << 20
"""Bytes read per source file: a module that spells a library name does so near its top, or
in a table well under this."""
_QUOTED = re.compile(rb"""(["'])(""" + SONAME_LITERAL + rb""")\1""")
_TEMPLATE = re.compile(
    rb"""(["'])(lib[A-Za-z0-9_+-]+(?:\.[A-Za-z0-9_+-]+)*?\.so)\.(?:\{[^{}"'\n]{0,64}\}|%[sd])\1"""
)
ANY_VERSION = ".*"
"""The suffix of a template's name: ``libcufft.so.*``."""

Literals = Mapping[EnvPath, tuple[Soname, ...]]
"""Per Python source (EnvPath), the sonames it spells, in order; sources without any left out."""


def source_literals(data: bytes) -> tuple[Soname, ...]:
    """The string literals in ``data`` that are a soname and nothing else, in order; then
    the templates that build one's version (``libcufft.so.*``)."""
    if b".so" not in data:
        return ()
    found = dict.fromkeys(Soname(m.group(2).decode("ascii")) for m in _QUOTED.finditer(data))
    for m in _TEMPLATE.finditer(data):
        found.setdefault(Soname(m.group(2).decode("ascii") + ANY_VERSION))
    return tuple(found)


def python_literals(prefix: Path, inventory: Inventory, cache_path: Path | None) -> Literals:
    """The soname literals of every ``.py`` file a RECORD lists and the tree holds.

    An unchanged file (same device, inode, size and mtime) is answered from the cache
    without being opened; the cache is rewritten only when something changed.
    """
    cached = _load(cache_path) if cache_path is not None else {}
    base = str(prefix)  # a str join: pathlib's costs more than the read of a small file
    rows: dict[str, list[Any]] = {}
    read = 0
    for dist in inventory.distributions.values():
        for entry in dist.files:
            stat = inventory.files.get(entry.path)
            if not entry.path.endswith(".py") or stat is None or stat.kind != "file":
                continue
            key = [stat.dev, stat.ino, stat.size, stat.mtime_ns]
            row = cached.get(entry.path)
            if row is not None and row[:4] == key and isinstance(row[4], list):
                rows[entry.path] = row
                continue
            rows[entry.path] = [*key, list(_read(f"{base}/{entry.path}") if stat.size else [])]
            read += 1
    changed = read or rows.keys() != cached.keys()
    if cache_path is not None and changed and not _save(cache_path, rows):
        log.debug("could not write the Python sources cache %s", cache_path)
    return {EnvPath(p): tuple(Soname(str(n)) for n in row[4]) for p, row in rows.items() if row[4]}


def _read(path: str) -> tuple[Soname, ...]:
    """The literals of one file; an unreadable one (or a symlink: never read through) has none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return ()
    try:
        return source_literals(os.pread(fd, MAX_READ, 0))
    except OSError:
        return ()
    finally:
        os.close(fd)


def _save(path: Path, rows: Mapping[str, list[Any]]) -> bool:
    return save_cache(path, CACHE_FORMAT, CACHE_VERSION, {"files": rows})


def _load(path: Path) -> dict[str, list[Any]]:
    """A corrupt, foreign-version or unreadable cache is an empty one."""
    data = load_cache(path, CACHE_FORMAT, CACHE_VERSION) or {}
    files = data.get("files")
    if not isinstance(files, dict):
        return {}
    return {k: v for k, v in files.items() if isinstance(v, list) and len(v) == 5}
