"""Every step cudafix prints is a command that runs as printed and does what it says.

After a dry run that passes, ``Next:`` is the argv that applies it (``--yes`` off a
terminal, the target named); ``--out`` says where the plan went and how to apply that file;
the hint for a selector that matches nothing lists what is installed in that target; a flag
is suggested only when it alone changes the verdict.
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest
import uv

from tests.support.cli import EXAMPLES, cudafix, offline
from tests.support.tty import cudafix_tty
from tests.support.venvs import ScenarioFactory

pytestmark = pytest.mark.slow
"""Runs the CLI on real venvs: left out of ``make test-fast``."""

NVTX = "nvidia-nvtx-cu12"


def _next(stdout: str) -> list[str]:
    [line] = [ln for ln in stdout.splitlines() if ln.startswith("Next: ")]
    return shlex.split(line.removeprefix("Next: "))


def _run_printed(argv: list[str]) -> subprocess.CompletedProcess[str]:
    assert argv[0] == "cudafix", argv
    return cudafix(*argv[1:])


def test_a_passing_dry_run_prints_the_command_that_applies_it(scenario: ScenarioFactory) -> None:
    built = scenario("clean")
    venv = str(built.venv)
    dry = cudafix("remove", NVTX, "--dry-run", env={"VIRTUAL_ENV": venv, "UV_PYTHON": ""})
    assert dry.returncode == 0, dry.stdout + dry.stderr
    printed = _next(dry.stdout)
    assert printed == ["cudafix", "remove", NVTX, "--venv", venv, "--yes"]
    applied = _run_printed(printed)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert "Committed transaction" in applied.stdout
    assert not any(built.venv.glob(f"lib/python3*/site-packages/{NVTX.replace('-', '_')}-*"))


def test_on_a_terminal_the_printed_command_asks_instead(scenario: ScenarioFactory) -> None:
    built = scenario("clean")
    dry = cudafix_tty("-q", "remove", NVTX, "--venv", built.venv, "--dry-run")
    assert dry.returncode == 0, dry.output
    assert _next(dry.output) == ["cudafix", "-q", "remove", NVTX, "--venv", str(built.venv)]


def test_out_says_where_the_plan_went_and_how_to_apply_it(
    scenario: ScenarioFactory, tmp_path: Path
) -> None:
    built = scenario("clean")
    out = tmp_path / "plan.json"
    dry = cudafix("remove", NVTX, "--venv", built.venv, "--dry-run", "--out", out)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert f"Plan written to {out}." in dry.stdout.splitlines()
    printed = _next(dry.stdout)
    assert printed == ["cudafix", "apply", str(out), "--venv", str(built.venv), "--yes"]
    applied = _run_printed(printed)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert "Committed transaction" in applied.stdout


def test_the_hint_for_an_unmatched_selector_lists_what_is_installed(
    scenario: ScenarioFactory,
) -> None:
    built = scenario("clean")
    refused = cudafix("remove", "no-such-thing", "--venv", built.venv, "--dry-run")
    assert refused.returncode == 2, refused.stderr
    [hint] = [ln for ln in refused.stderr.splitlines() if ln.startswith("hint: ")]
    argv = shlex.split(hint.split("`")[1])
    assert argv[:3] == ["uv", "pip", "list"] and str(built.venv) in argv[-1]
    listed = subprocess.run(
        [uv.find_uv_bin(), *argv[1:]], capture_output=True, text=True, check=True
    )
    assert NVTX in listed.stdout


def test_allow_broken_requirements_is_offered_only_when_it_alone_turns_the_verdict(
    scenario: ScenarioFactory,
) -> None:
    built = scenario("requires")
    nvrtc = ("remove", "nvidia-cuda-nvrtc-cu12", "--venv", str(built.venv), "--dry-run")
    # it also deletes nvidia/__init__.py, which nvidia-cudnn-cu12 claims: the flag alone
    # would still be refused, so it is not offered
    both = cudafix(*nvrtc)
    assert both.returncode == 3, both.stdout + both.stderr
    assert "--allow-broken-requirements" not in both.stdout
    assert cudafix(*nvrtc, "--allow-broken-requirements").returncode == 3
    only = cudafix(*nvrtc, "--keep-shared")
    assert only.returncode == 3, only.stdout + only.stderr
    assert "add --allow-broken-requirements" in only.stdout
    followed = cudafix(*nvrtc, "--keep-shared", "--allow-broken-requirements")
    assert followed.returncode == 0, followed.stdout + followed.stderr


def test_target_options_before_the_command_act_on_that_target(scenario: ScenarioFactory) -> None:
    built = scenario("clean")
    python = built.venv / "bin" / "python"
    done = cudafix("-p", python, "-q", "remove", NVTX, "--dry-run", env={"VIRTUAL_ENV": ""})
    assert done.returncode == 0, done.stdout + done.stderr
    assert _next(done.stdout) == ["cudafix", "-p", str(python), "-q", "remove", NVTX, "--yes"]


def test_a_refusal_under_quiet_says_its_reasons_once(scenario: ScenarioFactory) -> None:
    built = scenario("requires")
    refused = cudafix("-q", "remove", "nvidia-cuda-nvrtc-cu12", "--venv", built.venv, "--yes")
    assert refused.returncode == 3, refused.stdout + refused.stderr
    said = refused.stdout + refused.stderr
    assert said.count("torch requires nvidia-cuda-nvrtc-cu12") == 1, said
    assert refused.stderr.startswith("error: the plan was refused"), refused.stderr


def test_the_apply_line_of_a_saved_plan_names_where_its_wheels_come_from(
    scenario: ScenarioFactory, tmp_path: Path
) -> None:
    built = scenario("incident")
    out = tmp_path / "plan.json"
    dry = cudafix(
        "apply", EXAMPLES / "seed-cleanup.toml", "--venv", built.venv, "--dry-run",
        *offline(built.wheelhouse), "--out", out,
    )  # fmt: skip
    assert dry.returncode == 0, dry.stdout + dry.stderr
    printed = _next(dry.stdout)
    assert printed[:5] == ["cudafix", "apply", str(out), "--venv", str(built.venv)]
    assert printed[-1] == "--yes" and "--find-links" in printed
    applied = _run_printed(printed)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert "Committed transaction" in applied.stdout
