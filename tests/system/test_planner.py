"""The planner over facts read from real scenario venvs (pure tests: test_planner_pure.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from cudafix.env.target import locate_target
from cudafix.fetch.staged import Staging
from cudafix.gather import gather
from cudafix.model.names import DistName
from cudafix.model.plan import Options
from cudafix.model.reasons import KeptForeign
from cudafix.plan.facts import Facts
from cudafix.plan.planner import Request, build_plan
from cudafix.tx.difference import Deviation
from cudafix.tx.verify import compare
from tests.support.venvs import ScenarioFactory

PIN = (DistName("nvidia-cudnn-cu12"), "9.10.2.21")


def _facts(built_venv: Path) -> Facts:
    return gather(locate_target(None, str(built_venv), {}, Path.cwd()))


@pytest.mark.slow
def test_removing_cudafix_own_dependencies_from_inside_is_refused(
    scenario: ScenarioFactory,
) -> None:
    facts = _facts(scenario("incident").venv)
    facts = dataclasses.replace(facts, self_dependencies=frozenset({DistName("nvidia-nvtx-cu13")}))
    plan = build_plan(
        facts, Request((DistName("nvidia-nvtx-cu13"),), ("nvidia-nvtx-cu13",), Options())
    )
    assert plan.verdict == "refused"
    assert plan.self_dependencies == ["nvidia-nvtx-cu13"]


@pytest.mark.slow
def test_offline_repair_without_a_wheel_is_refused(scenario: ScenarioFactory) -> None:
    facts = dataclasses.replace(
        _facts(scenario("incident").venv),
        staging=Staging(fetched=True, problems={PIN: "not in the cache"}, source="uv's cache"),
    )
    names = (DistName("nvidia-cudnn-cu13"),)
    plan = build_plan(facts, Request(names, names, Options(repair=True, offline=True)))
    assert plan.verdict == "refused"
    assert [(r.kind, r.subject, getattr(r, "source", None)) for r in plan.reasons] == [
        ("no-wheel", "nvidia-cudnn-cu12", "uv's cache")
    ]


@pytest.mark.slow
def test_keep_shared_keeps_claimed_paths_and_warns_about_foreign_bytes(
    scenario: ScenarioFactory,
) -> None:
    facts = _facts(scenario("incident").venv)
    names = (DistName("nvidia-cudnn-cu13"),)
    plan = build_plan(facts, Request(names, names, Options(keep_shared=True)))
    assert plan.verdict == "pass"
    assert any(p.endswith("nvidia/cudnn/lib/libcudnn.so.9") for p in plan.kept_paths)
    assert not set(plan.kept_paths) & set(plan.deleted_paths)
    assert any(
        isinstance(w, KeptForeign) and w.subject == "nvidia-cudnn-cu13" for w in plan.warnings
    )


@pytest.mark.slow
def test_repair_probes_the_consumer_of_rewritten_libraries(scenario: ScenarioFactory) -> None:
    facts = _facts(scenario("incident").venv)
    names = (DistName("nvidia-cudnn-cu13"),)
    plan = build_plan(facts, Request(names, names, Options(repair=True)))
    assert "torch" in plan.probe_modules
    assert any(p.endswith("torch/lib/libtorch_cuda.so") for p in plan.probe_libraries)


@pytest.mark.slow
def test_verify_names_every_way_the_result_differs_from_the_plan(
    scenario: ScenarioFactory,
) -> None:
    facts = _facts(scenario("incident").venv)
    names = (DistName("nvidia-cudnn-cu13"),)
    plan = build_plan(facts, Request(names, names, Options(repair=True)))
    versions = {n: d.version for n, d in facts.inventory.distributions.items()}
    as_planned = {n: v for n, v in versions.items() if n not in names}
    rewritten = set(plan.rewritten_paths)
    assert compare(plan, as_planned, lambda p: p in rewritten) == []
    problems = compare(plan, versions, lambda p: True)
    assert Deviation("still-installed", "nvidia-cudnn-cu13") in problems
    assert any(p.kind == "not-deleted" for p in problems)
    assert Deviation("disappeared", "nvidia-nccl-cu12") in compare(
        plan,
        {n: v for n, v in as_planned.items() if n != "nvidia-nccl-cu12"},
        rewritten.__contains__,
    )
