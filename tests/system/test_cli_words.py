"""What a person reads: each fact once, in one spelling, nothing that reads as what it is not.

Staging's uv lines about its scratch directory must not read as a change to the venv; a
terminal shows each step once; a failed command's last line is labelled as that; the uv
installed with cudafix is found by a wrapped command; a refusal offers first what doctor
recommends, says what each alternative leaves behind, folds its warnings and never calls
identical bytes different.
"""

from __future__ import annotations

import re

import pytest

from tests.support.cli import cudafix, offline, uv_uninstall
from tests.support.tty import cudafix_tty
from tests.support.venvs import ScenarioFactory, site_dir

pytestmark = pytest.mark.slow
"""Runs the CLI on real venvs: left out of ``make test-fast``."""

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def _plain(text: str) -> str:
    return _ANSI.sub("", text)


def test_staging_says_the_venv_is_untouched_and_hides_uvs_install_lines(
    scenario: ScenarioFactory,
) -> None:
    built = scenario("requires")
    uv_uninstall(built.python, "nvidia-cudnn-cu12")
    shown = cudafix_tty("repair", "--dry-run", "--venv", built.venv, *offline(built.wheelhouse))
    assert shown.returncode == 0, shown.output
    before_plan = _plain(shown.output).split("Environment:", 1)[0]
    assert f"scratch directory; {built.venv} is not changed" in before_plan, before_plan
    assert "Resolved 2 packages" in before_plan  # uv's own progress still shows
    for uv_line in ("Using CPython", "interpreter at", "Installed 2 packages", "+ nvidia-"):
        assert uv_line not in before_plan, (uv_line, before_plan)
    # each fact once on a terminal: where the environment is, named by the plan alone
    assert _plain(shown.output).count("Environment:") == 1, shown.output


def test_a_wrapped_command_finds_the_uv_installed_with_cudafix(scenario: ScenarioFactory) -> None:
    """Installed as a tool, cudafix's uv is in the tool's ``bin/``, on no ``PATH``."""
    built = scenario("clean")
    done = cudafix("run", "--venv", built.venv, "--", "uv", "--version", env={"PATH": "/bin"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("uv "), done.stdout


def test_a_failed_commands_last_line_is_labelled_and_a_commit_is_said_once(
    scenario: ScenarioFactory,
) -> None:
    built = scenario("clean")
    failed = cudafix("run", "--venv", built.venv, "--", "sh", "-c", "echo step 2 done; exit 3")
    assert failed.returncode == 1, failed.stderr
    assert (
        "error: the command failed (exit status 3; last output line: step 2 done); rolled back"
        in failed.stderr
    ), failed.stderr
    done = cudafix_tty("remove", "nvidia-nvtx-cu12", "--venv", built.venv, "--yes")
    assert done.returncode == 0, done.output
    assert _plain(done.output).lower().count("committed") == 1, done.output


def test_a_refused_undo_lists_its_conflicts_once_spelt_as_everywhere(
    scenario: ScenarioFactory,
) -> None:
    built = scenario("clean")
    assert cudafix("remove", "nvidia-nvtx-cu12", "--venv", built.venv, "--yes").returncode == 0
    back = site_dir(built.venv) / "nvidia" / "nvtx" / "__init__.py"
    back.parent.mkdir(parents=True, exist_ok=True)
    back.write_text("# written after the removal\n")
    for flag in ("-q", "-v"):
        undo = cudafix(flag, "undo", "last", "--venv", built.venv, "--yes")
        assert undo.returncode == 3, undo.stderr
        said = undo.stdout + undo.stderr
        assert said.count("nvidia/nvtx/__init__.py: changed since the commit") == 1, said
        assert "site-packages" not in said, said
