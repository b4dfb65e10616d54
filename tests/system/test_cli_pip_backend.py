"""``--backend pip`` wherever cudafix was installed, as ``uv tool install .`` leaves it: an
environment with cudafix and its dependencies but no pip, acting on a uv-made venv that has
no pip either. A pip on ``PATH`` is used when there is one; with none at all the plan is
refused while planning (exit 2), before anything changes, not rolled back after.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from scenarios.build import uv_binary
from tests.support.venvs import ScenarioFactory

pytestmark = pytest.mark.slow
"""Runs the CLI on real venvs: left out of ``make test-fast``."""


def _cudafix_without_pip(where: Path) -> Path:
    """A venv holding this cudafix and its dependencies, but not pip: each entry of this
    interpreter's site-packages linked in, pip's left out."""
    subprocess.run([uv_binary(), "venv", "--offline", "--python", sys.executable, str(where)],
                   check=True, capture_output=True)  # fmt: skip
    ours = Path(next(p for p in sys.path if p.endswith("site-packages")))
    [site] = where.glob("lib/python3*/site-packages")
    for entry in ours.iterdir():
        if entry.name == "pip" or entry.name.startswith("pip-"):
            continue
        if not (site / entry.name).exists():
            (site / entry.name).symlink_to(entry)
    python = where / "bin" / "python"
    assert subprocess.run([python, "-m", "pip", "--version"], capture_output=True).returncode
    return python


def _run(python: Path, path: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [python, "-m", "cudafix", *map(str, args)],
        capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300,
        env={**os.environ, "PATH": path, "VIRTUAL_ENV": ""},
    )  # fmt: skip


def test_pip_backend_from_a_cudafix_without_pip(scenario: ScenarioFactory, tmp_path: Path) -> None:
    built = scenario("clean")
    python = _cudafix_without_pip(tmp_path / "tool")
    args = ("remove", "nvidia-nvtx-cu12", "--venv", built.venv, "--backend", "pip", "--no-probe")
    nothing = tmp_path / "empty-bin"
    nothing.mkdir()
    for mode in ("--dry-run", "--yes"):
        refused = _run(python, str(nothing), *args, mode)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert "--backend pip: no pip can act on" in refused.stderr
    assert any(built.venv.glob("lib/python3*/site-packages/nvidia_nvtx_cu12-*.dist-info"))

    with_pip = tmp_path / "bin-with-pip"
    with_pip.mkdir()
    (with_pip / "pip").symlink_to(Path(sys.executable).parent / "pip")
    done = _run(python, str(with_pip), *args, "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert not any(built.venv.glob("lib/python3*/site-packages/nvidia_nvtx_cu12-*.dist-info"))
