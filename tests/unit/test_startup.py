"""``cudafix --help`` stays cheap: the CLI's one lazy-import boundary (``cudafix.app``) keeps
pydantic, the planner and the transaction out of a process that only prints help."""

from __future__ import annotations

import subprocess
import sys

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


def test_the_boundary_serves_the_flows_and_the_refusal_check() -> None:
    from cudafix import app
    from cudafix.flows import read_plan
    from cudafix.plan.admit import refuse_unless_allowed

    assert app.read_plan is read_plan
    assert app.refuse_unless_allowed is refuse_unless_allowed
