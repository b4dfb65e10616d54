"""Target selection and the interpreter query, against real uv-made venvs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cudafix.env.target import TargetEnv, fallback_info, locate_target, query_interpreter
from cudafix.model.errors import UsageError
from tests.support.venvs import new_venv, site_dir


@pytest.fixture(scope="session")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("uvcache")


@pytest.fixture
def venv(tmp_path: Path, cache: Path) -> Path:
    return new_venv(tmp_path / "env", cache=cache)


def _break_python(venv: Path, script: str) -> Path:
    python = venv / "bin" / "python"
    python.unlink()
    python.write_text(f"#!/bin/sh\n{script}\n")
    python.chmod(0o755)
    return python


# --- locate_target --------------------------------------------------------------------


@pytest.mark.slow
def test_virtual_env_wins_over_dot_venv(venv: Path, tmp_path: Path, cache: Path) -> None:
    new_venv(tmp_path / ".venv", cache=cache)
    target = locate_target(None, None, {"VIRTUAL_ENV": str(venv)}, tmp_path)
    assert target == TargetEnv(venv, venv / "bin" / "python")


@pytest.mark.slow
def test_dot_venv_in_cwd(tmp_path: Path, cache: Path) -> None:
    dot = new_venv(tmp_path / ".venv", cache=cache)
    assert locate_target(None, None, {}, tmp_path).prefix == dot


@pytest.mark.slow
def test_relative_venv_is_made_absolute(venv: Path, tmp_path: Path) -> None:
    target = locate_target(None, "env", {}, tmp_path)
    assert target.prefix == venv
    assert target.prefix.is_absolute()


@pytest.mark.slow
def test_python_inside_venv_is_not_resolved_out_of_it(venv: Path, tmp_path: Path) -> None:
    python = venv / "bin" / "python"
    assert python.is_symlink()  # uv links to the base interpreter outside the venv
    assert locate_target(str(python), None, {}, tmp_path) == TargetEnv(venv, python)
    assert locate_target("env/bin/python", None, {}, tmp_path).prefix == venv


@pytest.mark.slow
def test_python_by_name_on_path(venv: Path, tmp_path: Path) -> None:
    target = locate_target("python", None, {"PATH": str(venv / "bin")}, tmp_path)
    assert target.prefix == venv


@pytest.mark.slow
def test_python_and_venv_together_is_a_usage_error(venv: Path, tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        locate_target(str(venv / "bin" / "python"), str(venv), {}, tmp_path)


@pytest.mark.slow
def test_layout_without_pyvenv_cfg_is_accepted(venv: Path, tmp_path: Path) -> None:
    (venv / "pyvenv.cfg").unlink()
    assert locate_target(None, str(venv), {}, tmp_path).prefix == venv


# --- query_interpreter ------------------------------------------------------------------


@pytest.mark.slow
def test_query_reports_layout_and_markers(venv: Path, tmp_path: Path) -> None:
    info = query_interpreter(locate_target(None, str(venv), {}, tmp_path))
    assert info.fallback_reason is None
    assert info.prefix == venv
    assert info.site_packages == (site_dir(venv).relative_to(venv).as_posix(),)
    assert info.version_info == tuple(sys.version_info[:3])
    assert info.marker_env["python_version"] == f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert info.marker_env["sys_platform"] == sys.platform
    assert info.ext_suffix is not None and info.ext_suffix.endswith(".so")
    assert str(site_dir(venv)) in info.sys_path


@pytest.mark.slow
def test_query_reports_the_interpreters_own_extension_suffixes(venv: Path, tmp_path: Path) -> None:
    """What import loads extension modules from, as the target says (untagged ``.so`` too)."""
    code = "import importlib.machinery as m, json; print(json.dumps(m.EXTENSION_SUFFIXES))"
    asked = subprocess.run(
        [str(venv / "bin" / "python"), "-I", "-c", code], capture_output=True, text=True
    )
    info = query_interpreter(locate_target(None, str(venv), {}, tmp_path))
    assert info.extension_suffixes == tuple(json.loads(asked.stdout))
    assert ".so" in info.extension_suffixes
    fallback = fallback_info(venv, "no interpreter")
    assert fallback.extension_suffixes[0] == info.ext_suffix
    assert fallback.extension_suffixes[1:] == (".abi3.so", ".so")


@pytest.mark.slow
def test_query_runs_nothing_from_site_packages(venv: Path, tmp_path: Path) -> None:
    marker = tmp_path / "pth-ran"
    (site_dir(venv) / "evil.pth").write_text(
        f"import pathlib; pathlib.Path({str(marker)!r}).touch()\n"
    )
    (site_dir(venv) / "sitecustomize.py").write_text("raise SystemExit(9)\n")
    info = query_interpreter(TargetEnv(venv, venv / "bin" / "python"))
    assert info.fallback_reason is None
    assert not marker.exists()


@pytest.mark.slow
def test_crashing_interpreter_falls_back_to_layout(venv: Path, tmp_path: Path) -> None:
    python = _break_python(venv, "echo 'Fatal Python error: boom' >&2; exit 3")
    target = locate_target(str(python), None, {}, tmp_path)
    assert target.prefix == venv
    info = query_interpreter(target)
    assert info.fallback_reason is not None
    assert "exited 3" in info.fallback_reason and "boom" in info.fallback_reason
    assert info.site_packages == (site_dir(venv).relative_to(venv).as_posix(),)
    assert info.version_info[:2] == tuple(sys.version_info[:2])  # from pyvenv.cfg
    assert info.marker_env["python_full_version"] == ".".join(map(str, sys.version_info[:3]))


@pytest.mark.slow
def test_missing_interpreter_falls_back(venv: Path, tmp_path: Path) -> None:
    python = venv / "bin" / "python"
    python.unlink()
    python.symlink_to(tmp_path / "deleted-base-python")
    info = query_interpreter(locate_target(str(python), None, {}, tmp_path))
    assert info.fallback_reason is not None and "exited 127" in info.fallback_reason


@pytest.mark.slow
def test_hanging_interpreter_falls_back(venv: Path) -> None:
    python = _break_python(venv, "exec sleep 30")
    info = query_interpreter(TargetEnv(venv, python), timeout=0.5)
    assert info.fallback_reason is not None and "timed out" in info.fallback_reason


@pytest.mark.slow
def test_garbage_answer_falls_back(venv: Path) -> None:
    python = _break_python(venv, "echo not-json")
    info = query_interpreter(TargetEnv(venv, python))
    assert info.fallback_reason is not None and "unreadable answer" in info.fallback_reason


# --- Debian's system python ------------------------------------------------------------

DEBIAN_PYTHON = Path("/usr/bin/python3")


def _debian_venv(where: Path) -> Path:
    """``/usr/bin/python3 -m venv`` (Debian's interpreter, default scheme ``posix_local``)."""
    import subprocess

    if not DEBIAN_PYTHON.is_file():
        pytest.skip(f"{DEBIAN_PYTHON} is not on this machine (not a Debian/Ubuntu host)")
    made = subprocess.run(
        [DEBIAN_PYTHON, "-m", "venv", "--without-pip", where], capture_output=True
    )
    if made.returncode != 0:
        apt = subprocess.run(
            ["apt-get", "install", "-y", "-q", "python3-venv"], capture_output=True, text=True
        )
        if apt.returncode != 0:
            pytest.skip(f"python3-venv is missing and cannot be installed: {apt.stderr[-200:]}")
        subprocess.run([DEBIAN_PYTHON, "-m", "venv", "--without-pip", where], check=True)
    return where


@pytest.mark.slow
def test_debian_system_python_venv_is_read_with_the_venv_scheme(
    tmp_path: Path, cache: Path
) -> None:
    import subprocess

    import uv

    from cudafix.env.reading import read_inventory
    from tests.support.wheels import make_wheel

    venv = _debian_venv(tmp_path / "deb")
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "debpkg", "1.0", {"debpkg/__init__.py": b"X = 1\n"})
    argv = [uv.find_uv_bin(), "pip", "install", "-q", "--python", str(venv / "bin" / "python")]
    offline = ["--offline", "--no-index", "--find-links", str(wheels), "--cache-dir", str(cache)]
    subprocess.run([*argv, *offline, "debpkg==1.0"], check=True)
    info = query_interpreter(TargetEnv(venv, venv / "bin" / "python"))
    version = f"python{sys.version_info[0]}"
    assert info.site_packages and all(
        s.startswith(f"lib/{version}") and s.endswith("/site-packages") for s in info.site_packages
    ), info.site_packages
    inventory = read_inventory(venv, info.site_packages, venv / "bin" / "python")
    assert "debpkg" in inventory.distributions
