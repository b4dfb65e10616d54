"""Finishing interrupted transactions: which are pending, rolling one back, ``recover``.

The snapshot and its manifest are the truth; the journal says how far a run got. A
transaction is discarded only when its journal proves the environment was never changed.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from cudafix.env.statedir import StateDir, TxDir, ensure_dir
from cudafix.model.errors import DamagedState, RollbackIncomplete
from cudafix.model.transaction import DEFAULT_LOCK_TIMEOUT, OnEvent, RecoveryReport, quiet
from cudafix.tx import journal, snapshot
from cudafix.tx.history import loaded
from cudafix.tx.journal import BEFORE_CHANGES, Event
from cudafix.tx.lock import hold, is_held


def lock_is_held(prefix: Path) -> bool:
    """Whether another process holds the environment's lock now: a run is in progress."""
    return is_held(StateDir(prefix).lock)


def pending_transactions(prefix: Path) -> list[str]:
    """Ids of transactions that were interrupted and need ``cudafix recover``.

    A transaction directory with no journal record and no snapshot never started (its
    first journal write failed): it holds nothing and blocks nothing.
    """
    state = StateDir(Path(prefix))
    return [t for t in state.transaction_ids() if _is_pending(state.tx(t))]


def _is_pending(tx: TxDir) -> bool:
    records = journal.read(tx.journal)
    if not records:
        return tx.snapshot.exists() or tx.manifest.exists()
    return not journal.is_done(records)


@dataclass(frozen=True)
class RollbackOutcome:
    """What a rollback restored, and what it could not."""

    left: list[str]
    """Paths that still differ from the snapshot, each with the reason."""
    entries: int
    journal: list[str]
    """Journal records that could not be written (the rollback went on without them)."""


def untouched(tx: TxDir, manifest: snapshot.Manifest | None, prefix: Path) -> bool:
    """Whether the environment provably was never changed: an intact journal that stops
    before the first change, and (with a manifest) every snapshotted path as it was."""
    log = journal.load(tx.journal)
    if not log.intact or any(e not in BEFORE_CHANGES for e in journal.events(log.records)):
        return False
    if manifest is None:
        return True
    return all(snapshot.mismatch(prefix, e) is None for e in manifest.entries)


def rollback(
    prefix: Path, tx: TxDir, reason: str, manifest: snapshot.Manifest | None
) -> RollbackOutcome:
    """Restore the snapshot (idempotent, restartable), whatever the journal can record.

    The snapshot and its manifest are the truth: they are discarded only when the journal
    proves the environment was never changed; a missing manifest the journal says was
    written is refused (:class:`DamagedState`), never guessed at.
    """
    began = journal.note(tx.journal, Event.ROLLBACK_BEGIN, {"reason": reason})
    unwritten = [began] if began else []
    if untouched(tx, manifest, prefix):
        if journal.note(tx.journal, Event.ABORTED, {"error": reason}) is None:
            shutil.rmtree(tx.snapshot, ignore_errors=True)
        else:  # the journal cannot say so, and nothing changed: keep nothing that blocks
            shutil.rmtree(tx.root, ignore_errors=True)
        return RollbackOutcome(left=[], entries=0, journal=[])
    if manifest is None:
        raise DamagedState(
            f"transaction {tx.txid} changed the environment, but its snapshot manifest "
            f"{tx.manifest} is missing; nothing was restored",
            hint=f"keep {tx.root} for inspection; cudafix will not guess what it held",
        )
    restoring = journal.note(tx.journal, Event.RESTORE_BEGIN, {"entries": len(manifest.entries)})
    unwritten += [restoring] if restoring else []
    left = snapshot.restore(prefix, tx, manifest)
    done = Event.ROLLBACK_INCOMPLETE if left else Event.ROLLED_BACK
    m = journal.note(tx.journal, done, {"problems": left} if left else None)
    if m is None and not left:
        shutil.rmtree(tx.snapshot, ignore_errors=True)
    return RollbackOutcome(
        left=left, entries=len(manifest.entries), journal=[*unwritten, *([m] if m else [])]
    )


def _describe(prefix: Path, tx: TxDir) -> str:
    records = journal.read(tx.journal)
    last = records[-1].event if records else "start"
    try:
        manifest = loaded(tx)
    except DamagedState as err:
        return f"{tx.txid}: interrupted at '{last}'; cannot restore: {err.message}"
    if untouched(tx, manifest, prefix):
        return f"{tx.txid}: interrupted at '{last}' before anything changed; discard it"
    if manifest is None:
        return f"{tx.txid}: interrupted at '{last}'; cannot restore: its manifest is missing"
    entries = len(manifest.entries)
    return f"{tx.txid}: interrupted at '{last}'; restore {entries} paths from its snapshot"


def recover(
    prefix: Path,
    *,
    dry_run: bool = False,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    on_event: OnEvent = quiet,
) -> RecoveryReport:
    """Roll back every interrupted transaction (``dry_run``: only say what would be done)."""
    prefix = Path(prefix)
    state = StateDir(prefix)
    pending = tuple(pending_transactions(prefix))
    actions = tuple(_describe(prefix, state.tx(t)) for t in pending)
    report = RecoveryReport(prefix=prefix, dry_run=dry_run, transactions=pending, actions=actions)
    if dry_run or not pending:
        return report
    ensure_dir(state.transactions)
    with hold(prefix, state.lock, lock_timeout, on_event):
        for txid in pending_transactions(prefix):
            _finish(prefix, state.tx(txid))
            on_event(f"rolled back transaction {txid}")
    return report


def _finish(prefix: Path, tx: TxDir) -> None:
    """Roll back one interrupted transaction; :class:`RollbackIncomplete` when it cannot."""
    outcome = rollback(prefix, tx, "recover after an interruption", loaded(tx))
    if outcome.left or outcome.journal:
        raise RollbackIncomplete(
            f"could not finish transaction {tx.txid}: "
            + (f"{len(outcome.left)} path(s) differ" if outcome.left else "journal full"),
            context=[*outcome.left, *outcome.journal],
            hint=f"fix the cause (space, permissions), then run cudafix recover --venv {prefix}",
        )
