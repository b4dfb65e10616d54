"""doctor findings that no shipped scenario exercises, on venvs built by the real builder."""

from __future__ import annotations

import sys
from pathlib import Path

from clihelp import as_json, cudafix

from cudafix.scenarios import build_spec
from cudafix.scenarios.spec import Scenario

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
