"""Saved plans against real venvs: a stale one is refused, one re-targeted to a copy applies."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from scenarios.fingerprint import diff_fingerprints, fingerprint
from tests.support.cli import (
    as_json,
    cudafix,
    save_seed_plan,
    uv_uninstall,
)
from tests.support.venvs import ScenarioFactory


@pytest.mark.slow
def test_stale_plan_is_refused_with_its_differences(
    scenario: ScenarioFactory, tmp_path: Path
) -> None:
    built = scenario("incident")
    plan = save_seed_plan(built, tmp_path / "plan.json")
    assert json.loads(plan.read_text())["preconditions"]["records"]
    uv_uninstall(built.python, "nvidia-nvtx-cu13")
    before = fingerprint(built.venv)
    done = cudafix("apply", plan, "--yes", "--json")
    result = as_json(done)
    assert (done.returncode, result["state"]) == (3, "stale"), done.stderr
    assert "nvidia-nvtx-cu13 13.0.39 is not installed" in result["context"]
    assert any(c.startswith("lib/python3") and "__init__.py" in c for c in result["context"])
    assert not diff_fingerprints(before, fingerprint(built.venv))


@pytest.mark.slow
def test_remove_plan_file_applies_to_a_copy_of_the_env(
    scenario: ScenarioFactory, tmp_path: Path
) -> None:
    """A plan written by ``cudafix remove --out`` is re-targeted to another prefix and applied."""
    built = scenario("incident")
    plan = tmp_path / "plan.json"
    made = cudafix("remove", "nvidia-nvtx-cu13", "--repair", "--venv", built.venv, "--dry-run",
                   "--out", plan, "--offline", "--find-links", built.wheelhouse)  # fmt: skip
    assert made.returncode == 0, made.stderr
    copy = tmp_path / "node" / "venv"
    copy.parent.mkdir()
    subprocess.run(["cp", "-a", built.venv, copy], check=True)
    done = cudafix("apply", plan, "--venv", copy, "--yes", "--json")
    result = as_json(done)
    assert (done.returncode, result["target"]) == (0, str(copy)), done.stderr
    assert result["removed"] == ["nvidia-nvtx-cu13"]
    assert not list(copy.glob("lib/python3*/site-packages/nvidia_nvtx_cu13-*"))
    assert list(built.venv.glob("lib/python3*/site-packages/nvidia_nvtx_cu13-*"))
