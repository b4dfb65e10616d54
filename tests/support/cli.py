"""Run the cudafix CLI as a user would: a separate process, no terminal on stdin."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import uv

from cudafix.cli.schemas import ERROR_STATES
from scenarios import BuiltScenario
from tests.support.schemacheck import validate_output


def cudafix(
    *args: str | Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "cudafix", *map(str, args)]
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
        timeout=300,
    )


def dlopen_table(built: BuiltScenario, where: Path) -> list[str]:
    """``--dlopen-table FILE`` for the scenario's own dlopen edges (empty when it has none)."""
    if not built.spec.dlopen:
        return []
    lines = ["[dlopen]"] + [
        f'"{k}" = [{", ".join(json.dumps(v) for v in vals)}]'
        for k, vals in built.spec.dlopen.items()
    ]
    where.write_text("\n".join(lines) + "\n")
    return ["--dlopen-table", str(where)]


def offline(wheelhouse: Path) -> list[str]:
    """The options that keep a command on a local wheelhouse: no index, no network."""
    return ["--offline", "--find-links", str(wheelhouse)]


def repair_offline(
    built: BuiltScenario, *args: str | Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``cudafix repair --yes`` on a scenario venv, offline from its wheelhouse."""
    flags = ("--venv", built.venv, "--yes", *offline(built.wheelhouse))
    return cudafix("repair", *flags, *args, env=env)


def remove_pa(
    prefix: Path, wheelhouse: Path, *args: str | Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``cudafix remove pa`` on a ``shared_pair`` venv, offline from its wheelhouse."""
    return cudafix("remove", "pa", "--venv", prefix, *offline(wheelhouse), *args, env=env)


def repair_pa(
    prefix: Path, wheelhouse: Path, *args: str | Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``remove pa --repair --yes``: the transaction that rewrites pb's shared file."""
    return remove_pa(prefix, wheelhouse, "--repair", "--yes", *args, env=env)


def as_json(proc: subprocess.CompletedProcess[str]) -> Any:
    """The one JSON value a ``--json`` command printed, checked against its shipped schema
    (``cudafix/data/schemas/``; :func:`output_schema` picks which)."""
    assert proc.stdout.strip(), proc.stderr
    value = json.loads(proc.stdout)
    name = output_schema(proc.args, value)
    if name is not None:
        validate_output(proc.stdout, name)
    return value


_PLANNING = ("remove", "uninstall", "repair", "install", "apply")


def output_schema(argv: object, value: object) -> str | None:
    """The schema that describes what ``argv`` (a :func:`cudafix` command line) printed:
    ``error`` for a failure, else the command's (None: not a cudafix ``--json`` command)."""
    if not isinstance(argv, list) or argv[1:3] != ["-m", "cudafix"]:
        return None
    args = [str(a) for a in argv[3:]]
    args = args[: args.index("--")] if "--" in args else args
    if isinstance(value, dict) and "error" in value and value.get("state") in ERROR_STATES:
        return "error"
    command = next(
        (a for a in args if a in {*_PLANNING, "doctor", "run", "undo", "history", "show"}), None
    )
    dry = "--dry-run" in args
    nothing = isinstance(value, dict) and value.get("state") == "nothing-to-do"
    if command in _PLANNING:
        return "plan" if dry and not nothing else "result"
    if command == "undo":
        return "undo-preview" if dry else "undo"
    return command


def assert_one_line_error(proc: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    """Bad input: the documented exit code, an ``error:`` line naming the problem, no traceback."""
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1, proc.stderr  # progress lines may precede it
    for word in words:
        assert word in proc.stderr, (word, proc.stderr)


def one_json_error(proc: subprocess.CompletedProcess[str], code: int) -> dict[str, object]:
    """A failure under ``--json``: stdout is exactly one object carrying the exit code."""
    value = validate_output(proc.stdout, "error")
    assert isinstance(value, dict) and value["exit_code"] == code, proc.stdout
    return value


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def uv_uninstall(python: Path, name: str) -> None:
    """Change an environment behind cudafix's back, as a user with plain uv would."""
    argv = [uv.find_uv_bin(), "pip", "uninstall", "--python", str(python), name]
    subprocess.run(argv, check=True, capture_output=True)


def save_seed_plan(built: BuiltScenario, out: Path) -> Path:
    """``apply examples/seed-cleanup.toml --dry-run --out`` on ``built``: a plan file."""
    made = cudafix(
        "apply", EXAMPLES / "seed-cleanup.toml", "--venv", built.venv, "--dry-run",
        "--offline", "--find-links", built.wheelhouse, "--out", out,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    return out
