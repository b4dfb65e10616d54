"""Every ``--json`` output of the real CLI fits its shipped schema (``cudafix/data/schemas/``).

Each command runs as a process on a real venv; its stdout is validated against the schema
docs/json.md names for it (``tests.support.schemacheck``), failures against ``error``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import (
    cudafix,
    offline,
    output_schema,
    remove_pa,
    uv_uninstall,
)
from tests.support.schemacheck import validate_output
from tests.support.venvs import ScenarioFactory

pytestmark = pytest.mark.slow
"""Runs the CLI on real venvs: left out of ``make test-fast``."""


def _fits(proc: subprocess.CompletedProcess[str], name: str, code: int) -> Any:
    """``proc`` exited ``code`` and printed one JSON value that schema ``name`` describes
    (the schema :func:`tests.support.cli.as_json` picks for its command line too)."""
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    value = validate_output(proc.stdout, name)
    assert output_schema(proc.args, value) == name
    return value


def test_repair_undo_history_show_and_doctor_fit_their_schemas(scenario: ScenarioFactory) -> None:
    built = scenario("requires")
    uv_uninstall(built.python, "nvidia-cudnn-cu12")
    venv = ["--venv", str(built.venv)]
    sources = ["-f", str(built.wheelhouse), "--offline"]

    report = _fits(cudafix("doctor", *venv, "--json"), "doctor", 1)
    assert report["findings"]
    _fits(cudafix("repair", *venv, *sources, "--dry-run", "--json"), "plan", 0)
    done = _fits(cudafix("repair", *venv, *sources, "--yes", "--json"), "result", 0)
    assert done["state"] == "committed"
    again = _fits(cudafix("repair", *venv, *sources, "--yes", "--json"), "result", 0)
    assert again["state"] == "nothing-to-do"
    _fits(cudafix("doctor", *venv, "--json"), "doctor", 0)

    _fits(cudafix("history", *venv, "--json"), "history", 0)
    _fits(cudafix("show", "last", *venv, "--json"), "show", 0)
    preview = _fits(cudafix("undo", "last", *venv, "--dry-run", "--json"), "undo-preview", 3)
    assert preview["state"] == "refused"
    refused = _fits(cudafix("undo", "last", *venv, "--yes", "--json"), "error", 3)
    assert refused["state"] == "refused"
    undone = _fits(cudafix("undo", "last", *venv, "--yes", "--accept", "--json"), "undo", 0)
    assert undone["state"] == "committed"
    _fits(cudafix("history", *venv, "--json"), "history", 0)
    _fits(cudafix("show", str(undone["transaction"]), *venv, "--json"), "show", 0)
    _fits(cudafix("show", "nope", *venv, "--json"), "error", 2)


def test_remove_install_apply_fit_their_schemas(venv: tuple[Path, Path], tmp_path: Path) -> None:
    prefix, wheelhouse = venv
    refused = _fits(remove_pa(prefix, wheelhouse, "--dry-run", "--json"), "plan", 3)
    assert refused["verdict"] == "refused" and refused["alternatives"]
    refusal = _fits(remove_pa(prefix, wheelhouse, "--yes", "--json"), "error", 3)
    assert refusal["state"] == "refused"
    _fits(remove_pa(prefix, wheelhouse, "nope", "--dry-run", "--json"), "error", 2)
    _fits(
        cudafix("install", "pa", "--venv", prefix, *offline(wheelhouse), "--dry-run", "--json"),
        "plan",
        0,
    )

    out = tmp_path / "plan.json"
    made = remove_pa(prefix, wheelhouse, "--repair", "--dry-run", "--json", "--out", out)
    _fits(made, "plan", 0)
    validate_output(out.read_text(encoding="utf-8"), "plan")
    applied = _fits(
        cudafix("apply", out, "--venv", prefix, *offline(wheelhouse), "--yes", "--json"),
        "result",
        0,
    )
    assert applied["state"] == "committed" and applied["removed"] == ["pa"]
    again = cudafix("apply", out, "--venv", prefix, *offline(wheelhouse), "--yes", "--json")
    assert _fits(again, "error", 3)["state"] == "stale"


def test_run_fits_its_schema_committed_unchanged_and_rolled_back(
    venv: tuple[Path, Path],
) -> None:
    prefix, _ = venv
    run = ["run", "--venv", str(prefix), "--json", "--no-probe", "--"]
    committed = _fits(cudafix(*run, "touch", str(prefix / "made")), "run", 0)
    assert committed["state"] == "committed" and committed["transaction"]
    unchanged = _fits(cudafix(*run, "sh", "-c", "exit 5"), "run", 5)
    assert unchanged["state"] == "unchanged" and unchanged["transaction"] is None
    failed = _fits(cudafix(*run, "sh", "-c", 'touch "$VIRTUAL_ENV/x"; exit 3'), "error", 3)
    assert failed["state"] == "rolled-back"


@pytest.mark.parametrize("command", [["recover"], ["gc"], ["schema", "plan"]])
def test_commands_without_json_say_so_in_the_error_shape(
    command: list[str], venv: tuple[Path, Path]
) -> None:
    _fits(cudafix(*command, "--venv", venv[0], "--json"), "error", 2)
