"""Usage errors, with no venv at all: one JSON object under --json, cudafix's ``error:``
form otherwise, exit 2; global options before or after the command."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import assert_one_line_error, cudafix, one_json_error


@pytest.mark.parametrize(
    "argv",
    [["doctor", "--json", "--bogus"], ["history", "--json", "--venv"], ["doctor", "--json", "x"]],
)
def test_usage_errors_under_json_are_one_object(argv: list[str]) -> None:
    proc = cudafix(*argv)
    assert proc.returncode == 2
    assert one_json_error(proc, 2)["state"] == "error"


def test_usage_errors_read_like_cudafix_errors() -> None:
    """click's complaints come in cudafix's ``error:``/``hint:`` form, not click's ``Error:``."""
    proc = cudafix("doctor", "--venvv", "x")
    assert_one_line_error(proc, 2, "--venvv", "did you mean '--venv'?")
    assert "Error:" not in proc.stderr and "Try '" not in proc.stderr
    assert proc.stderr.splitlines()[-1] == "hint: `cudafix doctor --help` says more"


@pytest.mark.parametrize("before", [["--venv"], ["-p"], ["--python"]])
def test_target_options_go_before_the_command_too(before: list[str], tmp_path: Path) -> None:
    """``cudafix --venv V doctor`` means ``cudafix doctor --venv V``, as uv's global options."""
    missing = str(tmp_path / "no-such-venv")
    after = cudafix("doctor", *before, missing)
    first = cudafix(*before, missing, "doctor")
    assert_one_line_error(first, 2, missing)
    assert (first.returncode, first.stderr) == (after.returncode, after.stderr)


@pytest.mark.parametrize(
    "argv", [["-q", "-v", "doctor"], ["-q", "doctor", "-v"], ["doctor", "--verbose", "--quiet"]]
)
def test_quiet_and_verbose_together_are_refused(argv: list[str]) -> None:
    assert_one_line_error(cudafix(*argv), 2, "--quiet and --verbose")


def test_run_help_names_the_command_cmd_as_the_docs_do() -> None:
    usage = cudafix("run", "--help").stdout.splitlines()[0]
    assert usage == "Usage: cudafix run [OPTIONS] CMD..."


def test_command_summaries_are_not_cut() -> None:
    """Each command's first sentence is shown whole (wrapped), not cut to ``...``."""
    text = cudafix("--help").stdout
    commands = text.split("\nCommands:\n", 1)[1].split("\n\n", 1)[0]
    assert "..." not in commands, commands
    assert "orphaning a soname." in " ".join(commands.split())
