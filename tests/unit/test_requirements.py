"""check_requirements reports what ``pip check`` reports (pure; no environment needed)."""

from __future__ import annotations

from cudafix.env.inventory import Distribution
from cudafix.model.names import DistName
from cudafix.model.plan import RequirementBreak
from cudafix.plan.requirements import (
    check_requirements,
    parse_requirement,
    requested_extras,
    requirement_closure,
)
from tests.support.facts import bare

LINUX_311 = {
    "python_version": "3.11",
    "python_full_version": "3.11.7",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "implementation_name": "cpython",
}


def _check(*dists: Distribution) -> tuple[RequirementBreak, ...]:
    return check_requirements({d.name: d for d in dists}, LINUX_311)


def test_satisfied_set_is_clean() -> None:
    assert _check(bare("torch", "2.5.0", "nvidia-cudnn-cu12==9.1.0.70"),
                  bare("nvidia_cudnn_cu12", "9.1.0.70")) == ()  # fmt: skip


def test_missing_dependency() -> None:
    (problem,) = _check(bare("torch", "2.5.0", "Nvidia.CUDNN_cu12==9.1.0.70"))
    assert problem == RequirementBreak(
        distribution=DistName("torch"),
        requirement="Nvidia.CUDNN_cu12==9.1.0.70",
        reason="nvidia-cudnn-cu12 is not installed",
    )


def test_wrong_version() -> None:
    (problem,) = _check(bare("app", "1", "dep>=2,<3"), bare("dep", "3.0"))
    assert problem.distribution == "app"
    assert problem.reason == "dep 3.0 is installed, <3,>=2 is required"


def test_installed_prerelease_satisfies() -> None:
    assert _check(bare("app", "1", "dep>=2"), bare("dep", "2.1rc1")) == ()


def test_extras_only_requirements_are_ignored() -> None:
    assert _check(bare("app", "1", "absent; extra == 'cuda'")) == ()


def test_false_markers_are_ignored_true_ones_are_not() -> None:
    app = bare("app", "1", "winonly; sys_platform == 'win32'", "old; python_version < '3.8'")
    assert _check(app) == ()
    needed = bare("app", "1", "linuxonly; sys_platform == 'linux' and python_version >= '3.10'")
    assert [p.reason for p in _check(needed)] == ["linuxonly is not installed"]


def test_unparsable_requirement_is_reported_not_raised() -> None:
    (problem,) = _check(bare("app", "1", "not a requirement !!"))
    assert problem.reason.startswith("unparsable requirement")


def test_unparsable_installed_version() -> None:
    (problem,) = _check(bare("app", "1", "dep>=1"), bare("dep", "banana"))
    assert problem.reason == "dep banana is not a valid version"


# ---- requested extras: pip and uv record none, so the installed set is the evidence ----

PLUGIN_REQS = (
    'nvidia-cudnn-cu12<10,>=9.8; sys_platform == "linux" and extra == "with-cuda"',
    'nvidia-cufft-cu12>=11; sys_platform == "linux" and extra == "with-cuda"',
    'libtpu==0.0.42; extra == "tpu"',
)


def test_an_extra_whose_requirements_are_all_met_is_requested_and_judged() -> None:
    dists = [
        bare("jax-cuda12-plugin", "0.10.2", *PLUGIN_REQS),
        bare("nvidia-cudnn-cu12", "9.28.0.42"),
        bare("nvidia-cufft-cu12", "11.4.1.4"),
    ]
    by_name = {d.name: d for d in dists}
    assert requested_extras(by_name, LINUX_311) == {"jax-cuda12-plugin": frozenset({"with-cuda"})}
    extras = requested_extras(by_name, LINUX_311)
    after = {n: d for n, d in by_name.items() if n != "nvidia-cudnn-cu12"}
    (problem,) = check_requirements(after, LINUX_311, extras)
    assert (problem.requested_as, problem.reason) == (
        "jax-cuda12-plugin[with-cuda]",
        "nvidia-cudnn-cu12 is not installed",
    )
    # judged on its own, the broken set no longer shows the extra as requested
    assert check_requirements(after, LINUX_311) == ()


def test_an_extra_with_a_wrong_version_is_not_requested() -> None:
    """``jax[ci]`` pins ``jaxlib==0.10.1``: a 0.10.2 jaxlib does not make it requested."""
    dists = {d.name: d for d in [bare("jax", "0.10.2", 'jaxlib==0.10.1; extra == "ci"'),
                                 bare("jaxlib", "0.10.2")]}  # fmt: skip
    assert requested_extras(dists, LINUX_311) == {}
    assert check_requirements(dists, LINUX_311) == ()


def test_a_requested_requirement_requests_the_extras_it_names() -> None:
    """``jax[cuda12]`` asks for ``jax-cuda12-plugin[with-cuda]``: that extra is requested even
    when one of its wheels is gone, so the loss is reported against it."""
    dists = {
        d.name: d
        for d in [
            bare("jax", "0.10.2", 'jax-cuda12-plugin[with-cuda]==0.10.2; extra == "cuda12"'),
            bare("jax-cuda12-plugin", "0.10.2", *PLUGIN_REQS),
            bare("nvidia-cufft-cu12", "11.4.1.4"),
        ]
    }
    assert requested_extras(dists, LINUX_311) == {
        "jax": frozenset({"cuda12"}),
        "jax-cuda12-plugin": frozenset({"with-cuda"}),
    }
    (problem,) = check_requirements(dists, LINUX_311)
    assert (problem.distribution, problem.extra) == ("jax-cuda12-plugin", "with-cuda")


def test_the_closure_follows_requested_extras_only() -> None:
    """What ``jax[cuda12]`` was installed to load: the plugin and the wheels of its requested
    ``[with-cuda]``, not ``jaxlib`` behind the unrequested ``[ci]`` (its pin is not met)."""
    dists = {
        d.name: d
        for d in [
            bare(
                "jax",
                "0.10.2",
                'jax-cuda12-plugin[with-cuda]==0.10.2; extra == "cuda12"',
                'jaxlib==0.10.1; extra == "ci"',
            ),
            bare("jax-cuda12-plugin", "0.10.2", *PLUGIN_REQS),
            bare("nvidia-cudnn-cu12", "9.28.0.42"),
            bare("nvidia-cufft-cu12", "11.4.1.4"),
            bare("jaxlib", "0.10.2"),
        ]
    }
    extras = requested_extras(dists, LINUX_311)
    assert requirement_closure(dists, ["jax"], LINUX_311, extras) == {
        "jax",
        "jax-cuda12-plugin",
        "nvidia-cudnn-cu12",
        "nvidia-cufft-cu12",
    }
    assert requirement_closure(dists, ["jax"], LINUX_311, {}) == {"jax"}


def test_an_extra_naming_its_own_unmet_extras_is_not_requested() -> None:
    """``etils[all]`` asks for ``etils[eapp]``; a bare etils does not meet that, so neither
    extra is requested and ``simple-parsing`` is no missing requirement (a real GPU venv
    reported 33 such false errors: etils, xarray, safetensors, tokenizers, transformers, jax)."""
    dists = (
        bare("etils", "1.13.0", 'etils[eapp]; extra == "all"', 'etils[epy]; extra == "all"',
              'absl-py; extra == "eapp"', 'simple-parsing; extra == "eapp"',
              'typing-extensions; extra == "epy"'),
        bare("absl-py", "2.3.1"),
        bare("typing-extensions", "4.15.0"),
    )  # fmt: skip
    by_name = {d.name: d for d in dists}
    assert requested_extras(by_name, LINUX_311) == {"etils": frozenset({"epy"})}
    assert _check(*dists) == ()


def test_an_extra_whose_wheels_some_base_requirement_pulls_in_is_not_requested() -> None:
    """``numpyro[tpu]`` is ``jax[tpu]``: jax is there for numpyro itself, so jax being
    installed says nothing of the extra, and libtpu is not missing."""
    dists = (
        bare("numpyro", "0.21.0", "jax>=0.4", 'jax[tpu]; extra == "tpu"'),
        bare("jax", "0.11.2", "jaxlib==0.11.2", 'libtpu==0.0.48.*; extra == "tpu"'),
        bare("jaxlib", "0.11.2"),
    )
    assert requested_extras({d.name: d for d in dists}, LINUX_311) == {}
    assert _check(*dists) == ()


def test_a_fully_met_sibling_extra_explains_the_plugin() -> None:
    """``jax[cuda13-local]`` (the plugin alone) is fully met; ``jax[cuda13]`` also names the
    plugin's ``with-cuda`` wheels, some absent: the plugin is explained, so the GPU build
    using the host's CUDA is no broken requirement."""
    dists = (
        bare("jax", "0.11.2", 'jax-cuda13-plugin[with-cuda]==0.11.2; extra == "cuda13"',
              'jax-cuda13-plugin==0.11.2; extra == "cuda13-local"'),
        bare("jax-cuda13-plugin", "0.11.2", 'nvidia-cuda-nvcc>=13.0; extra == "with-cuda"',
              'nvidia-cufft>=12.0; extra == "with-cuda"'),
        bare("nvidia-cufft", "12.0.0.61"),
    )  # fmt: skip
    assert requested_extras({d.name: d for d in dists}, LINUX_311) == {
        "jax": frozenset({"cuda13-local"})
    }
    assert _check(*dists) == ()


def test_each_requirement_string_is_parsed_once() -> None:
    """Requested-extras inference asks about the same Requires-Dist strings tens of
    thousands of times on a torch venv: each must be parsed once, not per question."""
    raw = 'nvidia-once-cu12>=1; extra == "gpu" and python_version >= "3"'
    assert parse_requirement(raw) is parse_requirement(raw)
