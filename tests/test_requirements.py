"""check_requirements reports what ``pip check`` reports (pure; no environment needed)."""

from __future__ import annotations

from cudafix.env.inventory import Distribution
from cudafix.model.names import DistName, EnvPath, normalize_name
from cudafix.plan.requirements import RequirementProblem, check_requirements

LINUX_311 = {
    "python_version": "3.11",
    "python_full_version": "3.11.7",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "implementation_name": "cpython",
}


def _dist(name: str, version: str, *requires: str) -> Distribution:
    return Distribution(
        name=normalize_name(name),
        version=version,
        dist_info=EnvPath(f"site/{name}-{version}.dist-info"),
        site_packages=EnvPath("site"),
        installer="uv",
        requires=requires,
        files=(),
        top_level=(),
    )


def _check(*dists: Distribution) -> tuple[RequirementProblem, ...]:
    return check_requirements({d.name: d for d in dists}, LINUX_311)


def test_satisfied_set_is_clean() -> None:
    assert _check(_dist("torch", "2.5.0", "nvidia-cudnn-cu12==9.1.0.70"),
                  _dist("nvidia_cudnn_cu12", "9.1.0.70")) == ()  # fmt: skip


def test_missing_dependency() -> None:
    (problem,) = _check(_dist("torch", "2.5.0", "Nvidia.CUDNN_cu12==9.1.0.70"))
    assert problem == RequirementProblem(
        DistName("torch"), "Nvidia.CUDNN_cu12==9.1.0.70", "nvidia-cudnn-cu12 is not installed"
    )


def test_wrong_version() -> None:
    (problem,) = _check(_dist("app", "1", "dep>=2,<3"), _dist("dep", "3.0"))
    assert problem.distribution == "app"
    assert problem.reason == "dep 3.0 is installed, <3,>=2 is required"


def test_installed_prerelease_satisfies() -> None:
    assert _check(_dist("app", "1", "dep>=2"), _dist("dep", "2.1rc1")) == ()


def test_extras_only_requirements_are_ignored() -> None:
    assert _check(_dist("app", "1", "absent; extra == 'cuda'")) == ()


def test_false_markers_are_ignored_true_ones_are_not() -> None:
    app = _dist("app", "1", "winonly; sys_platform == 'win32'", "old; python_version < '3.8'")
    assert _check(app) == ()
    needed = _dist("app", "1", "linuxonly; sys_platform == 'linux' and python_version >= '3.10'")
    assert [p.reason for p in _check(needed)] == ["linuxonly is not installed"]


def test_unparsable_requirement_is_reported_not_raised() -> None:
    (problem,) = _check(_dist("app", "1", "not a requirement !!"))
    assert problem.reason.startswith("unparsable requirement")


def test_unparsable_installed_version() -> None:
    (problem,) = _check(_dist("app", "1", "dep>=1"), _dist("dep", "banana"))
    assert problem.reason == "dep banana is not a valid version"
