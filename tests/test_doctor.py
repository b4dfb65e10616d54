"""doctor findings that no shipped scenario exercises, on venvs built by the real builder."""

from __future__ import annotations

import sys
from pathlib import Path

from clihelp import as_json, cudafix

from scenarios import build_spec
from scenarios.spec import Scenario

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# A cu13 extension that links libcudart.so.13 directly and, through a leftover cu12 cublas,
# libcudart.so.12 as well: no single object needs both, the process maps both.
MIXED = """
name = "mixed-majors"
description = "one load tree maps libcudart.so.12 and libcudart.so.13"

[[dist]]
name = "nvidia-cuda-runtime-cu12"
version = "12.8.90"
lib = [{ path = "nvidia/cuda_runtime/lib/libcudart.so.12" }]

[[dist]]
name = "nvidia-cublas-cu12"
version = "12.8.4.1"
[[dist.lib]]
path = "nvidia/cublas/lib/libcublas.so.12"
needed = ["libcudart.so.12"]
rpath = ["$ORIGIN/../../cuda_runtime/lib"]

[[dist]]
name = "nvidia-cuda-runtime"
version = "13.0.96"
lib = [{ path = "nvidia/cu13/lib/libcudart.so.13" }]

[[dist]]
name = "kernels"
version = "1.0"
files = { "kernels/__init__.py" = "from kernels import _ops\\n" }
[[dist.ext]]
path = "kernels/_ops"
needed = ["libcudart.so.13", "libcublas.so.12"]
rpath = ["$ORIGIN/../nvidia/cu13/lib", "$ORIGIN/../nvidia/cublas/lib"]

[[steps]]
action = "install"
packages = ["nvidia-cuda-runtime-cu12==12.8.90", "nvidia-cublas-cu12==12.8.4.1",
            "nvidia-cuda-runtime==13.0.96", "kernels==1.0"]
"""


def test_two_majors_in_one_load_tree_are_reported(tmp_path: Path) -> None:
    built = build_spec(Scenario.model_validate(tomllib.loads(MIXED)), tmp_path / "venv")
    proc = cudafix("doctor", "--json", "--venv", built.venv)
    assert proc.returncode == 1
    mixed = [f for f in as_json(proc)["findings"] if f["kind"] == "mixed-cuda"]
    assert len(mixed) == 1, mixed
    assert "libcudart.so.12 and libcudart.so.13" in mixed[0]["message"]
    assert "kernels/_ops" in mixed[0]["message"]
    assert any(
        "nvidia/cublas/lib/libcublas.so.12 needs libcudart.so.12" in d for d in mixed[0]["details"]
    )


# What a healthy CUDA venv on a CPU box looks like: an extension whose tree needs the driver's
# libcuda.so.1, and an on-demand plugin needing an optional stack nobody installed.
CPU_BOX = """
name = "cpu-box"
description = "needs only a driver and optional stacks are missing"

[[dist]]
name = "gpukit"
version = "1.0"
files = { "gpukit/__init__.py" = "" }
[[dist.lib]]
path = "gpukit/lib/libkernels.so"
needed = ["libcuda.so.1"]
[[dist.lib]]
path = "gpukit/lib/plugins/libtransport_ucx.so"
needed = ["libucp.so.0", "libcudafix_nowhere.so.7"]
[[dist.ext]]
path = "gpukit/_core"
needed = ["libkernels.so"]
rpath = ["$ORIGIN/lib"]

# Built (the builder links needs against real objects) but never installed.
[[dist]]
name = "not-installed"
version = "0"
lib = [
    { path = "elsewhere/libcuda.so.1" },
    { path = "elsewhere/libucp.so.0" },
    { path = "elsewhere/libcudafix_nowhere.so.7" },
]

[[steps]]
action = "install"
packages = ["gpukit==1.0"]
"""


def test_driver_and_on_demand_gaps_are_information_not_problems(tmp_path: Path) -> None:
    built = build_spec(Scenario.model_validate(tomllib.loads(CPU_BOX)), tmp_path / "venv")
    proc = cudafix("doctor", "--json", "--venv", built.venv)
    unresolved = {
        f["message"].split(" needs ")[1].split(",")[0]: f
        for f in as_json(proc)["findings"]
        if f["kind"] == "unresolved"
    }
    assert set(unresolved) == {"libcuda.so.1", "libucp.so.0", "libcudafix_nowhere.so.7"}
    assert all(f["severity"] == "info" for f in unresolved.values()), unresolved
    assert "the NVIDIA driver" in unresolved["libcuda.so.1"]["message"]
    assert "no extension module loads it" in unresolved["libcudafix_nowhere.so.7"]["message"]
    assert proc.returncode == 0, proc.stdout


def test_an_import_that_would_fail_is_an_error(tmp_path: Path) -> None:
    spec = CPU_BOX.replace('needed = ["libcuda.so.1"]', 'needed = ["libcudafix_nowhere.so.7"]')
    built = build_spec(Scenario.model_validate(tomllib.loads(spec)), tmp_path / "venv")
    proc = cudafix("doctor", "--json", "--venv", built.venv)
    errors = [f for f in as_json(proc)["findings"] if f["severity"] == "error"]
    assert [f["kind"] for f in errors] == ["unresolved"]
    assert "gpukit/lib/libkernels.so" in errors[0]["message"]
    assert proc.returncode == 1
