"""A ``run`` whose command changed nothing is judged against doctor's remembered findings,
and pays for nothing else: neither the reader of the environment, nor doctor, nor pydantic
(the report's and the plan's models) is imported."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from cudafix.env.memo.before import KEPT_PATHS
from scenarios import BuiltScenario
from tests.support.cli import cudafix
from tests.support.venvs import settle

pytestmark = pytest.mark.slow
"""Builds a real venv and runs the CLI: left out of ``make test-fast``."""

_RUN = """\
import sys
from pathlib import Path
from cudafix.cli.main import main
try:
    main(["run", "-v", "--venv", sys.argv[1], "--", "python", "-c", "pass"])
except SystemExit as done:
    Path(sys.argv[2]).write_text("\\n".join([str(done.code), *sys.modules]))
"""


@pytest.mark.parametrize("uv_lock", [True, False], ids=["uv-lock", "no-uv-lock-yet"])
def test_a_run_that_changed_nothing_imports_no_reader_and_no_pydantic(
    scenario: Callable[..., BuiltScenario], tmp_path: Path, uv_lock: bool
) -> None:
    """Also in a venv uv never touched (``python -m venv`` and pip): taking uv's lock
    creates its ``.lock`` there, which moves the prefix's mtime, and is no change doctor's
    reading depends on."""
    built = scenario("clean")
    if not uv_lock:
        (built.venv / ".lock").unlink(missing_ok=True)
    assert cudafix("doctor", "--venv", built.venv).returncode == 0
    settle()
    assert cudafix("doctor", "--venv", built.venv).returncode == 0  # its findings remembered
    out = tmp_path / "modules"
    argv = [sys.executable, "-c", _RUN, str(built.venv), str(out)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    code, *loaded = out.read_text().split("\n")
    assert code == "0", done.stderr
    assert "judged against its findings" in done.stderr  # the remembered findings were used
    assert "cudafix.tx.guard" in loaded  # the probe saw the run's own imports
    heavy = {"pydantic", "cudafix.gather", "cudafix.plan.doctor", "cudafix.model.doctor"}
    assert not heavy & set(loaded), sorted(heavy & set(loaded))
    assert (built.venv / ".lock").exists()  # uv's lock was taken, and its file made


def test_findings_that_name_too_many_paths_are_not_kept_for_run(
    scenario: Callable[..., BuiltScenario],
) -> None:
    """A RECORD whose rows outnumber :data:`KEPT_PATHS` and whose files are gone: doctor's
    findings would be a memo as large as the RECORD, so none is kept and ``run`` reads the
    environment itself, and judges the same."""
    built = scenario("clean")
    record = next(built.venv.glob("lib/python3*/site-packages/*.dist-info/RECORD"))
    rows = "".join(f"gone/m{i}.py,,\n" for i in range(KEPT_PATHS + 1))
    record.write_text(record.read_text(encoding="utf-8") + rows, encoding="utf-8")
    for _ in range(2):
        assert cudafix("doctor", "--venv", built.venv).returncode == 1
        settle()  # the first doctor's answer is remembered, as its findings would be
    done = cudafix("run", "-v", "--venv", built.venv, "--", "python", "-c", "pass")
    assert done.returncode == 0, done.stderr
    assert "judged against its findings" not in done.stderr
    assert "reading distributions and ELF objects" in done.stderr, done.stderr
    assert "nothing changed: transaction" in done.stderr, done.stderr
