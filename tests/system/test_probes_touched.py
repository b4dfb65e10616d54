"""The automatic probes test what the plan touched, and nothing that cannot be loaded.

Real parts: wheels holding gcc-built objects, installed with uv, the plans applied through
the CLI, the probes run by the target interpreter through the real dynamic loader.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.cli import as_json, cudafix
from tests.support.venvs import install, new_venv, site_dir
from tests.support.wheels import make_wheel

pytestmark = pytest.mark.slow

CV_BASE = {"cvx/__init__.py": b"from cvx.core import *\n", "cvx/core.py": b"VERSION = 'base'\n"}
CV_CONTRIB = {
    "cvx/__init__.py": b"from cvx.core import *\n",
    "cvx/core.py": b"VERSION = 'contrib'\ndef imread():\n    return 1\n",
}


def _opencv_pair(tmp_path: Path) -> tuple[Path, Path]:
    """opencv-python's shape: two distributions ship the same package, the second wins."""
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "cvbase", "1.0", CV_BASE)
    make_wheel(wheels, "cvcontrib", "1.0", CV_CONTRIB)
    prefix = new_venv(tmp_path / "venv")
    install(prefix, wheels, "cvbase==1.0", deps=False)
    install(prefix, wheels, "cvcontrib==1.0", deps=False)
    return prefix, wheels


def _imread(prefix: Path) -> int:
    code = "import cvx; cvx.imread()"
    return subprocess.run([prefix / "bin" / "python", "-c", code], capture_output=True).returncode


def test_removing_one_of_two_owners_of_a_package_is_refused_and_the_ways_out_probe_it(
    tmp_path: Path,
) -> None:
    prefix, wheels = _opencv_pair(tmp_path)
    local = ["--offline", "--find-links", str(wheels)]
    plan = as_json(cudafix("remove", "cvbase", "--venv", prefix, "--dry-run", "--json", *local))
    assert plan["verdict"] == "refused"
    assert any(
        r["kind"] == "shared-deleted" and r["owners"] == ["cvcontrib"] for r in plan["reasons"]
    ), plan["reasons"]
    assert {"--repair", "--keep-shared"} <= {w for a in plan["alternatives"] for w in a["argv"]}
    for mode in ("--repair", "--keep-shared"):
        alt = as_json(
            cudafix("remove", "cvbase", "--venv", prefix, "--dry-run", "--json", mode, *local)
        )
        assert alt["verdict"] == "pass" and "cvx" in alt["probe_modules"], (mode, alt)
    said = cudafix("remove", "cvbase", "--venv", prefix, "--dry-run", "--keep-shared", *local)
    kept = as_json(
        cudafix(
            "remove", "cvbase", "--venv", prefix, "--dry-run", "--json", "--keep-shared", *local
        )
    )
    net = len(set(kept["deleted_paths"]) - set(kept["kept_paths"]))
    assert f"{net} paths deleted, {len(kept['kept_paths'])} kept" in said.stdout  # adds up
    done = cudafix("remove", "cvbase", "--venv", prefix, "--yes", "--keep-shared", *local)
    assert done.returncode == 0, done.stderr
    assert "import cvx" in done.stderr + done.stdout or "probes passed: 1" in done.stdout
    assert _imread(prefix) == 0


def _gcc(out: Path, source: str, *flags: str | Path) -> bytes:
    c = out.with_suffix(".c")
    c.write_text(source)
    subprocess.run(["gcc", "-o", out, c, *flags], check=True)
    return out.read_bytes()


def test_an_executable_that_needs_a_touched_library_is_never_dlopened(tmp_path: Path) -> None:
    """torch's ``bin/torch_shm_manager`` shape: a PIE executable beside the libraries it
    needs. glibc refuses to dlopen a PIE, so probing it would roll back every repair."""
    build = tmp_path / "build"
    build.mkdir()
    shared_a = _gcc(
        build / "liba", "int s(void){return 1;}\n", "-shared", "-fPIC", "-Wl,-soname,libshared.so"
    )
    shared_b = _gcc(
        build / "libb", "int s(void){return 2;}\n", "-shared", "-fPIC", "-Wl,-soname,libshared.so"
    )
    (build / "libshared.so").write_bytes(shared_a)
    user = _gcc(
        build / "libuser.so", "int s(void); int u(void){return s();}\n", "-shared", "-fPIC",
        "-Wl,--no-as-needed", "-L", build, "-lshared", "-Wl,-rpath,$ORIGIN",
    )  # fmt: skip
    tool = _gcc(
        build / "tshm", "int s(void); int main(void){return s() - 1;}\n", "-pie", "-fPIE",
        "-L", build, "-lshared", "-Wl,-rpath,$ORIGIN/../lib",
    )  # fmt: skip
    wheels = tmp_path / "wheels"
    lib = {"tx/lib/libshared.so": shared_a, "tx/lib/libuser.so": user, "tx/bin/tshm": tool}
    make_wheel(wheels, "tx", "1.0", {**lib, "tx/__init__.py": b""})
    make_wheel(wheels, "ty", "1.0", {"tx/lib/libshared.so": shared_b, "ty_mod.py": b""})
    prefix = new_venv(tmp_path / "venv")
    install(prefix, wheels, "tx==1.0", deps=False)
    install(prefix, wheels, "ty==1.0", deps=False)
    (site_dir(prefix) / "tx/bin/tshm").chmod(0o755)
    local = ["--offline", "--find-links", str(wheels)]
    plan = as_json(
        cudafix("remove", "ty", "--venv", prefix, "--repair", "--dry-run", "--json", *local)
    )
    assert plan["verdict"] == "pass", plan["reasons"]
    assert any(p.endswith("tx/lib/libuser.so") for p in plan["probe_libraries"])
    assert not any(p.endswith("tshm") for p in plan["probe_libraries"]), plan["probe_libraries"]
    done = cudafix("remove", "ty", "--venv", prefix, "--repair", "--yes", *local)
    assert done.returncode == 0, done.stderr
