"""The transaction log, read back: ``history``, ``show`` and ``gc`` (which deletes snapshots).

Reads typed journal records (:mod:`cudafix.tx.journal`); a damaged journal still yields an
entry that says so, so the log can always be listed.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

from cudafix.env.statedir import StateDir, TxDir
from cudafix.model.commands import cudafix_line, subcommand, venv_flags
from cudafix.model.errors import UsageError
from cudafix.model.transaction import DEFAULT_KEEP, HistoryEntry, TransactionDetail
from cudafix.tx import journal, trash
from cudafix.tx.journal import Record
from cudafix.tx.lock import acquired
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
    state = _state(records)
    changed = journal.changes(records)
    planned = (*(p for p in head.planned if not p.startswith("~")), *_plain_changes(head))
    done: tuple[str, ...] = ()
    if state == "committed":
        done = (
            *(planned if changed is None else changed),
            *(f"~{n}" for n in head.reinstalled),
        )
    return HistoryEntry(
        installed=head.installed,
        changed=done,
        planned=(*planned, *(f"~{n}" for n in head.reinstalled)),
        undoes=head.undoes,
        txid=tx.txid,
        time=head.time,
        kind=head.kind,
        name=subcommand(head.command) or head.kind,
        command=head.command,
        verdict=head.verdict,
        state=state,
        removed=head.removed,
        reinstalled=head.reinstalled,
        kept=head.kept,
        error=error,
        snapshot=tx.snapshot.is_dir() and tx.manifest.is_file(),
    )


def _plain_changes(head: journal.Head) -> tuple[str, ...]:
    """What a plan named, by name only, that its pins with versions do not say (a journal
    whose plan lists names without versions)."""
    said = {p[1:].split(" ")[0] for p in head.planned}
    return (
        *(f"-{n}" for n in head.removed if n not in said),
        *(f"+{n}" for n in head.installed if n not in said),
    )


def history(prefix: Path) -> list[HistoryEntry]:
    """Every transaction on ``prefix``, oldest first, each with its short id and the undo
    that undid it (if one did)."""
    state = StateDir(Path(prefix))
    return annotated([entry(state.tx(t)) for t in state.transaction_ids()])


def annotated(entries: Sequence[HistoryEntry]) -> list[HistoryEntry]:
    """``entries`` (oldest first) with their short ids and ``undone_by`` filled in."""
    shorts = short_ids([e.txid for e in entries])
    by = undone_by(entries)
    return [replace(e, short=shorts[e.txid], undone_by=by.get(e.txid)) for e in entries]


def _suffix(txid: str) -> str | None:
    """The random part of an id :func:`~cudafix.env.statedir.new_txid` wrote."""
    found = _SUFFIX.search(txid)
    return found[1] if found else None


_SUFFIX = re.compile(r"^\d{8}T\d{6}-\d{9}-([0-9a-f]{6,})$")

MIN_ID = 6
"""The fewest characters of an id (its start or its end) that name a transaction."""


def short_ids(txids: Sequence[str]) -> dict[str, str]:
    """Each id's short form: its random suffix (``e4298f``), or the whole id when another
    id has the same suffix or it is not an id cudafix wrote."""
    suffixes = Counter(s for t in txids if (s := _suffix(t)) is not None)
    return {t: s if (s := _suffix(t)) is not None and suffixes[s] == 1 else t for t in txids}


def undone_by(entries: Sequence[HistoryEntry]) -> dict[str, str]:
    """Which committed undo undid each transaction (``entries`` oldest first): an undo that
    was itself undone no longer counts, so what it undid counts as done again."""
    by: dict[str, str] = {}
    for e in entries:
        if e.kind == "undo" and e.state == "committed" and e.undoes:
            by[e.undoes] = e.txid
    memo: dict[str, bool] = {}

    def undone(txid: str) -> bool:
        # undone(t) = t in by and not undone(by[t]): ``by`` points at newer undos, so the
        # chain ends; where a damaged log loops, the loop's end counts as not undone
        chain: list[str] = []
        t = txid
        while t in by and t not in memo and t not in chain:
            chain.append(t)
            t = by[t]
        answer = memo.get(t, False) if t not in chain else False
        for c in reversed(chain):
            answer = not answer
            memo[c] = answer
        return memo.get(txid, False)

    return {t: u for t, u in by.items() if undone(t)}


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
    listed = next((e for e in history(Path(prefix)) if e.txid == txid), None)
    return TransactionDetail(entry=listed or entry(tx), journal=records, paths=paths)


def existing(prefix: Path, txid: str) -> TxDir:
    """The transaction ``txid`` of ``prefix``; :class:`UsageError` when there is none."""
    state = StateDir(prefix)
    if txid not in state.transaction_ids():
        raise UsageError(f"no transaction {txid!r} in {prefix}", hint=_history_hint(prefix))
    return state.tx(txid)


def resolve(prefix: Path, given: str) -> str:
    """The full id ``given`` names (:func:`pick`); :class:`UsageError` naming ``history``."""
    try:
        return pick(given, history(Path(prefix)))
    except UsageError as err:
        hint = _history_hint(prefix) + (f"  ({err.hint})" if err.hint else "")
        raise UsageError(f"{err.message} in {prefix}", context=err.context, hint=hint) from None


_LAST = re.compile(r"last(?:~(\d{1,6}))?")


def undoable(entries: Sequence[HistoryEntry]) -> list[HistoryEntry]:
    """What ``last``, ``last~1``, ... name, newest first: committed transactions that are not
    an undo and were not undone (``entries`` oldest first, as :func:`history` lists them)."""
    by = undone_by(entries)
    return [
        e for e in reversed(entries)
        if e.state == "committed" and e.kind != "undo" and e.txid not in by
    ]  # fmt: skip


def pick(given: str, entries: Sequence[HistoryEntry]) -> str:
    """The full id ``given`` names among ``entries`` (oldest first): the id itself; ``last``,
    ``last~N`` (the newest, or the N-th before it, of :func:`undoable`); or at least
    :data:`MIN_ID` characters of its start or its end (the short id ``history`` prints),
    when they name one transaction alone. :class:`UsageError` otherwise."""
    ids = [e.txid for e in entries]
    if given in ids:
        return given
    if given.startswith("last"):
        return _last(given, entries)
    if len(given) < MIN_ID:
        raise UsageError(
            f"{given!r} is not a transaction id: give at least {MIN_ID} characters of one, "
            "or `last`"
        )
    hits = [t for t in ids if t.startswith(given) or t.endswith(given)]
    if len(hits) == 1:
        return hits[0]
    if not hits:
        raise UsageError(f"no transaction {given!r}")
    raise UsageError(
        f"{given!r} names {len(hits)} transactions",
        context=hits[:10],
        hint="give more of the id",
    )


def _last(given: str, entries: Sequence[HistoryEntry]) -> str:
    steps = _LAST.fullmatch(given)
    if steps is None:
        raise UsageError(f"{given!r} is not a transaction: `last`, `last~1`, `last~2`, ...")
    back = int(steps[1] or 0)
    can = undoable(entries)
    if back < len(can):
        return can[back].txid
    if not can:
        raise UsageError("no committed transaction that is not an undo and was not undone")
    raise UsageError(
        f"{given!r} goes back further than the {len(can)} committed transaction(s) not "
        f"undone (`last` to `last~{len(can) - 1}`)"
    )


def _history_hint(prefix: Path) -> str:
    return cudafix_line("history", target=venv_flags(prefix))


def gc(prefix: Path, keep: int = DEFAULT_KEEP, *, wait: bool = True) -> list[str]:
    """Delete snapshots of all but the newest ``keep`` committed transactions (journals
    stay), and those an interrupted deletion left; the ids of those deleted. ``wait=False``
    (after a commit): they leave the log at once and are deleted by a process nobody waits
    for (so all the ids set aside are returned), what an interrupted hand-off left with them."""
    state = StateDir(Path(prefix))
    left = [trash.txid_of(p) for p in trash.held(state)]
    doomed = trash.discard(state, collectable(prefix, keep))
    if doomed or left or wait:
        trash.empty(state, wait=wait)
    if not wait:
        return doomed
    still = {trash.txid_of(p) for p in trash.held(state)}
    return [txid for txid in left + doomed if txid not in still]


def collect(prefix: Path, keep: int, lock_timeout: float) -> tuple[list[str], int, list[Path]]:
    """``cudafix gc``: :func:`gc` under cudafix's lock (never while a transaction, an undo
    reading an old snapshot included, is under way); the ids deleted, the bytes that freed,
    and what the trash still holds after (a deletion that did not finish)."""
    state = StateDir(Path(prefix))
    if not state.root.is_dir():
        return [], 0, []  # cudafix never changed this environment: nothing to write
    lock = acquired(prefix, state.lock, lock_timeout)
    try:
        sizes = {t: freeable(prefix, [t]) for t in collectable(prefix, keep)}
        left = trash.held(state)
        sizes.update({trash.txid_of(p): _freeable_under(p) for p in left})
        doomed = trash.discard(state, collectable(prefix, keep))
    finally:
        lock.release()  # what the trash holds is out of the log: emptying it needs no lock
    trash.empty(state, wait=True)
    still = {trash.txid_of(p) for p in trash.held(state)}
    gone = [t for t in [*map(trash.txid_of, left), *doomed] if t not in still]
    return gone, sum(sizes.get(t, 0) for t in gone), trash.held(state)


def freeable(prefix: Path, txids: Iterable[str]) -> int:
    """Bytes deleting these transactions' snapshots frees: files whose only link is there
    (a hard link to a file the environment still holds frees nothing)."""
    state = StateDir(Path(prefix))
    return sum(_freeable_under(state.tx(txid).snapshot) for txid in txids)


def _freeable_under(top: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(top):
        for name in files:
            with contextlib.suppress(OSError):
                st = (Path(root) / name).lstat()
                total += st.st_size if st.st_nlink == 1 else 0
    return total


def collectable(prefix: Path, keep: int = DEFAULT_KEEP) -> list[str]:
    """What :func:`gc` would delete, without deleting it: of the transactions
    :func:`history` lists with a snapshot and not pending, each journal's last record alone
    read (the state is all that is asked of it)."""
    state = StateDir(Path(prefix))
    entries: list[tuple[str, str]] = []
    for txid in state.transaction_ids():
        tx = state.tx(txid)
        try:
            final = journal.last(tx.journal)
        except PermissionError:
            continue  # listed as unreadable, without a snapshot
        said = _STATES.get(final.event, "pending") if final is not None else "pending"
        if said != "pending" and tx.snapshot.is_dir() and tx.manifest.is_file():
            entries.append((txid, said))
    committed = [txid for txid, said in entries if said == "committed"]
    return [txid for txid, said in entries if said != "committed"] + committed[
        : max(0, len(committed) - keep)
    ]
