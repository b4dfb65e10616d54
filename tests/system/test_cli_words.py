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
    script = 'touch "$VIRTUAL_ENV/made"; echo step 2 done >&2; exit 3'
    failed = cudafix("run", "--venv", built.venv, "--", "sh", "-c", script)
    assert failed.returncode == 3, failed.stderr  # the command's own status, as uv run
    assert (
        "error: the command failed (exit status 3; last stderr line: step 2 done); rolled back"
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


def _alternatives(stdout: str) -> list[str]:
    """The flags of the alternatives a refusal offers, in the order printed."""
    return re.findall(r"^  cudafix remove .* (--repair|--keep-shared) ", stdout, re.M)


@pytest.mark.parametrize("local", [False, True], ids=["index", "wheelhouse"])
def test_a_refusal_offers_doctors_fix_first_and_says_what_each_leaves_behind(
    scenario: ScenarioFactory, local: bool
) -> None:
    """``leftover``: a cu13 torch with cu12's cuDNN installed over cu13's; doctor's fix is
    removing cu12 with ``--repair``; ``--keep-shared`` would leave cu12's libraries."""
    built = scenario("leftover")
    sources = offline(built.wheelhouse) if local else []
    doctor = cudafix("doctor", "--venv", built.venv)
    assert "Next: cudafix remove 'nvidia-*-cu12' --repair" in doctor.stdout, doctor.stdout
    refused = cudafix("remove", "nvidia-*-cu12", "--venv", built.venv, *sources, "--dry-run")
    assert refused.returncode == 3, refused.stderr
    assert _alternatives(refused.stdout) == ["--repair", "--keep-shared"], refused.stdout
    comments = re.findall(r"^      # (.*)$", refused.stdout, re.M)
    assert len(comments) == 2 and all("; leaves " in c for c in comments), comments
    assert comments[0].endswith("leaves none of the removed files"), comments
    assert comments[1].endswith(
        "leaves nvidia-cudnn-cu12's bytes in 8 of them (nvidia/cudnn/lib/libcudnn.so.9, ...)"
    ), comments


def test_kept_paths_are_folded_and_identical_bytes_never_called_different(
    scenario: ScenarioFactory,
) -> None:
    """cu12's and cu13's cuDNN wheels ship the same ``nvidia/__init__.py`` and
    ``nvidia/cudnn/__init__.py`` bytes (both RECORDs list one hash), and 8 libraries that
    differ: one warning for the 8, none for the 2, every path spelt as doctor spells it."""
    built = scenario("leftover")
    kept = cudafix("remove", "nvidia-*-cu12", "--venv", built.venv, "--keep-shared", "--dry-run")
    assert kept.returncode == 0, kept.stderr
    warnings = [ln for ln in kept.stdout.splitlines() if ln.startswith("  ! ")]
    assert len(warnings) == 1, kept.stdout
    assert warnings[0].startswith(
        "  ! kept 8 paths hold nvidia-cudnn-cu12's bytes, not nvidia-cudnn-cu13's: "
        "nvidia/cudnn/lib/libcudnn.so.9, "
    ), warnings
    assert "__init__.py" not in warnings[0] and warnings[0].endswith(
        "and 4 more; add --repair to reinstall their own"
    )
    assert (
        "nvidia/__init__.py, nvidia/cudnn/__init__.py\n    claimed by nvidia-cudnn-cu12 and "
        "nvidia-cudnn-cu13; identical bytes in nvidia-cudnn-cu12, nvidia-cudnn-cu13; kept"
        in kept.stdout
    )
    assert "site-packages" not in kept.stdout, kept.stdout
    doctor = cudafix("doctor", "--venv", built.venv, "-v")
    assert "nvidia/__init__.py: identical bytes in" in doctor.stdout, doctor.stdout
