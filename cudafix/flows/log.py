"""The transaction log: read (``history``, ``show``) and acted on (``undo``, ``recover``, ``gc``).

Reading the log never reads the environment's facts; undoing a transaction is itself a
transaction, judged against doctor's findings before it like any other change.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from cudafix.env.statedir import StateDir
from cudafix.env.target import TargetEnv
from cudafix.flows.probes import probe_set
from cudafix.flows.target import locate, open_target, read_facts, target_flags
from cudafix.model.args import FactArgs, RunArgs, TargetArgs
from cudafix.model.doctor import Finding, SayFindings, new_problems
from cudafix.model.names import DistName
from cudafix.model.plan import Options
from cudafix.model.reasons import NeedLost
from cudafix.model.transaction import (
    DEFAULT_LOCK_TIMEOUT,
    HistoryEntry,
    OnEvent,
    RecoveryReport,
    RunEvent,
    TransactionDetail,
    TransactionResult,
    UndoPreview,
    quiet,
)
from cudafix.plan.doctor import diagnose
from cudafix.plan.facts import Facts
from cudafix.plan.planner import Request, build_plan
from cudafix.tx import history as tx_history
from cudafix.tx import undo as tx_undo
from cudafix.tx.recovery import recover as tx_recover


def recover(
    target: TargetArgs, *, dry_run: bool, lock_timeout: float, on_event: OnEvent = quiet
) -> RecoveryReport:
    """Roll back every interrupted transaction (``dry_run``: say what would be done)."""
    prefix = locate(target).prefix
    return tx_recover(prefix, dry_run=dry_run, lock_timeout=lock_timeout, on_event=on_event)


def history(target: TargetArgs) -> tuple[Path, Sequence[HistoryEntry]]:
    """The target's prefix and its transactions, newest first (as ``git log`` lists)."""
    prefix = locate(target).prefix
    return prefix, tx_history.history(prefix)[::-1]


def show(target: TargetArgs, txid: str) -> TransactionDetail:
    """One transaction (its id, 6+ characters of its start or end, or ``last~N``): its
    journal and snapshot paths."""
    prefix = locate(target).prefix
    return tx_history.show(prefix, tx_history.resolve(prefix, txid))


def undo_preview(
    args: FactArgs,
    txid: str,
    on_event: OnEvent = quiet,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
) -> UndoPreview:
    """What undoing ``txid`` (its id, 6+ characters of its start or end, or ``last~N``)
    would do, and whether it would be refused; changes nothing in the environment. The
    state the undo restores is built beside it and diagnosed as the undo judges it, so a
    dry run predicts what the undo decides, and the undo decides on this same preview
    before it changes anything."""
    target = locate(args.target)
    full = tx_history.resolve(target.prefix, txid)
    preview = tx_undo.preview(target.prefix, full)
    if not preview.readable or preview.conflicts:
        return preview
    facts = read_facts(args, target, on_event)
    preview = _breaks(preview, facts, target.prefix)
    if preview.breaks:
        return preview
    if not os.access(StateDir(target.prefix).root, os.W_OK | os.X_OK):
        return preview  # another user's: the state it restores cannot be built to be judged
    flags = target_flags(args.target, target)
    before = diagnose(facts, flags).findings
    on_event(RunEvent("progress", "  reading the state the undo restores"))
    with tx_undo.restored_view(target.prefix, full, lock_timeout) as view:
        python = _in_view(target.python, target.prefix, view)
        report = diagnose(read_facts(args, TargetEnv(view, python)), flags)
    return replace(preview, brings_back=tuple(new_problems(before, report.findings)), after=report)


def _in_view(python: Path | None, prefix: Path, view: Path) -> Path | None:
    """The target's interpreter as the view holds it; None (the layout on disk stands in)
    for one outside the prefix, which would answer for the environment, not the view."""
    if python is None or not python.is_relative_to(prefix):
        return None
    return view / python.relative_to(prefix)


def _breaks(preview: UndoPreview, facts: Facts, prefix: Path) -> UndoPreview:
    """``preview`` with the needs its undo would leave unfound: what provides them is a
    distribution the transaction added (the undo takes it out) and is not put back."""
    taken = [c[1:].split(" ")[0] for c in preview.entry.changed if c.startswith("+")]
    names = tuple(n for c in taken if (n := DistName(c)) in facts.inventory.distributions)
    if not names:
        return preview
    plan = build_plan(facts, Request(names, (), Options(fetched=False)))
    # the undo puts back what was there before: a file the removal deletes, restored, stays
    back = preview.restores
    at = str(prefix).rstrip("/") + "/"
    kept = {(x.consumer, x.need) for x in plan.lost if x.resolved_before.removeprefix(at) in back}
    lost = tuple(
        r for r in plan.reasons if isinstance(r, NeedLost) and (r.subject, r.need) not in kept
    )
    return replace(preview, breaks=lost, target=plan.target)


def undo(
    args: FactArgs,
    txid: str,
    run: RunArgs,
    *,
    accept: bool = False,
    on_event: OnEvent = quiet,
    say: SayFindings,
    told: Sequence[Finding] = (),
) -> TransactionResult:
    """Restore the state before a committed transaction, as a new transaction: the imports
    its plan probed are probed again, and doctor's findings after are compared with before
    (an undo that puts back a broken state is rolled back and says so, unless ``accept``;
    ``say`` words the problems found; ``told``: those the user was shown already, by the
    preview, not said again)."""
    target, facts = open_target(args, mutating=True, on_event=on_event)
    flags = target_flags(args.target, target)
    before = diagnose(facts, flags).findings

    def judge() -> list[str]:
        """Errors block (an import the undo would break); warnings it brings back are said:
        they were there before the transaction being undone."""
        report = diagnose(read_facts(args, target), flags)
        found = new_problems(before, report.findings)
        warned = new_problems(told, [f for f in found if f.severity != "error"])
        for said in say(report, warned):
            on_event(RunEvent("warning", f"the undo brings back {said}"))
        return say(report, [f for f in found if f.severity == "error"])

    full = tx_history.resolve(target.prefix, txid)
    added = tx_history.entry(StateDir(target.prefix).tx(full)).installed
    dists = facts.inventory.distributions
    gone = [m for n in added if (d := dists.get(DistName(n))) is not None for m in d.top_level]
    return tx_undo.undo(
        target.prefix,
        full,
        gone=gone,
        probes=probe_set(run),
        judge=judge,
        accept=accept,
        lock_timeout=run.lock_timeout,
        command=run.command,
        on_event=on_event,
    )


def gc(
    target: TargetArgs, keep: int, lock_timeout: float = DEFAULT_LOCK_TIMEOUT
) -> tuple[Sequence[str], int, Sequence[Path]]:
    """Delete old snapshots, keeping the newest ``keep`` committed ones; with the bytes
    that freed (snapshot files no longer linked from the environment), and what the trash
    still holds after (a deletion that did not finish)."""
    return tx_history.collect(locate(target).prefix, keep, lock_timeout)
