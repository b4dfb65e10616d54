"""Usage errors under --json: one JSON object and exit 2, with no venv at all."""

from __future__ import annotations

import pytest

from tests.support.cli import cudafix, one_json_error


@pytest.mark.parametrize(
    "argv",
    [["doctor", "--json", "--bogus"], ["history", "--json", "--venv"], ["doctor", "--json", "x"]],
)
def test_usage_errors_under_json_are_one_object(argv: list[str]) -> None:
    proc = cudafix(*argv)
    assert proc.returncode == 2
    assert one_json_error(proc, 2)["state"] == "error"
