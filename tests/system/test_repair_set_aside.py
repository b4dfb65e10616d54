"""A repair whose installs of unmet requirements would be refused repairs what is broken
without them, and says which it left out and the dry run that shows why.

``app`` requires ``helper`` (never installed: it was installed ``--no-deps``), and its own
``app/data.txt`` was deleted by hand. The only ``helper`` wheel would overwrite ``base``'s
file: installing it is refused. The repair reinstalls ``app`` alone.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from tests.support.cli import as_json, cudafix
from tests.support.loadertree import lib
from tests.support.venvs import install, new_venv, site_dir, uninstall
from tests.support.wheels import make_wheel

pytestmark = pytest.mark.slow


def _broken(tmp: Path) -> tuple[Path, Path]:
    wheels = tmp / "wheels"
    make_wheel(wheels, "base", "1.0", {"base/__init__.py": b"B = 1\n"})
    make_wheel(wheels, "app", "1.0", {"app/__init__.py": b"", "app/data.txt": b"app\n"},
               requires=["helper>=1"])  # fmt: skip
    make_wheel(wheels, "helper", "1.0", {"helper.py": b"", "base/__init__.py": b"B = 2\n"})
    prefix = new_venv(tmp / "venv")
    install(prefix, wheels, "base==1.0", deps=False)
    install(prefix, wheels, "app==1.0", deps=False)
    (site_dir(prefix) / "app" / "data.txt").unlink()
    return prefix, wheels


def test_repair_leaves_out_requirements_whose_install_is_refused(tmp_path: Path) -> None:
    prefix, wheels = _broken(tmp_path)
    source = ("--venv", prefix, "--offline", "--find-links", wheels)
    alone = cudafix("install", "helper==1.0", "--dry-run", *source)
    assert alone.returncode == 3, alone.stdout + alone.stderr  # helper overwrites base's file

    plan = as_json(cudafix("repair", "--dry-run", "--json", *source))
    assert plan["verdict"] == "pass"
    assert [r["name"] for r in plan["reinstall"]] == ["app"] and plan["install"] == []
    (aside,) = [w for w in plan["warnings"] if w["kind"] == "requirements-set-aside"]
    assert aside["specs"] == ["helper>=1"] and aside["reasons"] >= 1 and aside["shown"]

    said = cudafix("repair", "--dry-run", *source)
    assert said.returncode == 0, said.stdout + said.stderr
    line = next(ln for ln in said.stdout.splitlines() if "left out of the repair" in ln)
    shown = f"cudafix install 'helper>=1' --dry-run --venv {prefix} --offline --find-links "
    assert shown in line, line
    words = shlex.split(line.split("To see that plan: ", 1)[1])
    again = cudafix(*words[1:])  # the command as printed: the refusal it stands for
    assert again.returncode == 3 and "would overwrite" in again.stdout, again.stdout

    done = cudafix("repair", "--yes", *source)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (site_dir(prefix) / "app" / "data.txt").read_bytes() == b"app\n"
    assert (site_dir(prefix) / "base" / "__init__.py").read_bytes() == b"B = 1\n"
    after = as_json(cudafix("doctor", "--json", "--venv", prefix))
    assert [f["kind"] for f in after["findings"] if f["severity"] == "error"] == ["requirement"]


def _gone_library(tmp: Path) -> tuple[Path, Path]:
    """``app``'s extension needs ``libfoo.so.1`` from ``prov``, which was uninstalled after
    a doctor saw it; ``app`` requires ``helper``, whose only wheel overwrites ``base``."""
    build, wheels = tmp / "build", tmp / "wheels"
    foo = lib(build / "libfoo.so.1")
    ext = lib(build / "_ext.so", needed=[foo], rpath=["$ORIGIN/../prov"])
    make_wheel(wheels, "base", "1.0", {"base/__init__.py": b"B = 1\n"})
    make_wheel(wheels, "prov", "1.0", {"prov/libfoo.so.1": foo.read_bytes()})
    make_wheel(wheels, "app", "1.0", {"app/__init__.py": b"", "app/_ext.so": ext.read_bytes()},
               requires=["helper>=1"])  # fmt: skip
    make_wheel(wheels, "helper", "1.0", {"helper.py": b"", "base/__init__.py": b"B = 2\n"})
    prefix = new_venv(tmp / "venv")
    install(prefix, wheels, "base==1.0", "prov==1.0", "app==1.0", deps=False)
    assert cudafix("doctor", "--venv", prefix).returncode == 1  # sees libfoo, and helper unmet
    uninstall(prefix, "prov")
    return prefix, wheels


def test_a_repair_with_nothing_to_reinstall_also_leaves_them_out(tmp_path: Path) -> None:
    """Its only fix is installing again what provided a library that went."""
    prefix, wheels = _gone_library(tmp_path)
    source = ("--venv", prefix, "--offline", "--find-links", wheels)
    plan = as_json(cudafix("repair", "--dry-run", "--json", *source))
    assert plan["verdict"] == "pass", plan["reasons"]
    assert plan["reinstall"] == [] and [i["name"] for i in plan["install"]] == ["prov"]
    (aside,) = [w for w in plan["warnings"] if w["kind"] == "requirements-set-aside"]
    assert aside["specs"] == ["helper>=1"]

    done = cudafix("repair", "--yes", *source)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (site_dir(prefix) / "prov" / "libfoo.so.1").is_file()
    assert (site_dir(prefix) / "base" / "__init__.py").read_bytes() == b"B = 1\n"
