"""uv's and pip's habits, and the small words, through the CLI as a user types them.

``uninstall`` for ``remove``; ``-p/--python`` and ``--venv`` each taking a venv directory or
its interpreter; ``.venv`` found in a parent directory; ``UV_PYTHON``; ``remove
NAME==VERSION``; ``-V``; ``--color`` and ``NO_COLOR``; declining the prompt; commands
printed quoted so that they run as printed from a venv whose path has a space.
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from cudafix import __version__
from tests.support.cli import as_json, assert_one_line_error, cudafix
from tests.support.tty import cudafix_tty
from tests.support.venvs import ScenarioFactory

pytestmark = pytest.mark.slow
"""Runs the CLI on real venvs: left out of ``make test-fast``."""

ESC = "\x1b["
NO_ENV = {"VIRTUAL_ENV": "", "UV_PYTHON": "", "NO_COLOR": ""}


def _in(cwd: Path, *args: str | Path, env: dict[str, str] | None = None) -> str:
    """Where doctor says the environment is, run from ``cwd`` with no target flags."""
    import os
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "cudafix", "doctor", "--json", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        env={
            **os.environ,
            **NO_ENV,
            "PYTHONPATH": str(Path(__file__).parents[2]),
            **(env or {}),
        },
        timeout=300,
    )
    assert done.stdout, done.stderr
    return str(as_json(done)["prefix"])


def _installed(venv: Path, stem: str) -> bool:
    return any(venv.glob(f"lib/python3*/site-packages/{stem}-*.dist-info"))


def test_uninstall_is_remove(scenario: ScenarioFactory) -> None:
    built = scenario("clean")
    done = cudafix("uninstall", "nvidia-nvtx-cu12", "--venv", built.venv, "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "- nvidia-nvtx-cu12" in done.stdout and "Verdict: PASS" in done.stdout


def test_targets_are_chosen_like_uv(scenario: ScenarioFactory, tmp_path: Path) -> None:
    built = scenario("clean")
    venv = str(built.venv)
    python = built.venv / "bin" / "python"
    assert _in(tmp_path, "-p", built.venv) == venv
    assert _in(tmp_path, "--python", built.venv) == venv
    assert _in(tmp_path, "--venv", python) == venv
    assert _in(tmp_path, env={"UV_PYTHON": str(python)}) == venv
    project = tmp_path / "project"
    deep = project / "src" / "pkg"
    deep.mkdir(parents=True)
    (project / ".venv").symlink_to(built.venv)
    assert _in(deep) == venv  # the .venv link, resolved to its real path


def test_remove_name_equals_version(scenario: ScenarioFactory) -> None:
    built = scenario("clean")
    ok = cudafix("remove", "nvidia-nvtx-cu12==12.8.90", "--venv", built.venv, "--dry-run")
    assert ok.returncode == 0, ok.stderr
    assert "- nvidia-nvtx-cu12 12.8.90" in ok.stdout
    wrong = cudafix("remove", "nvidia-nvtx-cu12==1.0", "--venv", built.venv, "--dry-run")
    assert_one_line_error(wrong, 2, "nvidia-nvtx-cu12==1.0 is not installed", "12.8.90")


def test_version_and_completion() -> None:
    for flag in ("-V", "--version"):
        done = cudafix(flag)
        assert done.returncode == 0 and __version__ in done.stdout
    script = cudafix(env={"_CUDAFIX_COMPLETE": "bash_source"})
    assert script.returncode == 0 and "complete " in script.stdout
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    assert "_CUDAFIX_COMPLETE=bash_source" in readme


def test_colour_follows_the_terminal_color_and_no_color(scenario: ScenarioFactory) -> None:
    built = scenario("clean")
    args = ("doctor", "--venv", built.venv)
    assert ESC in cudafix_tty(*args, env=NO_ENV).output
    assert ESC not in cudafix_tty(*args, env={"NO_COLOR": "1"}).output
    assert ESC not in cudafix_tty(*args, "--color", "never", env=NO_ENV).output
    assert ESC not in cudafix(*args).stdout
    assert ESC in cudafix(*args, "--color", "always").stdout
    assert ESC in cudafix("--color", "always", *args).stdout


def test_declining_the_prompt_changes_nothing_and_is_not_an_error(
    scenario: ScenarioFactory,
) -> None:
    built = scenario("clean")
    done = cudafix_tty("remove", "nvidia-nvtx-cu12", "--venv", built.venv, answer="n", env=NO_ENV)
    assert done.returncode == 1, done.output
    assert "Nothing changed." in done.output
    assert "error" not in done.output.lower() and "aborted" not in done.output
    assert _installed(built.venv, "nvidia_nvtx_cu12")


def test_printed_undo_runs_as_printed_from_a_path_with_a_space(
    scenario: ScenarioFactory, tmp_path: Path
) -> None:
    built = scenario("clean")
    spaced = tmp_path / "my env"
    built.venv.rename(spaced)
    done = cudafix("remove", "nvidia-nvtx-cu12", "--venv", spaced, "--yes", "--no-probe")
    assert done.returncode == 0, done.stdout + done.stderr
    [line] = [ln for ln in done.stdout.splitlines() if ln.startswith("Undo with: ")]
    words = shlex.split(line[len("Undo with: ") :])
    assert words[-2:] == ["--venv", str(spaced)]
    undone = cudafix(*words[1:], "--yes")
    assert undone.returncode == 0, undone.stdout + undone.stderr
    assert _installed(spaced, "nvidia_nvtx_cu12")


def test_install_pass_line_counts_installs(scenario: ScenarioFactory) -> None:
    built = scenario("clean")
    cudafix("remove", "nvidia-nvtx-cu12", "--venv", built.venv, "--yes", "--no-probe")
    done = cudafix(
        "install", "nvidia-nvtx-cu12==12.8.90", "--venv", built.venv, "--dry-run",
        "--offline", "--find-links", built.wheelhouse,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "(0 removed, 0 reinstalled, 1 installed," in done.stdout


def test_every_option_says_what_it_does() -> None:
    said = {
        "--backend": "installer",
        "--probe-timeout": "probe may run",
        "--lock-timeout": "wait",
        "--keep": "snapshot",
    }
    for command in ("remove", "repair", "install", "apply", "gc", "undo", "recover"):
        text = cudafix(command, "--help").stdout
        blocks = text.split("\n  -")
        for option, words in said.items():
            for block in blocks:
                if block.lstrip("-").startswith(option.lstrip("-") + " "):
                    assert words in " ".join(block.split()), (command, block)


def test_a_refusal_for_a_broken_requirement_names_the_flag_that_allows_it(
    scenario: ScenarioFactory,
) -> None:
    built = scenario("requires")
    refused = cudafix("remove", "nvidia-cuda-nvrtc-cu12", "--venv", built.venv, "--dry-run")
    assert refused.returncode == 3, refused.stdout + refused.stderr
    assert "torch requires nvidia-cuda-nvrtc-cu12" in refused.stdout
    kept = cudafix(  # it also co-owns nvidia/__init__.py: kept, the requirement is all left
        "remove", "nvidia-cuda-nvrtc-cu12", "--venv", built.venv, "--dry-run", "--keep-shared"
    )
    assert "add --allow-broken-requirements" in kept.stdout
    allowed = cudafix(
        "remove", "nvidia-cuda-nvrtc-cu12", "--venv", built.venv, "--dry-run",
        "--allow-broken-requirements", "--keep-shared",
    )  # fmt: skip
    assert allowed.returncode == 0, allowed.stdout
