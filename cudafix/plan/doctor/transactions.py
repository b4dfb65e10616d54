"""Doctor's finding on the environment's own transaction log: a run that never finished.

A run killed mid-transaction (a power cut, SIGKILL, an OOM kill) leaves the environment
half-changed, and every other finding may describe that half; until ``cudafix recover``
finishes or rolls it back, nothing else doctor says is the environment's real state.

A pure function of :class:`~cudafix.plan.facts.Facts`: the flow that opened the target
found the unfinished transactions (``Facts.pending``).
"""

from __future__ import annotations

from collections.abc import Iterable

from cudafix.model.doctor import Finding, PendingTransaction
from cudafix.plan.doctor.common import Commands
from cudafix.plan.facts import Facts


def pending(facts: Facts, cmd: Commands) -> Iterable[Finding]:
    """One error naming every unfinished transaction: ``recover`` is the fix of all."""
    if facts.pending:
        yield Finding(
            kind="pending-transaction",
            severity="error",
            facts=PendingTransaction(txids=list(facts.pending)),
            command=cmd.argv("recover"),
        )
