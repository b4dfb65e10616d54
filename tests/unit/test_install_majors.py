"""An install's CUDA major is read from what the wheel is, as an installed one's is.

``nvidia-cublas`` 13.x has no ``-cuNN`` suffix: only its paths (``nvidia/cu13/lib``) and
its version say CUDA 13. Installing it beside CUDA 12 wheels must warn of the mixed majors,
and the install that keeps a consumer on its CUDA 12 build must ask for the 12.x releases.
"""

from __future__ import annotations

from cudafix.fetch.staged import Staging
from cudafix.model.names import DistName
from cudafix.model.plan import Options, ProviderSwitch
from cudafix.model.reasons import MixedMajors
from cudafix.plan.install import installing_majors, matching_builds
from cudafix.plan.planner import Request, build_plan
from tests.support.facts import Dist, Lib, facts, wheel_of

CU12_CUBLAS = Dist("nvidia-cublas-cu12", "12.9.1.4", {"nvidia/cublas/lib/libcublas.so.12": "b12"})
CU13_CUBLAS = Dist("nvidia-cublas", "13.0.0.19", {"nvidia/cu13/lib/libcublas.so.13": "b13"})
PIN13 = (DistName("nvidia-cublas"), "13.0.0.19")


def _install_cu13():  # type: ignore[no-untyped-def]
    staged = Staging(fetched=True, wheels={PIN13: wheel_of(CU13_CUBLAS)}, source="find-links W")
    libs = {"nvidia/cublas/lib/libcublas.so.12": Lib("libcublas.so.12")}
    f = facts([CU12_CUBLAS], libs, staging=staged)
    return f, build_plan(f, Request((), (), Options(), installs=(PIN13,)))


def test_an_unsuffixed_wheels_major_comes_from_its_paths() -> None:
    _, plan = _install_cu13()
    assert installing_majors(plan) == {"nvidia-cublas": 13}


def test_installing_an_unsuffixed_cuda_13_wheel_beside_cuda_12_warns() -> None:
    _, plan = _install_cu13()
    mixed = [w for w in plan.warnings if isinstance(w, MixedMajors)]
    assert [(w.major, w.names, w.present) for w in mixed] == [(13, ["nvidia-cublas"], [12])]


def test_a_matching_build_of_a_component_versioned_like_cuda_is_its_majors_releases() -> None:
    """No suffix to rename: the spec asks for the releases of the major loaded today."""
    f, plan = _install_cu13()
    switch = ProviderSwitch(
        consumer="app/libapp.so",
        consumer_distribution="app",
        need="libcublasLt.so",
        before="nvidia/cublas/lib/libcublasLt.so",
        after="nvidia/cu13/lib/libcublasLt.so",
        before_owners=["nvidia-cublas-cu12"],
        after_owners=["nvidia-cublas"],
    )
    switched = plan.model_copy(update={"switches": [switch]})
    assert matching_builds(switched, ["nvidia-cublas"], f.cuda_majors) == [("nvidia-cublas==12.*",)]
