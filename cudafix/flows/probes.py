"""The probes a flow runs after its change, built in one place from what the user asked.

Applying a plan, running a command and undoing a transaction all probe the environment
before they commit: the automatic probes (a plan's, or the modules a command changed)
unless ``--no-probe``, then the user's ``--probe`` code and ``--probe-cmd`` commands, each
with ``--probe-timeout``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from cudafix.model.args import RunArgs
from cudafix.model.probe import ProbeSpec
from cudafix.plan.probes import probe_spec

if TYPE_CHECKING:
    from cudafix.model.plan import Plan


def probe_set(run: RunArgs, *, plan: Plan | None = None, modules: Sequence[str] = ()) -> ProbeSpec:
    """What to probe: ``plan``'s probes (the planner's and its own), else ``modules`` to
    import (none under ``--no-probe``), and the user's code and commands either way."""
    if plan is not None:
        return probe_spec(
            plan,
            auto=run.auto_probes,
            code=run.probe_code,
            commands=run.probe_commands,
            timeout=run.probe_timeout,
        )
    return ProbeSpec(
        modules=tuple(modules) if run.auto_probes else (),
        code=run.probe_code,
        commands=run.probe_commands,
        timeout=run.probe_timeout,
    )
