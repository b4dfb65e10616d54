"""The incident as pip leaves it, followed the way doctor tells a user to, through the CLI.

``incident-pip``: a cu12 torch and its cu12 libraries, four cu13 wheels installed over them
with ``pip --no-deps``, bytecode compiled as pip does. Plain ``uv pip uninstall`` of the cu13
four breaks ``import torch`` and deletes ``__pycache__`` files cu12 RECORDs list. ``doctor``
must say so (exit 1) and print a command that, pasted into a shell with no venv activated,
repairs the venv: ``import torch`` loads the cu12 build's cuDNN again and ``doctor`` exits 0.
The planned way, ``remove 'nvidia-*-cu13' --repair --yes``, must end in the same state.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.follow import applying, as_argv, names_target, printed_next
from scenarios import BuiltScenario
from scenarios.build import builder_env
from tests.support.venvs import ScenarioFactory

pytestmark = pytest.mark.slow
"""Builds real venvs or runs the CLI through transactions: left out of ``make test-fast``."""

CUDAFIX = [sys.executable, "-m", "cudafix"]
_LOADED = """
import torch
(path,) = {l.split()[-1] for l in open('/proc/self/maps') if l.rstrip().endswith('/libcudnn.so.9')}
print(path)
"""


def user_shell(built: BuiltScenario) -> dict[str, str]:
    """A shell with no venv activated, whose uv and pip find wheels in the scenario's
    wheelhouse (the user's configured index, here offline)."""
    wheels = str(built.wheelhouse)
    return {
        **os.environ,
        **builder_env(),
        "VIRTUAL_ENV": "",
        "UV_OFFLINE": "1",
        "UV_NO_INDEX": "1",
        "UV_FIND_LINKS": wheels,
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": wheels,
    }


def run_words(words: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    argv = as_argv(words, CUDAFIX)
    return subprocess.run(
        argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, cwd=cwd, env=env,
        timeout=300,
    )  # fmt: skip


def test_doctor_printed_repair_restores_the_cu12_build_after_plain_uv(
    scenario: ScenarioFactory, tmp_path: Path
) -> None:
    built = scenario("incident-pip")
    site = next(built.venv.glob("lib/python3*/site-packages"))
    pyc = next((site / "nvidia" / "__pycache__").glob("__init__.cpython-*.pyc"))
    assert any(f"nvidia/__pycache__/{pyc.name},," in r.read_text() for r in site.glob("*/RECORD"))
    env = user_shell(built)
    subprocess.run(built.break_command(), check=True, capture_output=True, env=env)
    broken = subprocess.run([built.python, "-c", "import torch"], capture_output=True, text=True)
    assert "libcudnn.so.9: cannot open shared object file" in broken.stderr, broken.stderr

    doctor = run_words(["cudafix", "doctor", "--venv", str(built.venv)], tmp_path, env)
    assert doctor.returncode == 1, doctor.stdout + doctor.stderr
    words = printed_next(doctor.stdout)
    assert words is not None and words[1] == "repair", doctor.stdout
    assert names_target(words, built.venv), f"printed command names no target: {words}"

    done = run_words(words, tmp_path, env)
    assert done.returncode == 0, done.stdout + done.stderr
    if "--dry-run" in words:
        done = run_words(applying(words), tmp_path, env)
        assert done.returncode == 0, done.stdout + done.stderr

    assert_cu12_cudnn_loads(built)
    after = run_words(["cudafix", "doctor", "--venv", str(built.venv)], tmp_path, env)
    assert after.returncode == 0, after.stdout


def test_remove_cu13_with_repair_commits_and_doctor_is_clean(
    scenario: ScenarioFactory, tmp_path: Path
) -> None:
    """The planned way out of the same venv: ``remove 'nvidia-*-cu13' --repair --yes``."""
    built = scenario("incident-pip")
    env = user_shell(built)
    words = ["cudafix", "remove", "nvidia-*-cu13", "--venv", str(built.venv), "--repair", "--yes"]
    done = run_words(words, tmp_path, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert_cu12_cudnn_loads(built)
    after = run_words(["cudafix", "doctor", "--venv", str(built.venv)], tmp_path, env)
    assert after.returncode == 0, after.stdout


def assert_cu12_cudnn_loads(built: BuiltScenario) -> None:
    """``import torch`` works and the real loader mapped the cu12 wheel's ``libcudnn.so.9``."""
    loaded = subprocess.run([built.python, "-c", _LOADED], capture_output=True, text=True)
    assert loaded.returncode == 0, loaded.stderr
    assert b"nvidia-cudnn-cu12 9.10.2.21" in Path(loaded.stdout.strip()).read_bytes()
