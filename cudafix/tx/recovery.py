"""Finishing interrupted transactions: which are pending, rolling one back, ``recover``.

The snapshot and its manifest are the truth; the journal says how far a run got. A
transaction is discarded only when its journal proves the environment was never changed.
"""

from __future__ import annotations

import os
import shlex
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path

from cudafix.env.statedir import StateDir, TxDir, ensure_dir
from cudafix.model.commands import cudafix_line, venv_flags
from cudafix.model.errors import DamagedState, LockedError, RollbackIncomplete
from cudafix.model.transaction import (
    DEFAULT_LOCK_TIMEOUT,
    OnEvent,
    RecoveryReport,
    RunEvent,
    quiet,
)
from cudafix.process import group_members
from cudafix.tx import journal, restore, steps, trash
from cudafix.tx.history import loaded
from cudafix.tx.journal import BEFORE_CHANGES
from cudafix.tx.lock import hold
from cudafix.tx.manifest import Manifest
from cudafix.tx.pending import lock_is_held, pending_transactions, unreadable_transactions
from cudafix.tx.steps import Event


@dataclass(frozen=True)
class RollbackOutcome:
    """What a rollback restored, and what it could not."""

    left: list[str]
    """Paths that still differ from the snapshot, each with the reason."""
    entries: int
    journal: list[str]
    """Journal records that could not be written (the rollback went on without them)."""
    in_place: list[str] = field(default_factory=list)
    """Files rewritten in place: left as they are (their snapshot changed with them)."""
    changed: int = 0
    """Paths that differed from the snapshot: the only ones the rollback restored."""


def _progress(on_event: OnEvent) -> restore.Progress:
    def told(done: int, total: int) -> None:
        on_event(RunEvent("progress", f"  rolling back: {done} of {total} changed paths"))

    return told


def untouched(tx: TxDir, manifest: Manifest | None, prefix: Path) -> bool:
    """Whether the environment provably was never changed: an intact journal that stops
    before the first change, and (with a manifest) every snapshotted path as it was."""
    log = journal.load(tx.journal)
    if not log.intact or any(e not in BEFORE_CHANGES for e in journal.events(log.records)):
        return False
    if manifest is None:
        return True
    return all(restore.mismatch(prefix, e) is None for e in manifest.entries)


def rollback(
    prefix: Path,
    tx: TxDir,
    reason: str,
    manifest: Manifest | None,
    on_event: OnEvent = quiet,
) -> RollbackOutcome:
    """Restore the snapshot (idempotent, restartable), whatever the journal can record;
    only the paths that differ from it are touched, and ``on_event`` hears how far it got.

    The snapshot and its manifest are the truth: they are discarded only when the journal
    proves the environment was never changed; a missing manifest the journal says was
    written is refused (:class:`DamagedState`), never guessed at.
    """
    began = journal.note(tx.journal, steps.RollbackBegin(reason=reason))
    unwritten = [began] if began else []
    if untouched(tx, manifest, prefix):
        if journal.note(tx.journal, steps.Aborted(error=reason)) is None:
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
    manifest, in_place = _written_in_place_first(prefix, tx, manifest)
    begin = steps.RestoreBegin(entries=len(manifest.entries), in_place=tuple(in_place))
    restoring = journal.note(tx.journal, begin)
    unwritten += [restoring] if restoring else []
    restored = restore.restore(prefix, tx, manifest, _progress(on_event))
    left = restored.left
    done = steps.RollbackIncomplete(problems=tuple(left)) if left else steps.RolledBack()
    m = journal.note(tx.journal, done)
    if m is None and not left:
        shutil.rmtree(tx.snapshot, ignore_errors=True)
    return RollbackOutcome(
        left=left,
        entries=len(manifest.entries),
        journal=[*unwritten, *([m] if m else [])],
        changed=restored.changed,
        in_place=in_place,
    )


def _written_in_place_first(
    prefix: Path, tx: TxDir, manifest: Manifest
) -> tuple[Manifest, list[str]]:
    """A ``run`` rolled back by ``recover``: files its command rewrote in place (their
    hard-link snapshot changed with them) are left out and named, never called restored.
    Checked only before a first restore, which itself links files back (and moves ctime)."""
    records = journal.read(tx.journal)
    if journal.head(records).kind != "run" or Event.RESTORE_BEGIN in journal.events(records):
        return manifest, []
    found = restore.written_in_place(prefix, manifest)
    return (restore.forget(tx, manifest, found) if found else manifest), found


def _describe(prefix: Path, tx: TxDir) -> str:
    records = journal.read(tx.journal)
    last = records[-1].event if records else "start"
    if lock_is_held(prefix):
        return f"{tx.txid}: running now (another cudafix run holds {prefix}); nothing to recover"
    if alive := live_processes(tx):
        return f"{tx.txid}: interrupted, but its command is still running ({_processes(alive)})"
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
    hidden = unreadable_transactions(prefix)
    actions += tuple(f"{t}: this user cannot read it; its owner can recover it" for t in hidden)
    aside = tuple(trash.txid_of(p) for p in trash.held(state))
    report = RecoveryReport(prefix, dry_run, pending, actions, trash=aside)
    if dry_run:
        return report
    if pending:
        _roll_back_pending(prefix, lock_timeout, on_event)
    if not aside:
        return report
    trash.empty(state, wait=True)  # a hand-off to the trash that was interrupted
    still = {trash.txid_of(p) for p in trash.held(state)}
    done = tuple(t for t in aside if t not in still)
    return replace(report, trash=done, trash_left=tuple(t for t in aside if t in still))


def _roll_back_pending(prefix: Path, lock_timeout: float, on_event: OnEvent) -> None:
    state = StateDir(prefix)
    ensure_dir(state.transactions)
    with hold(prefix, state.lock, lock_timeout, on_event):
        for txid in pending_transactions(prefix):
            _require_no_live_processes(prefix, state.tx(txid))
        for txid in pending_transactions(prefix):
            outcome = _finish(prefix, state.tx(txid), on_event)
            on_event(RunEvent("info", f"rolled back transaction {txid}"))
            for path in outcome.in_place:
                on_event(
                    RunEvent(
                        "warning", f"{path} was rewritten in place by the command; it stays so"
                    )
                )


def live_processes(tx: TxDir) -> list[tuple[int, str]]:
    """Processes of the transaction's commands still running (this boot): while one runs,
    rolling back would race it, so ``recover`` refuses."""
    boot = boot_id()
    groups = {
        r.step.pgid
        for r in journal.read(tx.journal)
        if isinstance(r.step, steps.Process) and r.step.pgid is not None
        if r.step.boot == boot
    }
    return [p for g in sorted(groups) for p in group_members(g)]


def boot_id() -> str:
    """This boot's id: a process group recorded before a reboot is certainly gone."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _processes(alive: list[tuple[int, str]]) -> str:
    return ", ".join(f"pid {pid}: {cmd[:80]}" for pid, cmd in alive[:5])


def _require_no_live_processes(prefix: Path, tx: TxDir) -> None:
    if alive := live_processes(tx):
        group = os.getpgid(alive[0][0])
        raise LockedError(
            f"transaction {tx.txid}: its command is still running ({_processes(alive)}); "
            "nothing was rolled back",
            context=[f"process group {group}"],
            hint=f"let it finish or stop it (kill -- -{group}), then "
            f"cudafix recover --venv {shlex.quote(str(prefix))}",
        )


def _finish(prefix: Path, tx: TxDir, on_event: OnEvent) -> RollbackOutcome:
    """Roll back one interrupted transaction; :class:`RollbackIncomplete` when it cannot."""
    outcome = rollback(prefix, tx, "recover after an interruption", loaded(tx), on_event)
    if outcome.left or outcome.journal:
        raise RollbackIncomplete(
            f"could not finish transaction {tx.txid}: "
            + (f"{len(outcome.left)} path(s) differ" if outcome.left else "journal full"),
            context=[*outcome.left, *outcome.journal],
            hint="fix the cause (space, permissions), then run "
            + cudafix_line("recover", target=venv_flags(prefix)),
        )
    return outcome
