"""Run the cudafix CLI as a user would: a separate process, no terminal on stdin."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import uv

from scenarios import BuiltScenario


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
    assert proc.stdout.strip(), proc.stderr
    return json.loads(proc.stdout)


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
    value = json.loads(proc.stdout)
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
