"""The inventory's lookups (files under a dist-info, bytecode of a source) against the scans
they replace, on generated trees: the same paths, as often (in another order)."""

from __future__ import annotations

import posixpath
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from cudafix.env.inventory import (
    Distribution,
    FileStat,
    Inventory,
    RecordEntry,
    pyc_source,
)
from cudafix.model.names import DistName, EnvPath

_PARTS = ("pkg", "sub", "__pycache__", "a.dist-info", "b-1.0.dist-info", "x.dist-info", "m")
_NAMES = (
    "mod.py",
    "mod.cpython-311.pyc",
    "mod.cpython-311.opt-1.pyc",
    "other.cpython-311.pyc",
    "RECORD",
    "x.pyc",
    "__init__.py",
    ".hidden.pyc",
    "a.dist-info",
)


def _reference_pyc_source(path: str) -> str | None:
    """The straightforward computation: split, test the parent, join."""
    if not path.endswith(".pyc") or "__pycache__/" not in path:
        return None
    head, name = posixpath.split(path)
    if posixpath.basename(head) != "__pycache__":
        return None
    return posixpath.join(posixpath.dirname(head), name.split(".", 1)[0] + ".py")


def _random_path(rng: random.Random, odd: bool) -> str:
    parts = [rng.choice(_PARTS) for _ in range(rng.randint(0, 4))]
    path = "/".join([*parts, rng.choice(_NAMES)])
    if odd:  # what no walk makes, but a caller might pass
        path = rng.choice(["/", "//", ""]) + path.replace("/", rng.choice(["/", "//"]), 1)
        path += rng.choice(["", "/"])
    return path


@pytest.mark.parametrize("seed", range(5))
def test_pyc_source_is_the_straightforward_computation(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(3000):
        path = _random_path(rng, odd=rng.random() < 0.3)
        assert pyc_source(path) == _reference_pyc_source(path), path


def _inventory(rng: random.Random) -> Inventory:
    site = "lib/python3.11/site-packages"
    files = {EnvPath(f"{site}/{_random_path(rng, odd=False)}") for _ in range(rng.randint(0, 300))}
    stat = FileStat("file", 1, 0o644, 1, 1, 1)
    dists = {}
    for i, info in enumerate(("a.dist-info", "b-1.0.dist-info", "a.dist-info/x.dist-info", "none")):
        rows = [p for p in sorted(files) if rng.random() < 0.3]
        rows += [EnvPath(f"{site}/pkg/mod.py"), EnvPath(f"{site}/gone/mod.py")]
        name = DistName(f"d{i}")
        dists[name] = Distribution(
            name=name,
            version="1",
            dist_info=EnvPath(f"{site}/{info}"),
            site_packages=EnvPath(site),
            installer=None,
            requires=(),
            files=tuple(RecordEntry(p, p, None, None) for p in rows),
            top_level=(),
        )
    order = list(files)
    rng.shuffle(order)
    return Inventory(
        prefix=Path("/venv"),
        python=None,
        site_packages=(EnvPath(site),),
        distributions=dists,
        unmanaged=(),
        unsafe=(),
        files={p: stat for p in order},
        owners={},
        shared=(),
        missing={},
    )


def _reference_paths(inv: Inventory, name: DistName) -> Iterator[EnvPath]:
    """The scans the indexes replace: every file for the dist-info, every file for bytecode."""
    dist = inv.distributions[name]
    yield from (e.path for e in dist.files)
    info_prefix = dist.dist_info + "/"
    yield from (p for p in inv.files if p.startswith(info_prefix))
    for e in dist.files:
        if e.path.endswith(".py"):
            yield from (p for p in inv.files if pyc_source(p) == e.path)


@pytest.mark.parametrize("seed", range(20))
def test_distribution_paths_are_those_the_scans_find(seed: int) -> None:
    inv = _inventory(random.Random(seed))
    for name in inv.distributions:
        assert sorted(inv.iter_distribution_paths(name)) == sorted(_reference_paths(inv, name))
        assert inv.distribution_paths(name) == tuple(sorted(set(_reference_paths(inv, name))))
