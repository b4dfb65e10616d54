"""Frameworks that load libraries by a name they build at run time, with no row naming them.

TensorFlow's shape: ``fw/libfw.so`` has ``$ORIGIN/../nvidia/rt/lib`` and
``$ORIGIN/../nvidia/old/lib`` on its RUNPATH, no DT_NEEDED into either, and no library name
in its data: it builds ``"lib" + "fwrt" + ".so." + "12"`` when it runs. Its extra ``gpu``
brings ``nvidia-rt-cu12`` (and ``nvidia-blas-cu12``); ``nvidia-old-cu12`` is a leftover
no requirement brings. The oracle is the object's own ``dlopen()`` of the built name (ld.so
searches its RUNPATH), in the venv's interpreter. ``pyfw`` is onnxruntime's shape: its
Python loads the wheel's file by a path whose version it formats
(``f"libfwrt.so.{MAJOR}"``); the oracle is ``import pyfw``. Run with the run-time table
emptied: no row describes either.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from scenarios import BuiltScenario
from tests.support.cli import as_json, cudafix, repair_offline, uv_uninstall
from tests.support.venvs import build_toml, site_dir

pytestmark = pytest.mark.slow
"""Builds real venvs and runs the CLI on them: left out of ``make test-fast``."""

FW = "fw/libfw.so"

BUILT_NAMES = """
name = "search-dirs"
description = "a framework that dlopen()s names it builds through its RUNPATH"

[[dist]]
name = "nvidia-rt-cu12"
version = "1.0"
lib = [{ path = "nvidia/rt/lib/libfwrt.so.12" }]

[[dist]]
name = "nvidia-rt-cu12"
version = "1.1"
lib = [{ path = "nvidia/rt/lib/libfwrt.so.12" }]

[[dist]]
name = "nvidia-blas-cu12"
version = "1.0"
lib = [{ path = "nvidia/blas/lib/libfwblas.so.12" }]

[[dist]]
name = "nvidia-old-cu12"
version = "1.0"
lib = [{ path = "nvidia/old/lib/libfwold.so.12" }]

[[dist]]
name = "fw"
version = "1.0"
requires = ['nvidia-rt-cu12>=1.0; extra == "gpu"', 'nvidia-blas-cu12>=1.0; extra == "gpu"']
lib = [{ path = "fw/libfw.so", loader = true, runpath = [
    "$ORIGIN/../nvidia/rt/lib", "$ORIGIN/../nvidia/blas/lib", "$ORIGIN/../nvidia/old/lib",
] }]

[[dist]]
name = "pyfw"
version = "1.0"
requires = ['nvidia-rt-cu12>=1.0; extra == "gpu"', 'nvidia-blas-cu12>=1.0; extra == "gpu"']
[dist.files]
"pyfw/__init__.py" = '''
import ctypes, os
MAJOR = "12"
_here = os.path.dirname(os.path.abspath(__file__))
ctypes.CDLL(os.path.join(_here, "..", "nvidia", "rt", "lib", f"libfwrt.so.{MAJOR}"))
'''

[[steps]]
action = "install"
packages = [
    "fw==1.0", "pyfw==1.0", "nvidia-rt-cu12==1.0", "nvidia-blas-cu12==1.0",
    "nvidia-old-cu12==1.0",
]
"""


@pytest.fixture
def no_table(tmp_path: Path) -> dict[str, str]:
    empty = tmp_path / "empty-runtime.toml"
    empty.write_text("")
    return {"CUDAFIX_RUNTIME_TABLE": str(empty)}


def _build(dest: Path) -> BuiltScenario:
    return build_toml(BUILT_NAMES, dest)


def _loads(built: BuiltScenario, *parts: str) -> bool:
    """The framework's own dlopen() of a name built from ``parts`` (none is in its data)."""
    site = site_dir(built.venv)
    code = (
        f"import ctypes, sys; fw = ctypes.CDLL({str(site / FW)!r}); "
        f"sys.exit(0 if fw.cudafix_dlopen(''.join({list(parts)!r}).encode()) == 1 else 1)"
    )
    proc = subprocess.run([str(built.python), "-c", code], capture_output=True, check=False)
    return proc.returncode == 0


def _remove(built: BuiltScenario, name: str, env: dict[str, str]) -> tuple[int, Any]:
    proc = cudafix(
        "remove", name, "--dry-run", "--json", "--no-fetch", "--venv", built.venv, env=env
    )
    return proc.returncode, as_json(proc)


def test_a_built_name_through_the_search_path_is_protected_diagnosed_and_repaired(
    tmp_path: Path, no_table: dict[str, str]
) -> None:
    built = _build(tmp_path / "venv")
    assert _loads(built, "lib", "fwrt", ".so.", "12")
    pristine = cudafix("doctor", "--json", "--venv", built.venv, env=no_table)
    assert pristine.returncode == 0, pristine.stdout

    code, plan = _remove(built, "nvidia-rt-cu12", no_table)
    assert (code, plan["verdict"]) == (3, "refused")
    lost = {(x["consumer"].split("site-packages/")[1], x["need"]): x for x in plan["lost"]}
    assert lost[(FW, "libfwrt.so.12")]["run_time_load"] == "fw[gpu]"
    # the leftover no requirement brings: on the search path, and still no load of fw's
    code, plan = _remove(built, "nvidia-old-cu12", no_table)
    assert (code, plan["verdict"]) == (0, "pass"), plan

    uv_uninstall(built.python, "nvidia-rt-cu12")
    assert not _loads(built, "lib", "fwrt", ".so.", "12")  # the break is real
    broken = cudafix("doctor", "--json", "--venv", built.venv, env=no_table)
    assert broken.returncode == 1, broken.stdout
    report = as_json(broken)
    errors = {(f["consumer"].split("site-packages/")[1], f["need"]) for f in report["findings"]
              if f["severity"] == "error"}  # fmt: skip
    assert (FW, "libfwrt.so.12") in errors
    # what went, at the version that went: not the newest release its range allows (1.1)
    assert list(report["install"]) == ["nvidia-rt-cu12==1.0"]

    done = repair_offline(built, env=no_table)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _loads(built, "lib", "fwrt", ".so.", "12")
    assert cudafix("doctor", "--venv", built.venv, env=no_table).returncode == 0
    site = site_dir(built.venv)
    assert (site / "nvidia_rt_cu12-1.0.dist-info").is_dir()


def _imports(built: BuiltScenario) -> bool:
    proc = subprocess.run(
        [str(built.python), "-c", "import pyfw"], capture_output=True, check=False
    )
    return proc.returncode == 0


def test_a_name_whose_version_python_formats_is_protected_diagnosed_and_repaired(
    tmp_path: Path, no_table: dict[str, str]
) -> None:
    built = _build(tmp_path / "venv")
    assert _imports(built)
    assert cudafix("doctor", "--venv", built.venv, env=no_table).returncode == 0

    code, plan = _remove(built, "nvidia-rt-cu12", no_table)
    assert (code, plan["verdict"]) == (3, "refused")
    consumers = {x["consumer"].split("site-packages/")[1] for x in plan["lost"]}
    assert "pyfw/__init__.py" in consumers

    uv_uninstall(built.python, "nvidia-rt-cu12")
    assert not _imports(built)  # the break is real
    broken = cudafix("doctor", "--json", "--venv", built.venv, env=no_table)
    assert broken.returncode == 1, broken.stdout
    report = as_json(broken)
    named = {
        (f["consumer"].split("site-packages/")[1], f["need"])
        for f in report["findings"]
        if f["severity"] == "error"
    }
    assert ("pyfw/__init__.py", "libfwrt.so.12") in named
    assert list(report["install"]) == ["nvidia-rt-cu12==1.0"]

    done = repair_offline(built, env=no_table)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _imports(built)


ONE_BUILD = """
name = "one-build"
description = "torch's shape: every object of torch/lib carries the build's one RPATH"

[[dist]]
name = "nvidia-rt-cu12"
version = "1.0"
lib = [{ path = "nvidia/rt/lib/libfwrt.so.12" }, { path = "nvidia/rt/lib/libfwrt_part.so.12" }]

[[dist]]
name = "tw"
version = "1.0"
requires = ["nvidia-rt-cu12>=1.0"]
[[dist.lib]]
path = "tw/lib/libtw_cuda.so"
needed = ["libfwrt.so.12"]
rpath = ["$ORIGIN/../../nvidia/rt/lib"]

[[dist.lib]]
path = "tw/lib/libtw_util.so"
rpath = ["$ORIGIN/../../nvidia/rt/lib"]

[[steps]]
action = "install"
packages = ["tw==1.0", "nvidia-rt-cu12==1.0"]
"""


def test_objects_sharing_their_builds_search_path_load_only_what_they_link(
    tmp_path: Path, no_table: dict[str, str]
) -> None:
    """A dry run of the wheel's removal names the object that links it, not its siblings
    that only share the build's RPATH; the oracle: once the wheel is gone, the real loader
    still loads the sibling and fails the object that links it."""
    built = build_toml(ONE_BUILD, tmp_path / "one-build")
    code, plan = _remove(built, "nvidia-rt-cu12", no_table)
    assert code == 3
    lost = sorted((x["consumer"].rsplit("/", 1)[-1], x["need"]) for x in plan["lost"])
    assert lost == [("libtw_cuda.so", "libfwrt.so.12")]
    uv_uninstall(built.python, "nvidia-rt-cu12")
    site = site_dir(built.venv)
    for name, loads in (("libtw_util.so", True), ("libtw_cuda.so", False)):
        code = f"import ctypes; ctypes.CDLL({str(site / 'tw/lib' / name)!r})"
        proc = subprocess.run([str(built.python), "-c", code], capture_output=True, check=False)
        assert (proc.returncode == 0) == loads, (name, proc.stderr)
