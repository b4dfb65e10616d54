"""``to_env_path``'s shortcuts against ``os.path.relpath`` on generated paths: the same
answer for every prefix and path, normal or not, inside or outside."""

from __future__ import annotations

import os
import random
from pathlib import Path

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
def test_a_relative_path_is_placed_from_the_working_directory(
    seed: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """relpath makes a relative path (a soname) absolute from the cwd: inside the prefix
    when the cwd is."""
    rng = random.Random(seed)
    prefix = tmp_path / "venv"
    (prefix / "lib").mkdir(parents=True)
    for cwd in (tmp_path, prefix, prefix / "lib", Path("/")):
        monkeypatch.chdir(cwd)
        for _ in range(300):
            path = _random_path(rng).lstrip("/") or "libc.so.6"
            for base in (str(prefix), f"{prefix}/", "/elsewhere"):
                assert to_env_path(base, path) == _reference(base, path), (cwd, base, path)
    with pytest.raises(ValueError, match="no path"):
        to_env_path(str(prefix), "")  # as relpath says


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
