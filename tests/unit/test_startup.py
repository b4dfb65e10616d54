"""``cudafix --help`` stays cheap: the CLI's one lazy-import boundary (``cudafix.app``) keeps
pydantic, the planner and the transaction out of a process that only prints help."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from cudafix.env.memo.stats import RACY_NS

_HELP = """\
import sys
from cudafix.cli.main import main
try:
    main(["--help"])
except SystemExit:
    pass
print("\\n".join(sys.modules), file=sys.stderr)
"""


def test_help_imports_no_pydantic_planner_or_transaction() -> None:
    done = subprocess.run([sys.executable, "-c", _HELP], capture_output=True, text=True, check=True)
    loaded = set(done.stderr.split())
    assert "Usage:" in done.stdout
    assert "cudafix.cli.main" in loaded  # the probe saw the CLI's own imports
    heavy = {"pydantic", "cudafix.flows", "cudafix.model.plan", "cudafix.plan", "cudafix.tx"}
    assert not heavy & loaded, sorted(heavy & loaded)


_WARM = """\
import sys
from pathlib import Path
from cudafix import app
key = app.answer_key(("doctor",), {})
app.recall_answer(app.TargetArgs(venv=sys.argv[1]), key)
print("\\n".join(sys.modules), file=sys.stderr)
"""


def test_the_warm_path_imports_no_pydantic_packaging_or_flows(tmp_path: Path) -> None:
    """A warm ``doctor`` recalls its answer through ``cudafix.env.memo`` alone."""
    (tmp_path / "pyvenv.cfg").write_text("home = /usr/bin\n", encoding="utf-8")
    argv = [sys.executable, "-c", _WARM, str(tmp_path)]
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    loaded = set(done.stderr.split())
    assert "cudafix.env.memo.warm" in loaded  # the probe took the warm path
    heavy = {"pydantic", "packaging", "cudafix.flows", "cudafix.model.plan", "cudafix.tx"}
    # nor what only a miss needs: the interpreter asked (a subprocess), RECORDs, listings
    heavy |= {"subprocess", "cudafix.process", "cudafix.env.record", "cudafix.env.memo.treecache"}
    assert not heavy & loaded, sorted(heavy & loaded)


def test_the_boundary_serves_the_flows_and_the_refusal_check() -> None:
    from cudafix import app
    from cudafix.flows.planning import read_plan
    from cudafix.flows.running import run_command
    from cudafix.model.args import TargetArgs
    from cudafix.plan.admit import refuse_unless_allowed

    assert app.read_plan is read_plan
    assert app.run_command is run_command
    assert app.TargetArgs is TargetArgs
    assert app.refuse_unless_allowed is refuse_unless_allowed


_FRESH = """\
import sys
from pathlib import Path
from cudafix.gather import own_dependencies
from cudafix.tx.pending import unfinished
assert unfinished(Path(sys.argv[1])) == ([], [])
assert own_dependencies(Path(sys.argv[1])) == frozenset()
print("\\n".join(sys.modules), file=sys.stderr)
"""


def test_a_fresh_environment_is_read_without_the_journal_or_importlib_metadata(
    tmp_path: Path,
) -> None:
    """With no transaction to ask about, a ``doctor`` does not import the journal's step
    types; outside the target it never asks ``importlib.metadata`` for its own."""
    argv = [sys.executable, "-c", _FRESH, str(tmp_path)]
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    loaded = set(done.stderr.split())
    assert "cudafix.gather" in loaded and "cudafix.tx.pending" in loaded
    heavy = {"cudafix.tx.journal", "cudafix.tx.steps", "importlib.metadata"}
    assert not heavy & loaded, sorted(heavy & loaded)


_COMPUTED = """\
import sys
from cudafix.cli.main import main
try:
    main(["doctor", "--venv", sys.argv[1], "-q"])
except SystemExit:
    pass
print("\\n".join(sys.modules), file=sys.stderr)
"""


def test_a_doctor_computing_its_answer_imports_nothing_that_installs(tmp_path: Path) -> None:
    """A ``doctor`` that computes its answer (the interpreter already asked) reads what a
    staging install found as values, never the code that runs uv: each module it imports
    is a floor under every reading after a change (BENCHMARKS.md)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    time.sleep(RACY_NS / 1e9)  # older than the racy window: what the first run reads is kept
    first = [sys.executable, "-c", _COMPUTED, str(venv)]
    subprocess.run(first, capture_output=True, check=True)  # asks the interpreter, remembers
    (venv / ".cudafix" / "cache" / "answers.json").unlink()
    done = subprocess.run(first, capture_output=True, text=True, check=True)
    loaded = set(done.stderr.split())
    assert "Healthy" in done.stdout
    assert "cudafix.plan.doctor" in loaded  # it computed its answer
    heavy = {"cudafix.process", "cudafix.fetch.staging", "cudafix.fetch.backend", "ctypes"}
    assert not heavy & loaded, sorted(heavy & loaded)
