"""A content-addressed cache of scenario wheelhouses.

The key hashes everything that changes the wheels' bytes: the resolved scenario, the sources
of the builder (``cc.py`` included) and the interpreter the extension modules are built
for. Entries are built in a temporary directory and published with one ``rename``, under a
file lock, so concurrent builders (pytest-xdist workers, two shells) never see half a
wheelhouse; a loser of the race just uses the winner's entry.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import sysconfig
import tempfile
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock

from scenarios.spec import Scenario

BUILDER_VERSION = 1
"""Bump to invalidate every cached wheelhouse."""

_SOURCES = ("cc.py", "wheel.py", "compile.py", "cache.py")


def cache_root() -> Path:
    """``$CUDAFIX_SCENARIO_CACHE``, else ``~/.cache/cudafix/scenarios``."""
    configured = os.environ.get("CUDAFIX_SCENARIO_CACHE")
    root = Path(configured) if configured else Path.home() / ".cache" / "cudafix" / "scenarios"
    root.mkdir(parents=True, exist_ok=True)
    return root


def uv_cache_dir() -> Path:
    """uv's own cache, kept inside ours so builder calls never touch the user's."""
    return cache_root() / "uv"


def cache_key(spec: Scenario) -> str:
    """A hex digest naming ``spec``'s wheelhouse."""
    digest = hashlib.sha256(f"builder-{BUILDER_VERSION}\n".encode())
    digest.update(spec.model_dump_json().encode())
    here = Path(__file__).parent
    for name in _SOURCES:
        digest.update((here / name).read_bytes())
    digest.update(sys.version.encode())
    digest.update(str(sysconfig.get_config_var("EXT_SUFFIX")).encode())
    digest.update(sysconfig.get_paths()["include"].encode())
    return digest.hexdigest()[:24]


def cached(key: str, build: Callable[[Path], None]) -> Path:
    """Return the entry ``key``, calling ``build(tmpdir)`` to create it when missing."""
    root = cache_root()
    entry = root / key
    if entry.is_dir():
        return entry
    with FileLock(str(root / f"{key}.lock")):
        if entry.is_dir():
            return entry
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{key}-", dir=root))
        try:
            build(tmp)
            tmp.rename(entry)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return entry
