"""Which transactions are unfinished: what every command asks before it reads or changes.

Apart from :mod:`cudafix.tx.recovery`, which finishes them, so that asking costs a read of
each journal's last record and no more: a ``doctor`` or a ``run`` imports neither the
rollback nor the history to learn that nothing is pending.
"""

from __future__ import annotations

from pathlib import Path

from cudafix.env.statedir import StateDir, TxDir
from cudafix.tx.lock import is_held


def lock_is_held(prefix: Path) -> bool:
    """Whether another process holds the environment's lock now: a run is in progress."""
    return is_held(StateDir(prefix).lock)


def pending_transactions(prefix: Path) -> list[str]:
    """Ids of transactions that were interrupted and need ``cudafix recover``.

    A transaction directory with no journal record and no snapshot never started (its
    first journal write failed): it holds nothing and blocks nothing.
    """
    return unfinished(prefix)[0]


def unreadable_transactions(prefix: Path) -> list[str]:
    """Ids of transactions this user cannot read (another user's, made private): whether
    they are finished is unknown, so only their owner may change the environment."""
    return unfinished(prefix)[1]


def unfinished(prefix: Path) -> tuple[list[str], list[str]]:
    """(:func:`pending_transactions`, :func:`unreadable_transactions`), each journal read
    once: every command asks both before it reads or changes anything."""
    state = StateDir(Path(prefix))
    pending, unreadable = [], []
    for txid in state.transaction_ids():
        verdict = _is_pending(state.tx(txid))
        if verdict is None:
            unreadable.append(txid)
        elif verdict:
            pending.append(txid)
    return pending, unreadable


def _is_pending(tx: TxDir) -> bool | None:
    """Whether ``tx`` needs ``recover``; None when this user cannot read it."""
    try:
        return _needs_recovery(tx)
    except PermissionError:
        return None


def _needs_recovery(tx: TxDir) -> bool:
    from cudafix.tx import journal  # its step types cost a fresh environment's doctor 15 ms

    final = journal.last(tx.journal)  # only the last record decides, not the plan before it
    if final is None:
        return tx.snapshot.exists() or tx.manifest.exists()
    return final.event not in journal.DONE_EVENTS
