"""With the run-time table emptied, soname literals alone protect the JAX and CuPy stacks.

``CUDAFIX_RUNTIME_TABLE`` names an empty file, so no row of ``cudafix/data/runtime.toml``
applies: what the ``runtime`` and ``runtime13`` scenarios' objects spell in ``.rodata``
(JAX's ``_versions.so``) and their Python loaders spell (cupy's ``__init__.py``, the PJRT
plugin's ``_load_nvidia_libraries``) must still refuse every removal that breaks the GPU
backend, diagnose every plain uninstall, and repair it. The oracle is the real loader.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import ScenarioFactory

from scenarios import BuiltScenario
from tests.support.cli import as_json, cudafix, repair_offline, uv_uninstall

pytestmark = pytest.mark.slow
"""Builds real venvs and runs the CLI on them: left out of ``make test-fast``."""

PLUGIN12 = "jax_cuda12_plugin/_versions.so"
PLUGIN13 = "jax_cuda13_plugin/_versions.so"
PJRT13 = "jax_plugins/xla_cuda13/__init__.py"
CURAND_EXT = "cupy_backends/cuda/libs/curand"
JITIFY_EXT = "cupy/cuda/jitify"


@pytest.fixture
def no_table(tmp_path: Path) -> dict[str, str]:
    empty = tmp_path / "empty-runtime.toml"
    empty.write_text("")
    return {"CUDAFIX_RUNTIME_TABLE": str(empty)}


def _lost(built: BuiltScenario, name: str, env: dict[str, str]) -> list[tuple[str, str, str]]:
    """(consumer, need's file name, what requests it) of each run-time load the removal of
    ``name`` loses; the removal must be refused."""
    proc = cudafix(
        "remove", name, "--venv", built.venv, "--dry-run", "--no-fetch", "--json", env=env
    )
    assert proc.returncode == 3, proc.stdout + proc.stderr
    return sorted(
        (x["consumer"].split("site-packages/")[1], x["need"].rsplit("/", 1)[-1], x["run_time_load"])
        for x in as_json(proc)["lost"]
        if x["run_time_load"]
    )


def _doctor(built: BuiltScenario, env: dict[str, str]) -> tuple[int, Any]:
    proc = cudafix("doctor", "--venv", built.venv, "--json", env=env)
    return proc.returncode, as_json(proc)


def _errors(report: Any) -> dict[str, str]:
    """need's file name -> consumer, of each unresolved error."""
    return {
        f["need"].rsplit("/", 1)[-1]: f["consumer"].split("site-packages/")[-1]
        for f in report["findings"]
        if f["kind"] == "unresolved" and f["severity"] == "error"
    }


def _python(built: BuiltScenario, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(built.python), "-c", code], capture_output=True, text=True, check=False
    )


def _plugin_dlopen(built: BuiltScenario, plugin: str, soname: str) -> bool:
    """dlopen ``soname`` from inside the plugin object (ld.so searches its own paths)."""
    site = next(built.venv.glob("lib/python*/site-packages"))
    code = (
        f"import ctypes, sys; lib = ctypes.CDLL({str(site / plugin)!r}); "
        f"sys.exit(0 if lib.cudafix_dlopen({soname.encode()!r}) == 1 else 1)"
    )
    return _python(built, code).returncode == 0


def test_jax_and_cupy_removals_are_refused_from_literals_alone(
    scenario: ScenarioFactory, no_table: dict[str, str]
) -> None:
    built = scenario("runtime")
    code, report = _doctor(built, no_table)
    # no row says cupy's cuTENSOR part (and numba's TBB layer) are optional: the graph does,
    # since no other distribution here meets any of their needs; every library the GPU
    # backends load is found
    assert (code, _errors(report)) == (0, {})
    info = {f["need"] for f in report["findings"] if f["severity"] == "info"}
    assert {"libcutensor.so.2", "libtbb.so.12"} <= info
    with_cuda = "jax-cuda12-plugin[with-cuda]"
    for name, soname in [
        ("nvidia-cudnn-cu12", "libcudnn.so.9"),
        ("nvidia-cuda-runtime-cu12", "libcudart.so.12"),
        ("nvidia-cufft-cu12", "libcufft.so.11"),
        ("nvidia-cuda-cupti-cu12", "libcupti.so.12"),
        ("nvidia-cublas-cu12", "libcublas.so.12"),
        ("nvidia-cusparse-cu12", "libcusparse.so.12"),
    ]:
        assert _lost(built, name, no_table) == [(PLUGIN12, soname, with_cuda)]
    (curand,) = _lost(built, "nvidia-curand-cu12", no_table)
    assert curand[0].startswith(CURAND_EXT) and curand[1:] == (
        "libcurand.so.10",
        "cuda-toolkit[curand]",
    )
    (nvrtc,) = _lost(built, "nvidia-cuda-nvrtc-cu12", no_table)
    assert nvrtc[0].startswith(JITIFY_EXT) and nvrtc[1:] == (
        "libnvrtc.so.12",
        "cuda-toolkit[nvrtc]",
    )


def test_plain_breaks_of_jax_and_cupy_are_diagnosed_and_repaired_from_literals_alone(
    scenario: ScenarioFactory, no_table: dict[str, str]
) -> None:
    built = scenario("runtime", "broken")  # nvidia-cudnn-cu12 uninstalled by plain uv
    uv_uninstall(built.python, "nvidia-curand-cu12")
    assert not _plugin_dlopen(built, PLUGIN12, "libcudnn.so.9")
    assert _python(built, "import cupy").returncode != 0
    code, report = _doctor(built, no_table)
    assert code == 1
    errors = _errors(report)
    assert errors["libcudnn.so.9"] == PLUGIN12
    assert errors["libcurand.so.10"].startswith(CURAND_EXT)
    evidence = {
        f["need"]: d for f in report["findings"] for d in f["details"] if d.startswith("evidence:")
    }
    assert '"libcudnn.so.9" in the read-only data' in evidence["libcudnn.so.9"]
    assert '"libcurand.so.10" in lib/' in evidence["libcurand.so.10"]
    assert sorted(report["install"]) == [
        "nvidia-cudnn-cu12<10.0,>=9.1",
        "nvidia-curand-cu12==10.3.5.147",
    ]
    done = repair_offline(built, env=no_table)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _plugin_dlopen(built, PLUGIN12, "libcudnn.so.9")
    assert _python(built, "import cupy").returncode == 0
    assert _doctor(built, no_table)[0] == 0


def test_cuda13_removals_are_refused_naming_the_object_or_the_python_loader(
    scenario: ScenarioFactory, no_table: dict[str, str]
) -> None:
    built = scenario("runtime13")
    assert _doctor(built, no_table)[0] == 0
    with_cuda = "jax-cuda13-plugin[with-cuda]"
    assert _lost(built, "nvidia-cudnn-cu13", no_table) == [
        (PLUGIN13, "libcudnn.so.9", with_cuda),
        (PJRT13, "libcudnn.so.9", with_cuda),
    ]
    # the PJRT plugin's own search path does not name nvidia/nvshmem/lib: by path, from Python
    assert _lost(built, "nvidia-nvshmem-cu13", no_table) == [
        (PJRT13, "libnvshmem_host.so.3", with_cuda)
    ]
    assert _lost(built, "nvidia-nccl-cu13", no_table) == [(PJRT13, "libnccl.so.2", with_cuda)]
    (curand,) = _lost(built, "nvidia-curand", no_table)
    assert curand[0].startswith(CURAND_EXT) and curand[2] == "cuda-toolkit[curand]"
    (nvrtc,) = _lost(built, "nvidia-cuda-nvrtc", no_table)
    assert nvrtc[0].startswith(JITIFY_EXT) and nvrtc[2] == "cuda-toolkit[nvrtc]"


def test_cuda13_plain_breaks_are_diagnosed_and_repaired_from_literals_alone(
    scenario: ScenarioFactory, no_table: dict[str, str]
) -> None:
    built = scenario("runtime13", "broken")  # nvidia-cudnn-cu13 uninstalled by plain uv
    uv_uninstall(built.python, "nvidia-nvshmem-cu13")
    code, report = _doctor(built, no_table)
    assert code == 1
    errors = _errors(report)
    assert errors["libcudnn.so.9"] in (PLUGIN13, PJRT13)
    assert errors["libnvshmem_host.so.3"] == PJRT13
    assert sorted(report["install"]) == [
        "nvidia-cudnn-cu13<10.0,>=9.12.0.46",
        "nvidia-nvshmem-cu13>=3.3.20",
    ]
    done = repair_offline(built, env=no_table)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _plugin_dlopen(built, PLUGIN13, "libcudnn.so.9")
    assert _doctor(built, no_table)[0] == 0
