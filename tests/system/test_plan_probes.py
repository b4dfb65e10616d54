"""A saved plan's probe commands are code: apply says what it will run, and can skip it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import cudafix
from tests.support.tx import shared_pair
from tests.support.venvs import site_rel

pytestmark = pytest.mark.slow
"""Builds real venvs or runs the CLI through transactions: left out of ``make test-fast``."""


def test_plan_probe_commands_are_listed_and_can_be_skipped(tmp_path: Path) -> None:
    prefix, wheels = shared_pair(tmp_path)
    plan_file = tmp_path / "plan.json"
    made = cudafix(
        "remove", "pa", "--venv", prefix, "--repair", "--dry-run", "--offline",
        "--find-links", wheels, "--out", plan_file,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    ran, skipped = tmp_path / "ran", tmp_path / "skipped"
    plan = json.loads(plan_file.read_text())
    plan["probes"]["commands"] = [f"touch {ran}; exit 1"]
    plan_file.write_text(json.dumps(plan))
    proc = cudafix("apply", plan_file, "--yes")
    assert proc.returncode == 1, proc.stderr
    assert f"/bin/sh -c 'touch {ran}; exit 1'" in proc.stderr
    assert "--no-plan-probes" in proc.stderr
    assert ran.exists() and (prefix / site_rel(prefix) / "pa_mod.py").exists()
    plan["probes"]["commands"] = [f"touch {skipped}; exit 1"]
    plan_file.write_text(json.dumps(plan))
    proc = cudafix("apply", plan_file, "--yes", "--no-plan-probes")
    assert proc.returncode == 0, proc.stderr
    assert "not running its 1 probe command(s)" in proc.stderr
    assert not skipped.exists()
    assert not (prefix / site_rel(prefix) / "pa_mod.py").exists()
