"""Requires-Dist judged over hand-made sets: specifiers, markers, extras, and the install
spec a missing requirement asks for (pure; no environment)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from packaging.requirements import Requirement

from cudafix.model.names import DistName, normalize_name
from cudafix.model.plan import RequirementBreak
from cudafix.plan.requirements import (
    MissingRequirement,
    check_requirements,
    missing_requirements,
    requirement_closure,
    unmet,
)

LINUX = {
    "python_version": "3.11",
    "python_full_version": "3.11.7",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
}


@dataclass(frozen=True)
class Decl:
    """A distribution as far as requirements go (the ``Declared`` protocol)."""

    name: DistName
    version: str
    requires: tuple[str, ...] = ()


def _set(*dists: tuple[str, str, tuple[str, ...]]) -> dict[DistName, Decl]:
    return {normalize_name(n): Decl(normalize_name(n), v, r) for n, v, r in dists}


@pytest.mark.parametrize(
    ("installed", "spec", "reason"),
    [
        ("2.5.1", "", None),
        ("2.5.1", ">=2", None),
        ("2.5.1", "==2.5.1", None),
        ("2.5.1", "==2.5.*", None),
        ("2.5.1", "~=2.5", None),
        ("2.5.1", "~=2.4.0", "dep 2.5.1 is installed, ~=2.4.0 is required"),
        ("2.5.1", "!=2.5.1", "dep 2.5.1 is installed, !=2.5.1 is required"),
        ("2.5.1", "<2.5", "dep 2.5.1 is installed, <2.5 is required"),
        ("2.5.1", ">=2,<3", None),
        ("3.0", ">=2,<3", "dep 3.0 is installed, <3,>=2 is required"),
        ("2.6.0rc1", ">=2.5", None),  # an installed prerelease satisfies
        ("2.5.1+cu121", "==2.5.1", None),  # a local label matches the public version
        ("2.5.1", "===2.5.1", None),
        ("9.10.2.21", "==9.10.2.21", None),
        ("not a version", ">=1", "dep not a version is not a valid version"),
        ("not a version", "", None),  # no specifier: any version does
    ],
)
def test_unmet_by_version(installed: str, spec: str, reason: str | None) -> None:
    assert unmet(Requirement(f"dep{spec}"), _set(("dep", installed, ()))) == reason


@pytest.mark.parametrize("raw", ["Dep>=1", "dep_x>=1", "DEP.X"])
def test_unmet_names_the_normalised_missing_distribution(raw: str) -> None:
    assert (
        unmet(Requirement(raw), {}) == f"{normalize_name(Requirement(raw).name)} is not installed"
    )


@pytest.mark.parametrize(
    ("raw", "applies"),
    [
        ("dep; sys_platform == 'linux'", True),
        ("dep; sys_platform == 'win32'", False),
        ("dep; python_version >= '3.10'", True),
        ("dep; python_version < '3.9'", False),
        ("dep; platform_machine == 'aarch64'", False),
        ("dep; platform_machine == 'x86_64' and os_name == 'posix'", True),
        ("dep; os_name == 'nt' or sys_platform == 'linux'", True),
        ("dep; implementation_name == 'pypy'", False),
        ("dep; extra == 'gpu'", False),
        ("dep; python_full_version == '3.11.7'", True),
    ],
)
def test_markers_decide_whether_a_missing_dep_is_a_problem(raw: str, applies: bool) -> None:
    problems = check_requirements(_set(("app", "1", (raw,))), LINUX)
    assert [p.requirement for p in problems] == ([raw] if applies else [])
    assert [m.requirement for m in missing_requirements(_set(("app", "1", (raw,))), LINUX)] == (
        [raw] if applies else []
    )


@pytest.mark.parametrize(
    ("raw", "reason_start"),
    [
        ("dep >=", "unparsable requirement"),
        ("-dep", "unparsable requirement"),
        ("dep; bogus_marker == '1'", "unparsable requirement"),
    ],
)
def test_an_unreadable_requirement_is_a_problem_not_an_exception(
    raw: str, reason_start: str
) -> None:
    (problem,) = check_requirements(_set(("app", "1", (raw,))), LINUX)
    assert problem.requirement == raw
    assert problem.reason.startswith(reason_start)
    assert missing_requirements(_set(("app", "1", (raw,))), LINUX) == ()


@pytest.mark.parametrize(
    ("raw", "name", "spec"),
    [
        ("nvidia-cudnn-cu13==9.24.0.43", "nvidia-cudnn-cu13", "nvidia-cudnn-cu13==9.24.0.43"),
        ("Nvidia_CUDNN_cu13 (==9.1)", "nvidia-cudnn-cu13", "nvidia-cudnn-cu13==9.1"),
        ("dep[b,a]>=1; sys_platform == 'linux'", "dep", "dep[a,b]>=1"),
        ("dep", "dep", "dep"),
        ("dep>=1,<2", "dep", "dep<2,>=1"),
        (
            "dep @ https://host/dep-1.0-py3-none-any.whl",
            "dep",
            "dep @ https://host/dep-1.0-py3-none-any.whl",
        ),
    ],
)
def test_a_missing_requirement_names_what_to_install(raw: str, name: str, spec: str) -> None:
    assert missing_requirements(_set(("app", "1", (raw,))), LINUX) == (
        MissingRequirement(DistName("app"), raw, DistName(name), spec),
    )


def test_a_present_dep_at_the_wrong_version_is_not_missing() -> None:
    dists = _set(("app", "1", ("dep==2",)), ("dep", "1", ()))
    assert missing_requirements(dists, LINUX) == ()
    (problem,) = check_requirements(dists, LINUX)
    assert problem.reason == "dep 1 is installed, ==2 is required"


def test_problems_are_listed_by_distribution_then_requirement_order() -> None:
    dists = _set(("zeta", "1", ("b", "a")), ("alpha", "1", ("c",)))
    assert [(p.distribution, p.requirement) for p in check_requirements(dists, LINUX)] == [
        ("alpha", "c"),
        ("zeta", "b"),
        ("zeta", "a"),
    ]


@pytest.mark.parametrize(
    ("extra", "shown"), [("", "jax-cuda12-plugin"), ("with-cuda", "jax-cuda12-plugin[with-cuda]")]
)
def test_requested_as_names_the_extra(extra: str, shown: str) -> None:
    problem = RequirementBreak(
        distribution=DistName("jax-cuda12-plugin"), requirement="x", reason="r", extra=extra
    )
    assert problem.requested_as == shown


def test_an_explicitly_requested_extra_is_judged() -> None:
    dists = _set(("kit", "1", ("helper; extra == 'app'",)))
    assert check_requirements(dists, LINUX, {}) == ()
    (problem,) = check_requirements(dists, LINUX, {DistName("kit"): frozenset({"app"})})
    assert (problem.extra, problem.reason) == ("app", "helper is not installed")


@pytest.mark.parametrize(
    ("roots", "closure"),
    [
        (["app"], {"app", "lib", "base"}),
        (["lib"], {"lib", "base", "app"}),  # through the cycle back to app
        (["base"], {"base"}),
        (["absent"], set()),
        (["app", "other"], {"app", "lib", "base", "other"}),
    ],
)
def test_closure_follows_base_requirements_transitively(
    roots: list[str], closure: set[str]
) -> None:
    dists = _set(
        ("app", "1", ("lib", "win-only; sys_platform == 'win32'", "gone")),
        ("lib", "1", ("base>=1", "app")),  # a cycle ends
        ("base", "1", ()),
        ("other", "1", ("lib; extra == 'x'",)),
        ("win-only", "1", ()),
    )
    got = requirement_closure(dists, [DistName(r) for r in roots], LINUX, {})
    assert got == closure
