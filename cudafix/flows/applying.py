"""Applying an approved plan: one transaction, committed, or rolled back with the reason.

The plan was made (and checked) by :mod:`.planning`; here it is handed to the transaction
with its probes (:mod:`.probes`), the planner's predictions to verify against, and the
live check that the environment is still the one it was planned on.
"""

from __future__ import annotations

import functools

from cudafix.flows.probes import probe_set
from cudafix.gather import live_differences
from cudafix.model.args import RunArgs
from cudafix.model.plan import Plan
from cudafix.model.transaction import OnEvent, TransactionResult, quiet
from cudafix.tx.apply import run_transaction
from cudafix.tx.verify import prediction_mismatches


def execute(plan: Plan, run: RunArgs, on_event: OnEvent = quiet) -> TransactionResult:
    """Apply an approved plan as one transaction: commit, or roll back and raise."""
    return run_transaction(
        plan,
        probes=probe_set(run, plan=plan),
        lock_timeout=run.lock_timeout,
        verify=functools.partial(prediction_mismatches, plan),
        force=run.force,
        command=run.command,
        on_event=on_event,
        precondition=functools.partial(live_differences, plan),
    )
