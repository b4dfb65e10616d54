"""CUDA majors from what a distribution is: its paths, the toolkit sonames it provides, its
``-cuNN`` suffix and, for a component versioned like CUDA, its version; never the name alone.

CUDA 13 wheels are mostly unsuffixed (``nvidia-cublas`` 13.x) and share ``nvidia/cu13/lib``;
a mixed-CUDA finding that read suffixes alone counted a handful where there were many.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cudafix.model.doctor import MixedMajors
from cudafix.plan.doctor import diagnose
from cudafix.plan.facts import Facts
from tests.support.cli import as_json, cudafix
from tests.support.facts import Dist, Lib, facts
from tests.support.venvs import install, new_venv
from tests.support.wheels import make_wheel

CU13_CUBLAS = Dist("nvidia-cublas", "13.0.0.19", {"nvidia/cu13/lib/libcublas.so.13": "b13"})
CU13_RUNTIME = Dist("nvidia-cuda-runtime", "13.0.96", {"nvidia/cuda_runtime/lib/rt": "r13"})
CUDART = Dist("vendored", "1.0", {"vendored/lib/libcudart.so.13": "v13"})
CUDNN = Dist("nvidia-cudnn", "9.13.0", {"nvidia/cudnn/lib/libcudnn.so.9": "d9"})
NCCL = Dist("nvidia-nccl", "2.27.3", {"nvidia/nccl/lib/libnccl.so.2": "n2"})
CU12_CUDNN = Dist("nvidia-cudnn-cu12", "9.1.0.70", {"nvidia/cudnn/lib/libcudnn.so.9": "d12"})
CUFFT = Dist("nvidia-cufft", "12.0.0.15", {"nvidia/cufft/lib/libcufft.so.12": "f"})


def _facts() -> Facts:
    libs = {
        "vendored/lib/libcudart.so.13": Lib("libcudart.so.13"),
        "nvidia/cudnn/lib/libcudnn.so.9": Lib("libcudnn.so.9"),
        "nvidia/nccl/lib/libnccl.so.2": Lib("libnccl.so.2"),
    }
    dists = [CU13_CUBLAS, CU13_RUNTIME, CUDART, CUDNN, NCCL, CU12_CUDNN, CUFFT]
    return facts(dists, libs, disk={"nvidia/cudnn/lib/libcudnn.so.9": "d9"})


def test_majors_come_from_paths_sonames_suffix_and_version() -> None:
    f = _facts()
    assert dict(f.cuda_majors) == {
        "nvidia-cublas": 13,  # nvidia/cu13/lib
        "nvidia-cuda-runtime": 13,  # a component versioned like CUDA
        "vendored": 13,  # provides libcudart.so.13
        "nvidia-cudnn-cu12": 12,  # the suffix
    }  # cudnn's .so.9, nccl's .so.2 and cufft's 12.x version say nothing about CUDA


def test_the_mixed_cuda_finding_counts_unsuffixed_cuda_13_wheels() -> None:
    report = diagnose(_facts())
    [mixed] = [f for f in report.findings if f.kind == "mixed-cuda"]
    assert isinstance(mixed.facts, MixedMajors)
    assert mixed.facts.majors == {
        12: ["nvidia-cudnn-cu12"],
        13: ["nvidia-cublas", "nvidia-cuda-runtime", "vendored"],
    }


@pytest.mark.slow
def test_doctor_sees_an_unsuffixed_cuda_13_wheel_next_to_a_cu12_one(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "nvidia-cublas", "13.0.0.19", {"nvidia/cu13/lib/libcublas.so.13": b"x"})
    make_wheel(wheels, "nvidia-nvtx-cu12", "12.4.127", {"nvidia/nvtx/lib/libnvToolsExt.so.1": b"y"})
    venv = new_venv(tmp_path / "venv")
    install(venv, wheels, "nvidia-cublas", "nvidia-nvtx-cu12")
    report = as_json(cudafix("doctor", "--json", "--venv", venv))
    [mixed] = [f for f in report["findings"] if f["kind"] == "mixed-cuda"]
    assert mixed["details"] == ["cu12: nvidia-nvtx-cu12", "cu13: nvidia-cublas"]
    assert mixed["owners"] == ["nvidia-cublas", "nvidia-nvtx-cu12"]
