"""doctor's ``Next:`` line, followed as printed, brings every broken scenario back to healthy.

A user pastes the printed command into a shell with no venv activated (whose uv finds the
scenario's wheels, as their configured index would), applies the preview, and asks doctor
again; at most three rounds (a repair, then the removal of a leftover CUDA major).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_doctor_next_step import run_words, user_shell

from benchmarks.follow import applying, names_target, printed_next
from tests.support.venvs import ScenarioFactory

pytestmark = pytest.mark.slow
"""Runs the CLI on real venvs: left out of ``make test-fast``."""

BROKEN = ["incident", "incident-mirror", "incident-pip", "requires", "shadowing"]


@pytest.mark.parametrize("name", BROKEN)
def test_following_next_makes_the_scenario_healthy(
    name: str, scenario: ScenarioFactory, tmp_path: Path
) -> None:
    built = scenario(name, "broken")
    env = user_shell(built)
    doctor = ["cudafix", "doctor", "--venv", str(built.venv)]
    seen = run_words(doctor, tmp_path, env)
    assert seen.returncode == 1, seen.stdout
    for _ in range(3):
        words = printed_next(seen.stdout)
        assert words is not None and names_target(words, built.venv), seen.stdout
        done = run_words(applying(words), tmp_path, env)
        assert done.returncode == 0, " ".join(words) + "\n" + done.stdout + done.stderr
        seen = run_words(doctor, tmp_path, env)
        if seen.returncode == 0:
            break
    assert seen.returncode == 0, seen.stdout
