"""The planner over hand-made facts: no venv, no uv, only data in and a plan out."""

from __future__ import annotations

import pytest

from cudafix.cli.wording import error_context, reason_lines
from cudafix.fetch.staged import Staging
from cudafix.linker.linkage import resolve_chains
from cudafix.model.errors import PlanRefused
from cudafix.model.names import DistName
from cudafix.model.plan import Options
from cudafix.model.reasons import (
    AnotherBuild,
    CoOwnsDeleted,
    NoWheel,
    RemoveKeepingShared,
    RemoveThenReinstall,
    RequirementBroken,
    Unfetched,
)
from cudafix.plan import planner
from cudafix.plan.admit import refuse_unless_allowed
from cudafix.plan.planner import Request, build_plan, wheels_needed
from tests.support.facts import Dist, Lib, env, facts, wheel_of

CUDNN = "nvidia/cudnn/lib/libcudnn.so.9"
TORCH_LIB = "torch/lib/libtorch_cuda.so"
TORCH = Dist(
    "torch",
    "2.9.0",
    {"torch/__init__.py": "torch-init", TORCH_LIB: "torch-lib"},
    requires=("nvidia-cudnn-cu12==9.10.2.21",),
    top_level=("torch",),
)
CU12 = Dist("nvidia-cudnn-cu12", "9.10.2.21", {"nvidia/__init__.py": "", CUDNN: "cudnn-12"})
CU13 = Dist("nvidia-cudnn-cu13", "9.13.0.50", {"nvidia/__init__.py": "", CUDNN: "cudnn-13"})
LIBS = {
    TORCH_LIB: Lib(
        "libtorch_cuda.so", ("libcudnn.so.9",), rpath=("$ORIGIN/../../nvidia/cudnn/lib",)
    ),
    CUDNN: Lib("libcudnn.so.9"),
}
DROP_CU13 = (DistName("nvidia-cudnn-cu13"),)
PIN12 = (DistName("nvidia-cudnn-cu12"), "9.10.2.21")


def _request(**options: bool) -> Request:
    return Request(DROP_CU13, ("nvidia-cudnn-cu13",), Options(**options))


def _incident(staging: Staging | None = None):  # type: ignore[no-untyped-def]
    """cu13 installed over cu12: the shared library holds cu13's bytes."""
    return facts([TORCH, CU12, CU13], LIBS, staging=staging)


def test_removing_a_co_owner_orphans_the_soname_and_offers_what_passes() -> None:
    plan = build_plan(_incident(), _request())
    assert plan.verdict == "refused"
    assert [(lost.consumer, lost.need) for lost in plan.lost] == [(env(TORCH_LIB), "libcudnn.so.9")]
    flags = {a.argv[a.argv.index("--venv") + 2] for a in plan.alternatives}
    assert flags == {"--repair", "--keep-shared"}
    assert [a.summary for a in plan.alternatives] == [
        RemoveThenReinstall(pins=["nvidia-cudnn-cu12==9.10.2.21"]),
        RemoveKeepingShared(
            paths=[env("nvidia/__init__.py"), env(CUDNN)],
            foreign=[env(CUDNN)],  # what --keep-shared leaves: cu13's bytes, under cu12's name
            holders=["nvidia-cudnn-cu13"],
        ),
    ]
    assert all(a.argv[:2] == ["cudafix", "remove"] for a in plan.alternatives)
    assert all(a.argv[-1] == "--dry-run" for a in plan.alternatives)
    assert plan.preconditions.path_hashes[env(CUDNN)] == "cudnn-13"
    assert set(plan.preconditions.records) == {"nvidia-cudnn-cu13"}


def test_each_state_is_resolved_once_across_the_simulations_of_a_refusal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A refused removal is simulated three times (as asked, ``--repair``, ``--keep-shared``).
    Where those delete the same files (nothing is shared, nothing to reinstall), the
    environment before and after is resolved once each, not three times. Where they differ
    (the incident), each is its own state: the plan above is unchanged."""
    calls: list[int] = []

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        return resolve_chains(*args, **kwargs)

    monkeypatch.setattr(planner, "resolve_chains", counted)
    lone = build_plan(facts([TORCH, CU12], LIBS), Request((PIN12[0],), (PIN12[0],), Options()))
    assert lone.verdict == "refused" and not lone.alternatives
    assert [(lost.consumer, lost.need) for lost in lone.lost] == [(env(TORCH_LIB), "libcudnn.so.9")]
    assert len(calls) == 2


def test_repair_reinstalls_the_co_owner_when_its_staged_wheel_is_the_installed_build() -> None:
    staged = Staging(fetched=True, wheels={PIN12: wheel_of(CU12)}, source="find-links W")
    incident = _incident(staged)
    assert wheels_needed(incident, _request(repair=True)) == (PIN12,)
    plan = build_plan(incident, _request(repair=True))
    assert plan.verdict == "pass", plan.reasons
    assert [(r.name, r.version) for r in plan.reinstall] == [PIN12]
    paths = [env("nvidia/__init__.py"), env(CUDNN)]
    assert plan.reinstall[0].reason == CoOwnsDeleted(subject="nvidia-cudnn-cu12", paths=paths)
    assert set(plan.preconditions.records) == {"nvidia-cudnn-cu13", "nvidia-cudnn-cu12"}
    assert "torch" in plan.probe_modules


def test_a_staged_wheel_of_another_build_refuses_at_plan_time_naming_source_and_path() -> None:
    other = wheel_of(CU12, changed={CUDNN: "cudnn-12-rebuilt"})
    plan = build_plan(
        _incident(Staging(fetched=True, wheels={PIN12: other}, source="the index X")),
        _request(repair=True),
    )
    assert plan.verdict == "refused"
    [reason] = plan.reasons
    assert reason.identity == ("another-build", "nvidia-cudnn-cu12", (env(CUDNN),))
    assert isinstance(reason, AnotherBuild)
    assert (reason.version, reason.source) == ("9.10.2.21", "the index X")
    assert reason.differences[0].startswith(f"{env(CUDNN)}: other bytes")


def test_a_wheel_that_cannot_be_had_refuses_with_uvs_words() -> None:
    staged = Staging(fetched=True, problems={PIN12: "no matching distribution"}, source="cache")
    plan = build_plan(_incident(staged), _request(repair=True))
    assert plan.verdict == "refused"
    assert plan.reasons == [
        NoWheel(
            subject="nvidia-cudnn-cu12",
            version="9.10.2.21",
            source="cache",
            problem="no matching distribution",
        )
    ]


def test_without_fetching_the_plan_says_it_did_not_check() -> None:
    plan = build_plan(_incident(Staging(fetched=False)), _request(repair=True))
    assert plan.verdict == "pass"
    [unchecked] = [w for w in plan.warnings if isinstance(w, Unfetched)]
    assert unchecked.pins == ["nvidia-cudnn-cu12==9.10.2.21"]


def test_requirements_are_judged_on_the_after_state_installs_make() -> None:
    """Removing cu12 breaks torch's pin; installing the same pin in one plan mends it."""
    env12 = facts([TORCH, CU12], LIBS)
    drop12 = (DistName("nvidia-cudnn-cu12"),)
    alone = build_plan(env12, Request(drop12, (), Options()))
    assert any(
        isinstance(r, RequirementBroken)
        and (r.subject, r.requirement.split("==")[0]) == ("torch", "nvidia-cudnn-cu12")
        for r in alone.reasons
    ), alone.reasons
    staged = Staging(fetched=True, wheels={PIN12: wheel_of(CU12)})
    mended = build_plan(
        facts([TORCH, CU12], LIBS, staging=staged),
        Request(drop12, (), Options(), installs=(PIN12,)),
    )
    assert mended.requirement_breaks == []
    assert [i.name for i in mended.install] == ["nvidia-cudnn-cu12"]
    assert env(CUDNN) in mended.install[0].paths


def test_installing_what_is_installed_without_removing_it_is_refused() -> None:
    staged = Staging(fetched=True, wheels={PIN12: wheel_of(CU12)})
    plan = build_plan(
        facts([TORCH, CU12], LIBS, staging=staged), Request((), (), Options(), installs=(PIN12,))
    )
    assert plan.verdict == "refused"
    assert ("installed-already", "nvidia-cudnn-cu12", ()) in [r.identity for r in plan.reasons]


def test_reasons_are_worded_as_the_cli_prints_them() -> None:
    """The wording is the one place a reason becomes a sentence: the verdict and a refused
    plan's error context both print these."""
    staged = Staging(fetched=True, problems={PIN12: "no matching distribution"}, source="cache")
    plan = build_plan(_incident(staged), _request(repair=True))
    assert reason_lines(plan.reasons, plan.target) == [
        "no wheel for nvidia-cudnn-cu12==9.10.2.21 can be had from cache: no matching "
        "distribution; point cudafix at the wheel it was installed from with --find-links DIR, "
        "--index-url URL or --extra-index-url URL"
    ]
    with pytest.raises(PlanRefused) as refused:
        refuse_unless_allowed(plan, force=False)
    assert refused.value.reasons == tuple(plan.reasons)
    assert error_context(refused.value) == reason_lines(plan.reasons, plan.target)
