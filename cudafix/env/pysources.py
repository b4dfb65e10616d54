"""Soname literals in a distribution's Python sources: the libraries its Python code loads.

CuPy, JAX's PJRT plugin and everything built on cuda-pathfinder load CUDA libraries from
Python, by a name written as a string (``"libcurand.so.10"``) or a path built from one. Some
build the version at run time (``f"libcufft.so.{cufft_version}"``, ``"libcudart.so.%s"``):
such a template is kept as ``libcufft.so.*``, any version of that library. A cheap regex
over each ``.py`` file a RECORD lists (test modules aside) finds those names; which of them
count is decided elsewhere (:mod:`cudafix.plan.literals`). Each file is read at most once per
content: the names found are kept in the index of facts by its stat key, like the ELF facts
(:mod:`cudafix.env.memo.index`).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path

from cudafix.env.inventory import Inventory
from cudafix.env.memo.index import FactIndex, StatKey, stat_key
from cudafix.env.readmany import read_each
from cudafix.model.names import SONAME_LITERAL, EnvPath, Soname

log = logging.getLogger("cudafix.env.pysources")

MAX_READ = 1 << 20
"""Bytes read per source file: a module that spells a library name does so near its top, or
in a table well under this."""
_QUOTED = re.compile(rb"""(["'])(""" + SONAME_LITERAL + rb""")\1""")
_TEMPLATE = re.compile(
    rb"""(["'])(lib[A-Za-z0-9_+-]+(?:\.[A-Za-z0-9_+-]+)*?\.so)\.(?:\{[^{}"'\n]{0,64}\}|%[sd])\1"""
)
_CANDIDATE = re.compile(rb"""\.so(?:["']|\.[0-9{%])""")
"""What every match of :data:`_QUOTED` or :data:`_TEMPLATE` holds: ``.so`` then the closing
quote, a version's dot and digit, or a template's ``.{`` / ``.%``. Most sources that spell
``.so`` at all (``x.sort()``, ``.solve``) hold no such thing and are never scanned further."""
ANY_VERSION = ".*"
"""The suffix of a template's name: ``libcufft.so.*``."""

Literals = Mapping[EnvPath, tuple[Soname, ...]]
"""Per Python source (EnvPath), the sonames it spells, in order; sources without any left out."""


def source_literals(data: bytes) -> tuple[Soname, ...]:
    """The string literals in ``data`` that are a soname and nothing else, in order; then
    the templates that build one's version (``libcufft.so.*``)."""
    if _CANDIDATE.search(data) is None:
        return ()
    found = dict.fromkeys(Soname(m.group(2).decode("ascii")) for m in _QUOTED.finditer(data))
    for m in _TEMPLATE.finditer(data):
        found.setdefault(Soname(m.group(2).decode("ascii") + ANY_VERSION))
    return tuple(found)


def python_literals(prefix: Path, inventory: Inventory, index: FactIndex | None) -> Literals:
    """The soname literals of every ``.py`` file a RECORD lists and the tree holds.

    An unchanged file (same device, inode, size and mtime) is answered from ``index``
    without being opened; the others are read several at once (:mod:`cudafix.env.readmany`),
    and only what was read now is written.
    """
    stored = index.literal_rows() if index is not None else {}
    base = str(prefix)  # a str join: pathlib's costs more than the read of a small file
    names_of: dict[EnvPath, tuple[Soname, ...] | None] = {}  # RECORD order; None: to read
    unread: list[tuple[EnvPath, StatKey]] = []
    fresh: dict[str, tuple[StatKey, str]] = {}
    files = inventory.files
    for dist in inventory.distributions.values():
        for path in dist.paths:
            if not path.endswith(".py") or _test_module(path):
                continue
            if (stat := files.get(path)) is None:
                continue
            if stat.kind != "file" or path in names_of:
                continue  # not a file, or listed by two RECORDs
            key = stat_key(stat.dev, stat.ino, stat.size, stat.mtime_ns)
            row = stored.get(path)
            if row is not None and row[0] == key:
                names_of[path] = tuple(Soname(n) for n in row[1].split("\n") if n)
            elif stat.size:
                names_of[path] = None
                unread.append((path, key))
            else:
                names_of[path] = ()
                fresh[path] = (key, "")
    read = read_each(_read, [f"{base}/{path}" for path, _ in unread])
    for (path, key), names in zip(unread, read, strict=True):
        names_of[path] = names
        fresh[path] = (key, "\n".join(names))
    if index is not None and fresh and not index.save_literals(fresh):
        log.debug("could not write the Python sources' literals to the index")
    return {path: names for path, names in names_of.items() if names}


_TEST_DIRS = frozenset({"tests", "test", "testing"})


def _test_module(path: str) -> bool:
    """A test module (in a ``tests``, ``test`` or ``testing`` package, or ``test_*.py``,
    ``*_test.py``, ``conftest.py``): the library's own code never imports it, so the names it
    spells are fixtures (``torch/testing/_internal/torchbind_impls.py`` names
    ``libtorchbind_test.so``, built only in torch's source tree), not loads."""
    *dirs, name = path.split("/")
    return (
        name.startswith("test_")
        or name.endswith("_test.py")
        or name == "conftest.py"
        or not _TEST_DIRS.isdisjoint(dirs)
    )


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
