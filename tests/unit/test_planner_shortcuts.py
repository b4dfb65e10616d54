"""The planner's shortcuts (no second resolution when nothing deleted is seen by the loader,
none at all when no ELF object changes either) against the full computation, on generated
environments: the same plan for every removal, with every policy."""

from __future__ import annotations

import random

import pytest

from cudafix.model.names import DistName
from cudafix.model.plan import Options
from cudafix.plan import planner
from cudafix.plan.facts import Facts
from cudafix.plan.planner import Request, build_plan, wheels_needed
from tests.support.facts import Dist, Lib, facts

_DIRS = ("a/lib", "b/lib", "c")


def _environment(rng: random.Random) -> Facts:
    libs: dict[str, Lib] = {}
    names = [f"lib{i}.so.{rng.randint(1, 2)}" for i in range(6)]
    for i, soname in enumerate(names):
        path = f"{rng.choice(_DIRS)}/{soname}"
        needed = tuple(rng.sample(names[:i], k=min(i, rng.randint(0, 2))))
        rpath = tuple(rng.sample(["$ORIGIN", "$ORIGIN/../../a/lib", "$ORIGIN/../b/lib"], k=2))
        libs[path] = Lib(soname, needed, rpath=rpath)
    files = [*libs, "a/__init__.py", "b/mod.py", "c/tool.py", "a/data.txt"]
    dists = []
    for i in range(4):
        owned = rng.sample(files, k=rng.randint(1, 4))
        if i == 0:  # always one pure-Python distribution
            owned = [f for f in owned if not f.endswith((".so.1", ".so.2"))] or ["b/mod.py"]
        body = {f: f"{f}-{rng.randint(0, 1)}" for f in owned}
        dists.append(Dist(f"d{i}", "1.0", body, top_level=(f"d{i}",)))
    disk = {f: f"{f}-0" for f in files if rng.random() < 0.8}
    return facts(dists, libs, disk=disk)


def _plans(env: Facts) -> list[str]:
    out = []
    for name in sorted(env.inventory.distributions):
        for policy in ({}, {"keep_shared": True}, {"repair": True}):
            request = Request((DistName(name),), (name,), Options(**policy))
            pins = wheels_needed(env, request)
            out.append(f"{pins} {build_plan(env, request).model_dump_json()}")
    return out


@pytest.mark.parametrize("seed", range(40))
def test_the_shortcuts_plan_what_resolving_every_state_plans(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = _environment(random.Random(seed))
    fast = _plans(env)
    monkeypatch.setattr(planner, "_loader_may_see", lambda facts, gone: True)
    assert fast == _plans(env)
