"""The outcome of a plan does not depend on which paths the backend deletes.

Two real backends around the bundled uv: one that deletes only what the RECORD it is handed
lists (uv today with cudafix's RECORDs, or uv with a proposed change that keeps paths another
RECORD claims), and one that also deletes every shared path the removed distributions claim,
as pip and uv do when shown the full RECORD. Both must commit the same bytes.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from cudafix import app
from cudafix.fetch.backend import UvBackend
from cudafix.model.plan import Plan
from cudafix.model.sources import Sources
from cudafix.process import Completed
from cudafix.tx.apply import run_transaction
from scenarios.fingerprint import diff_fingerprints, fingerprint
from tests.support.venvs import ScenarioFactory

pytestmark = pytest.mark.slow
"""Builds real venvs or runs the CLI through transactions: left out of ``make test-fast``."""


@dataclass(frozen=True)
class DeletingBackend:
    """uv, then every path the plan's removed distributions share with a remaining one."""

    uv: UvBackend
    plan: Plan

    def uninstall(self, names: Sequence[str]) -> Completed:
        done = self.uv.uninstall(names)
        prefix = Path(self.plan.target.prefix)
        for shared in self.plan.shared_paths:
            if os.path.lexists(prefix / shared.path):
                (prefix / shared.path).unlink()
        return done

    def reinstall(self, pins: Sequence[str]) -> Completed:
        return self.uv.reinstall(pins)


def _plan(venv: Path, wheelhouse: Path, selector: str, **how: bool) -> Plan:
    sources = Sources(offline=True, find_links=(str(wheelhouse),))
    request = app.RemoveArgs((selector,), **how)
    target = app.FactArgs(app.TargetArgs(venv=str(venv)))
    return app.plan_remove(target, request, sources, "uv", mutating=True).plan


@pytest.mark.parametrize(
    ("selector", "how"),
    [
        ("nvidia-*-cu13", {"keep_shared": True}),
        ("nvidia-*-cu13", {"repair": True}),
        ("nvidia-nvtx-cu13", {"keep_shared": True}),  # its shared nvidia/__init__.py stays
    ],
)
def test_keeping_and_deleting_backends_commit_the_same_post_state(
    scenario: ScenarioFactory, selector: str, how: dict[str, bool]
) -> None:
    states = []
    for deleting in (False, True):
        built = scenario("incident")
        plan = _plan(built.venv, built.wheelhouse, selector, **how)
        assert plan.verdict == "pass", plan.reasons
        uv = UvBackend(built.python, Sources(True, (str(built.wheelhouse),)))
        backend = DeletingBackend(uv, plan) if deleting else uv
        run_transaction(plan, backend=backend)
        assert plan.shared_paths
        states.append(_site_packages_state(built.venv))
    assert diff_fingerprints(states[0], states[1]) == []


def _site_packages_state(venv: Path) -> dict[str, tuple[object, ...]]:
    """site-packages' fingerprint, uv's cache stamp left out: ``uv_cache.json`` holds the
    time uv's cache unpacked the wheel (a checked private copy of a staged wheel is always
    unpacked anew), and RECORD its hash; every other byte must agree."""
    state = {}
    for p, v in fingerprint(venv).items():
        if "site-packages/" not in p or p.endswith(".dist-info/uv_cache.json"):
            continue
        if p.endswith(".dist-info/RECORD"):
            rows = (venv / p).read_text().splitlines()
            v = tuple(r for r in rows if not r.split(",")[0].endswith("/uv_cache.json"))
        state[p] = v
    return state
