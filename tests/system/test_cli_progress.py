"""Long work shows progress: on a terminal, on stderr, at once, one line per phase; quiet
under ``-q`` and ``--json``, and off a terminal unless ``-v``.

``requires`` with its cuDNN uninstalled: ``repair --dry-run`` reads the venv, asks uv what
installing the missing requirement takes, fetches two wheels and simulates.
"""

from __future__ import annotations

import pytest

from tests.support.cli import cudafix, uv_uninstall
from tests.support.tty import cudafix_tty
from tests.support.venvs import ScenarioFactory

pytestmark = pytest.mark.slow
"""Runs the CLI on real venvs: left out of ``make test-fast``."""

PHASES = (
    "reading distributions and ELF objects",
    "asking uv what installing nvidia-cudnn-cu12==9.10.2.21 takes",
    "fetching 2 wheel(s) to check them",
    "fetched nvidia-cuda-nvrtc-cu12==12.8.93 (",
    "simulating the plan",
)


def test_phases_show_on_a_terminal_and_under_verbose_only(scenario: ScenarioFactory) -> None:
    built = scenario("requires")
    uv_uninstall(built.python, "nvidia-cudnn-cu12")
    args = ("repair", "--dry-run", "--venv", built.venv, "-f", built.wheelhouse, "--offline")
    shown = cudafix_tty(*args)
    assert shown.returncode == 0, shown.output
    at = [shown.output.find(p) for p in PHASES]
    assert -1 not in at and at == sorted(at), shown.output
    # uv's own display (resolving, the progress bar, its summary) shows while it fetches
    uv_said = shown.output.find("Resolved")
    assert at[2] < uv_said < at[3], shown.output
    assert shown.output.index(PHASES[-1]) < shown.output.index("Verdict: PASS")

    piped = cudafix(*args)
    assert piped.returncode == 0 and not any(p in piped.stderr for p in PHASES), piped.stderr
    verbose = cudafix(*args, "-v")
    assert all(p in verbose.stderr for p in PHASES), verbose.stderr
    for flag in ("-q", "--json"):
        quiet = cudafix_tty(*args, flag)
        assert not any(p in quiet.output for p in PHASES), (flag, quiet.output)
        assert "Resolved" not in quiet.output, (flag, quiet.output)


APPLY = ("snapshot: ", "probing the environment", "committing")


def test_a_transaction_reports_its_steps_as_progress_and_quiet_says_only_the_verdict(
    scenario: ScenarioFactory,
) -> None:
    """The apply steps (snapshot, uninstalling, probing, committed) are progress: shown
    under ``-v`` (and on a terminal), not off a terminal, and never under ``-q`` or
    ``--json``; ``-q`` prints the verdict and what next, not the plan."""
    built = scenario("clean")
    args = ["remove", "nvidia-nvtx-cu12", "--venv", built.venv]
    quiet = cudafix("-q", *args, "--dry-run")
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stdout.startswith("Verdict: PASS") and "Remove:" not in quiet.stdout
    for before, after in (([], ["--json"]), (["-q"], []), ([], [])):
        done = cudafix(*before, *args, "--yes", *after)
        assert done.returncode == 0, done.stderr
        assert not any(step in done.stderr for step in APPLY), (before, after, done.stderr)
        assert cudafix("undo", "last", "--venv", built.venv, "--yes").returncode == 0
    told = cudafix("-v", *args, "--yes")
    assert told.returncode == 0, told.stderr
    assert all(step in told.stderr for step in (*APPLY, "uninstalling nvidia-nvtx-cu12")), (
        told.stderr
    )
