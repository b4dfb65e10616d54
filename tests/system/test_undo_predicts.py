"""``undo --dry-run`` predicts what the undo decides, also where the undo puts files back.

``requires`` with a library of its cuDNN deleted by hand, then ``cudafix repair``, which
reinstalls cuDNN (``~``): undoing that repair adds no distribution, but puts the broken
state back, and doctor finds ``import torch``'s library missing again. The dry run builds
that state beside the environment and judges it as the undo judges itself, so it says
the undo is refused, and the undo refuses it the same way before changing anything.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scenarios.build import uv_binary
from tests.support.cli import as_json, assert_one_line_error, cudafix, repair_pa
from tests.support.tx import shared_pair
from tests.support.venvs import ScenarioFactory, site_dir, try_import

pytestmark = pytest.mark.slow
"""Runs the CLI on real venvs: left out of ``make test-fast``."""

LIB = "nvidia/cudnn/lib/libcudnn.so.9"


def test_a_dry_run_says_an_undo_that_brings_back_an_error_is_refused_and_the_undo_agrees(
    scenario: ScenarioFactory,
) -> None:
    built = scenario("requires")
    (site_dir(built.venv) / LIB).unlink()
    assert try_import(built.python, "torch").returncode != 0
    repaired = cudafix(
        "repair", "--venv", built.venv, "-f", built.wheelhouse, "--offline", "--yes", "--json"
    )
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert try_import(built.python, "torch").returncode == 0
    [entry] = json.loads(cudafix("history", "--venv", built.venv, "--json").stdout)
    assert not any(c.startswith("+") for c in entry["changed"]), entry["changed"]

    dry = cudafix("undo", "last", "--venv", built.venv, "--dry-run", "--json")
    preview = as_json(dry)
    assert (dry.returncode, preview["state"]) == (3, "refused"), dry.stdout + dry.stderr
    assert "libcudnn.so.9" in " ".join(preview["reasons"]), preview["reasons"]
    said = cudafix("undo", "last", "--venv", built.venv, "--dry-run")
    assert said.returncode == 3 and "Verdict: REFUSED" in said.stdout, said.stdout
    assert not (built.venv / ".cudafix" / "view").exists()

    refused = cudafix("undo", "last", "--venv", built.venv, "--yes")
    assert_one_line_error(refused, 3, "would bring back problems", "--accept")
    assert "libcudnn.so.9" in refused.stderr and refused.stderr == said.stderr  # as predicted
    assert try_import(built.python, "torch").returncode == 0
    assert len(json.loads(cudafix("history", "--venv", built.venv, "--json").stdout)) == 1

    accepted = cudafix("undo", "last", "--venv", built.venv, "--yes", "--accept", "--json")
    assert as_json(accepted)["state"] == "committed", accepted.stdout + accepted.stderr
    assert not (site_dir(built.venv) / LIB).exists()


def test_a_dry_run_says_an_undo_that_brings_back_nothing_broken_can_be_undone_and_it_is(
    scenario: ScenarioFactory,
) -> None:
    built = scenario("clean")
    argv = [uv_binary(), "pip", "uninstall", "--python", str(built.python), "nvidia-nvtx-cu12"]
    assert cudafix("run", "--venv", built.venv, "--", *argv).returncode == 0
    dry = cudafix("undo", "last", "--venv", built.venv, "--dry-run")
    assert dry.returncode == 0 and "Verdict: can be undone" in dry.stdout, dry.stdout + dry.stderr
    assert "puts back nvidia-nvtx-cu12 12.8.90" in dry.stdout
    undone = cudafix("undo", "last", "--venv", built.venv, "--yes", "--json")
    assert as_json(undone)["state"] == "committed", undone.stdout + undone.stderr
    assert (site_dir(built.venv) / "nvidia" / "nvtx").is_dir()
    assert not (built.venv / ".cudafix" / "view").exists()


def test_a_warning_the_undo_brings_back_is_said_once(tmp_path: Path) -> None:
    """Undoing ``remove pa --repair`` brings back the clobbered shared file: the preview
    names it, and the undo, judged again after, does not say it a second time; with
    ``--json`` (no preview printed) it is said once, on stderr."""
    prefix, wheels = shared_pair(tmp_path)
    assert repair_pa(prefix, wheels).returncode == 0
    undone = cudafix("undo", "last", "--venv", prefix, "--yes")
    assert undone.returncode == 0, undone.stdout + undone.stderr
    assert (undone.stdout + undone.stderr).count("brings back [clobbered]") == 1, undone.stdout

    assert repair_pa(prefix, wheels).returncode == 0
    quiet = cudafix("undo", "last", "--venv", prefix, "--yes", "--json")
    assert as_json(quiet)["state"] == "committed"
    assert quiet.stderr.count("brings back [clobbered]") == 1, quiet.stderr
