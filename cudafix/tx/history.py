"""The transaction log, read back: ``history``, ``show`` and ``gc`` (which deletes snapshots).

Reads typed journal records (:mod:`cudafix.tx.journal`); a damaged journal still yields an
entry that says so, so the log can always be listed.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from cudafix.env.statedir import StateDir, TxDir
from cudafix.model.errors import UsageError
from cudafix.model.transaction import DEFAULT_KEEP, HistoryEntry, TransactionDetail
from cudafix.tx import journal, snapshot
from cudafix.tx.journal import Event, Record

_STATES: Mapping[Event, str] = MappingProxyType(
    {Event.COMMIT: "committed", Event.ROLLED_BACK: "rolled-back", Event.ABORTED: "aborted"}
)
"""A transaction's state, by the last step of its journal (anything else: pending)."""


def _state(records: list[Record]) -> str:
    return _STATES.get(records[-1].event, "pending") if records else "pending"


def entry(tx: TxDir) -> HistoryEntry:
    """One transaction for ``history``; a damaged or unreadable journal still yields an
    entry (it says so)."""
    try:
        log = journal.load(tx.journal)
    except PermissionError as exc:
        return HistoryEntry(
            txid=tx.txid, time=0.0, kind="?", command=(), verdict="", state="unreadable",
            removed=(), reinstalled=(), kept=(), snapshot=False,
            error=f"this user cannot read it ({exc.strerror})",
        )  # fmt: skip
    records = log.records
    head = journal.head(records)
    error = next((r.data.get("reason") for r in records if r.event is Event.ROLLBACK_BEGIN), None)
    if log.damaged:
        lines = ", ".join(map(str, log.damaged[:5]))
        error = f"journal {tx.journal} is damaged (line {lines})" + (f"; {error}" if error else "")
    return HistoryEntry(
        txid=tx.txid,
        time=head.time,
        kind=head.kind,
        command=head.command,
        verdict=head.verdict,
        state=_state(records),
        removed=head.removed,
        reinstalled=head.reinstalled,
        kept=head.kept,
        error=None if error is None else str(error),
        snapshot=tx.snapshot.is_dir() and tx.manifest.is_file(),
    )


def history(prefix: Path) -> list[HistoryEntry]:
    """Every transaction on ``prefix``, oldest first."""
    state = StateDir(Path(prefix))
    return [entry(state.tx(t)) for t in state.transaction_ids()]


def loaded(tx: TxDir) -> snapshot.Manifest | None:
    """The manifest, None when there is none; :class:`DamagedState` when it is damaged."""
    try:
        return snapshot.load(tx)
    except FileNotFoundError:
        return None


def show(prefix: Path, txid: str) -> TransactionDetail:
    """One transaction in full."""
    tx = existing(Path(prefix), txid)
    manifest = loaded(tx)
    paths = tuple(e.path for e in manifest.entries) if manifest else ()
    records = tuple(r.encode() for r in journal.read(tx.journal))
    return TransactionDetail(entry=entry(tx), journal=records, paths=paths)


def existing(prefix: Path, txid: str) -> TxDir:
    """The transaction ``txid`` of ``prefix``; :class:`UsageError` when there is none."""
    state = StateDir(prefix)
    if txid not in state.transaction_ids():
        raise UsageError(
            f"no transaction {txid!r} in {prefix}", hint=f"cudafix history --venv {prefix}"
        )
    return state.tx(txid)


def gc(prefix: Path, keep: int = DEFAULT_KEEP) -> list[str]:
    """Delete snapshots of all but the newest ``keep`` committed transactions (journals stay)."""
    entries = [e for e in history(Path(prefix)) if e.snapshot and e.state != "pending"]
    committed = [e for e in entries if e.state == "committed"]
    doomed = [e for e in entries if e.state != "committed"] + committed[
        : max(0, len(committed) - keep)
    ]
    state = StateDir(Path(prefix))
    for e in doomed:
        shutil.rmtree(state.tx(e.txid).snapshot, ignore_errors=True)
    return [e.txid for e in doomed]
