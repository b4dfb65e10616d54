"""A reader that goes away (``cudafix ... | head -1``) ends cudafix's output, never its
transaction: what was begun commits or rolls back as it would have, and nothing is left
for ``recover``."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import pytest

from cudafix.tx.pending import pending_transactions
from scenarios import BuiltScenario

pytestmark = pytest.mark.slow
"""Builds a real venv and runs the CLI: left out of ``make test-fast``."""


def _closed_after_the_snapshot(*args: str) -> tuple[int, str]:
    """Run cudafix with stdout and stderr on one pipe, read until its snapshot is taken,
    then close the pipe: what it says after (the command, the verdict, a rollback) has no
    reader."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "cudafix", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    said = ""
    while line := proc.stdout.readline().decode():
        said += line
        if line.startswith("snapshot: "):
            break
    proc.stdout.close()
    return proc.wait(timeout=300), said


@pytest.mark.parametrize(
    ("command", "exit_code"),
    [
        (["run", "-v", "--", "python", "-c", "import time; time.sleep(1); raise SystemExit(3)"], 3),
        (["run", "-v", "--", "python", "-c", "import time; time.sleep(1)"], 0),
    ],
    ids=["fails", "changes-nothing"],
)
def test_a_closed_pipe_leaves_no_unfinished_transaction(
    scenario: Callable[..., BuiltScenario], command: list[str], exit_code: int
) -> None:
    built = scenario("clean")
    code, said = _closed_after_the_snapshot(*command[:2], "--venv", str(built.venv), *command[2:])
    assert "snapshot: " in said, said
    assert pending_transactions(built.venv) == [], (code, said)
    assert code == exit_code  # the command's own verdict, as with a reader
    assert subprocess.run([str(built.python), "-c", "import torch"], check=False).returncode == 0
