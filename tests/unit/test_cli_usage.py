"""Usage errors under --json: one JSON object and exit 2, with no venv at all."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.support.cli import cudafix


@pytest.mark.parametrize(
    "argv",
    [["doctor", "--json", "--bogus"], ["history", "--json", "--venv"], ["doctor", "--json", "x"]],
)
def test_usage_errors_under_json_are_one_object(argv: list[str]) -> None:
    proc = cudafix(*argv)
    assert proc.returncode == 2
    assert _one_json(proc, 2)["state"] == "error"


def _one_json(proc: subprocess.CompletedProcess[str], code: int) -> dict[str, object]:
    value = json.loads(proc.stdout)
    assert isinstance(value, dict) and value["exit_code"] == code, proc.stdout
    return value
