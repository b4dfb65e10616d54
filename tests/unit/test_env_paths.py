"""``to_env_path``'s shortcuts against ``os.path.relpath`` on generated paths: the same
answer for every prefix and path, normal or not, inside or outside."""

from __future__ import annotations

import os
import random

import pytest

from cudafix.linker.linkage import to_env_path

_PARTS = ("venv", "lib", "usr", ".", "..", "", ".hidden", "venv2", "x.so")


def _reference(prefix: str, path: str) -> str | None:
    """The straightforward computation: relpath, None at or outside ``prefix``."""
    rel = os.path.relpath(path, prefix)
    if rel == os.curdir or rel.startswith(os.pardir + os.sep) or rel == os.pardir:
        return None
    return rel.replace(os.sep, "/")


def _random_path(rng: random.Random) -> str:
    return "/" + "/".join(rng.choice(_PARTS) for _ in range(rng.randint(0, 5)))


@pytest.mark.parametrize("seed", range(5))
def test_to_env_path_is_relpaths_answer(seed: int) -> None:
    rng = random.Random(seed)
    prefixes = ["/", "/venv", "/venv/", "/venv/lib", "/venv//lib", "/.hidden/venv"]
    prefixes += [_random_path(rng) for _ in range(20)]
    for prefix in prefixes:
        for _ in range(400):
            path = _random_path(rng)
            if rng.random() < 0.5:  # a path under the prefix, as providers mostly are
                path = prefix.rstrip("/") + path
            assert to_env_path(prefix, path) == _reference(prefix, path), (prefix, path)
