"""The transaction log, read back: ``history``, ``show`` and ``gc`` (which deletes snapshots).

Reads typed journal records (:mod:`cudafix.tx.journal`); a damaged journal still yields an
entry that says so, so the log can always be listed.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType

from cudafix.env.statedir import StateDir, TxDir
from cudafix.model.commands import cudafix_line, venv_flags
from cudafix.model.errors import UsageError
from cudafix.model.transaction import DEFAULT_KEEP, HistoryEntry, TransactionDetail
from cudafix.tx import journal, trash
from cudafix.tx.journal import Record
from cudafix.tx.manifest import Manifest
from cudafix.tx.manifest import load as load_manifest
from cudafix.tx.steps import Event, RollbackBegin

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
    error = next((r.step.reason for r in records if isinstance(r.step, RollbackBegin)), None)
    if log.damaged:
        lines = ", ".join(map(str, log.damaged[:5]))
        error = f"journal {tx.journal} is damaged (line {lines})" + (f"; {error}" if error else "")
    changed = journal.changes(records)
    planned = (
        *(f"-{n}" for n in head.removed),
        *(f"+{n}" for n in head.installed),
    )
    return HistoryEntry(
        installed=head.installed,
        changed=(
            *(planned if changed is None else changed),
            *(f"~{n}" for n in head.reinstalled),
        ),
        undoes=head.undoes,
        txid=tx.txid,
        time=head.time,
        kind=head.kind,
        command=head.command,
        verdict=head.verdict,
        state=_state(records),
        removed=head.removed,
        reinstalled=head.reinstalled,
        kept=head.kept,
        error=error,
        snapshot=tx.snapshot.is_dir() and tx.manifest.is_file(),
    )


def history(prefix: Path) -> list[HistoryEntry]:
    """Every transaction on ``prefix``, oldest first."""
    state = StateDir(Path(prefix))
    return [entry(state.tx(t)) for t in state.transaction_ids()]


def loaded(tx: TxDir) -> Manifest | None:
    """The manifest, None when there is none; :class:`DamagedState` when it is damaged."""
    try:
        return load_manifest(tx)
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
        raise UsageError(f"no transaction {txid!r} in {prefix}", hint=_history_hint(prefix))
    return state.tx(txid)


def resolve(prefix: Path, given: str) -> str:
    """The full id ``given`` names: itself, a unique prefix of one (``20261203T1824``), or
    ``last``, the newest committed transaction whose snapshot is kept (what undo can undo)."""
    ids = StateDir(Path(prefix)).transaction_ids()
    if given == "last":
        undoable = [e.txid for e in history(Path(prefix)) if e.state == "committed" and e.snapshot]
        if not undoable:
            raise UsageError(
                f"no committed transaction with a snapshot in {prefix}", hint=_history_hint(prefix)
            )
        return undoable[-1]
    if given in ids:
        return given
    hits = [t for t in ids if t.startswith(given)] if given else []
    if len(hits) == 1:
        return hits[0]
    said = "is the start of" if hits else "names"
    raise UsageError(
        f"{given!r} {said} {len(hits) or 'no'} transaction(s) in {prefix}",
        context=hits[:10],
        hint=_history_hint(prefix) + ("  (give more of the id)" if hits else ""),
    )


def _history_hint(prefix: Path) -> str:
    return cudafix_line("history", target=venv_flags(prefix))


def gc(prefix: Path, keep: int = DEFAULT_KEEP, *, wait: bool = True) -> list[str]:
    """Delete snapshots of all but the newest ``keep`` committed transactions (journals
    stay), and those an interrupted deletion left; their ids. ``wait=False`` (after a
    commit): they leave the log at once and are deleted by a process nobody waits for."""
    state = StateDir(Path(prefix))
    left = [p.name.rpartition("-")[0] for p in trash.held(state)] if wait else []
    doomed = trash.discard(state, collectable(prefix, keep))
    if doomed or wait:
        trash.empty(state, wait=wait)
    return left + doomed


def freeable(prefix: Path, txids: Iterable[str]) -> int:
    """Bytes :func:`gc` frees deleting these snapshots and what the trash holds: files
    whose only link is there (a hard link to a file the environment still holds frees
    nothing)."""
    state = StateDir(Path(prefix))
    total = 0
    for top in [*(state.tx(txid).snapshot for txid in txids), *trash.held(state)]:
        for root, _dirs, files in os.walk(top):
            for name in files:
                with contextlib.suppress(OSError):
                    st = (Path(root) / name).lstat()
                    total += st.st_size if st.st_nlink == 1 else 0
    return total


def collectable(prefix: Path, keep: int = DEFAULT_KEEP) -> list[str]:
    """What :func:`gc` would delete, without deleting it."""
    entries = [e for e in history(Path(prefix)) if e.snapshot and e.state != "pending"]
    committed = [e for e in entries if e.state == "committed"]
    return [e.txid for e in entries if e.state != "committed"] + [
        e.txid for e in committed[: max(0, len(committed) - keep)]
    ]
