"""What a transaction returns: committed runs, recoveries and the transaction log, as values.

Pure values (no I/O): ``tx/`` builds them, ``app`` hands them on, the CLI renders them.
The defaults live here too, so the CLI can show them without importing ``tx/``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from cudafix.model.doctor import DoctorReport, Finding
    from cudafix.model.reasons import NeedLost
    from cudafix.process import Completed

DEFAULT_KEEP = 5
"""Committed snapshots ``gc`` keeps unless told otherwise."""

DEFAULT_LOCK_TIMEOUT = 60.0
"""Seconds a run waits for the environment's locks (cudafix's, then uv's)."""

DEFAULT_PROBE_TIMEOUT = 60.0
"""Seconds each probe may run before it counts as failed (``--probe-timeout``)."""


@dataclass(frozen=True)
class TransactionResult:
    """A committed transaction."""

    txid: str
    prefix: Path
    removed: tuple[str, ...]
    reinstalled: tuple[str, ...]
    kept: tuple[str, ...]
    probes: tuple[str, ...]
    """Labels of the probes that passed."""
    snapshot_entries: int
    installed: tuple[str, ...] = ()
    """``name==version`` pins the plan's install step put in."""


@dataclass(frozen=True)
class RecoveryReport:
    """What ``recover`` did (or, with ``dry_run``, would do)."""

    prefix: Path
    dry_run: bool
    transactions: tuple[str, ...]
    actions: tuple[str, ...]
    trash: tuple[str, ...] = ()
    """Transactions whose snapshot an interrupted deletion left set aside, deleted now (or,
    with ``dry_run``, to delete)."""
    trash_left: tuple[str, ...] = ()
    """Of those, the ones still set aside after (a deletion that did not finish)."""


@dataclass(frozen=True)
class HistoryEntry:
    """One transaction as ``cudafix history`` lists it."""

    txid: str
    time: float
    kind: str
    """``apply``, ``run`` or ``undo``."""
    command: tuple[str, ...]
    verdict: str
    state: str
    """``committed``, ``rolled-back``, ``aborted`` or ``pending``."""
    removed: tuple[str, ...]
    reinstalled: tuple[str, ...]
    kept: tuple[str, ...]
    error: str | None
    snapshot: bool
    """Its snapshot is still there (so it can be undone)."""
    installed: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    """What it changed: ``-name version`` taken out, ``+name version`` put in, ``name old ->
    new``, ``~name`` reinstalled at the same version; empty for one not committed."""
    undoes: str | None = None
    """For an ``undo``: the transaction whose state before it restored."""
    name: str = ""
    """The command that made it, as the user typed it: ``repair``, ``remove``, ``install``,
    ``apply``, ``run`` or ``undo`` (its ``kind`` for a command line that names none)."""
    short: str = ""
    """The shortest id that names it in its log (its random suffix; the full id when
    another transaction shares that suffix)."""
    planned: tuple[str, ...] = ()
    """What its plan meant to change (``-name version``, ``+name version``, ``~name``): for
    one rolled back, what did not happen."""
    undone_by: str | None = None
    """The committed undo that restored the state before it (and was not undone itself)."""


@dataclass(frozen=True)
class UndoPreview:
    """What ``cudafix undo`` would do, shown before it asks (and by ``undo --dry-run``)."""

    entry: HistoryEntry
    """The transaction to undo."""
    paths: int
    """Paths it restores (what that transaction touched)."""
    conflicts: tuple[str, ...]
    """Paths changed since its commit: the undo is refused while there are any."""
    readable: bool = True
    """False: this user cannot read the snapshot (another user's), so nothing was checked;
    only a user who can write the environment can undo it."""
    restores: frozenset[str] = frozenset()
    """The paths (relative to the prefix) the undo puts back as files: what existed before
    that transaction. A library among them is there after the undo."""
    breaks: tuple[NeedLost, ...] = ()
    """Needs the undo would leave unfound (it takes out what provides them): the undo is
    refused while there are any, unless accepted."""
    target: Any = None
    """The :class:`~cudafix.model.plan.Target` ``breaks`` were judged in (their paths are
    shown relative to it); not typed here, as the plan's model imports this module."""
    brings_back: tuple[Finding, ...] = ()
    """doctor's problems in the state the undo restores that it does not find now (judged
    as the undo judges itself, on that state built beside the environment): an error
    refuses the undo, unless accepted; a warning was there before the transaction undone."""
    after: DoctorReport | None = None
    """doctor's report on that state (``brings_back`` is worded against it: its prefix is
    where the state was built, its paths are shown relative to that); None when it was not
    read (the undo is refused before, or this user cannot write the environment, where that
    state is built)."""

    @property
    def errors(self) -> tuple[Finding, ...]:
        """The errors among :attr:`brings_back`."""
        return tuple(f for f in self.brings_back if f.severity == "error")

    @property
    def blocked(self) -> bool:
        """Whether the undo is refused unless accepted: needs it leaves unfound, or errors
        it brings back."""
        return bool(self.breaks or self.errors)


@dataclass(frozen=True)
class TransactionDetail:
    """``cudafix show``: one transaction's entry, journal and snapshot manifest."""

    entry: HistoryEntry
    journal: tuple[dict[str, Any], ...]
    """Every journal record, as written (plain JSON)."""
    paths: tuple[str, ...]


@dataclass(frozen=True)
class GuardedRun:
    """A command that ran inside a transaction: committed, or dropped as it changed nothing."""

    txid: str
    prefix: Path
    completed: Completed
    findings: tuple[str, ...]
    """Problems the command introduced, accepted with ``accept``."""
    probes: tuple[str, ...]
    in_place: tuple[str, ...]
    """Files the command rewrote in place (the snapshot could not have restored them)."""
    committed: bool = True
    """False: the command changed nothing in the environment (bytecode aside), so nothing
    was committed and no transaction was kept (``txid`` names none)."""
    changed: tuple[str, ...] = ()
    """What it changed, as ``history`` says it (``+six 1.17.0``, ``-x 1``, ``x 1 -> 2``)."""


def exit_status(returncode: int) -> int:
    """The status a shell reports for a process: killed by signal N, 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


RunEventKind = Literal["progress", "info", "note", "warning", "probe-note"]
"""What an event is: ``progress`` only says how far a run got (the CLI shows it on a
terminal, or under ``-v``); the others are always shown: ``info`` a plain statement (a
rollback, a wait), ``note`` and ``warning`` what the user should know, ``probe-note`` why a
passing probe is not a clean pass."""


@dataclass(frozen=True)
class RunEvent:
    """Something a run reports while it goes; the CLI decides how it is shown."""

    kind: RunEventKind
    text: str


OnEvent = Callable[[RunEvent], None]
"""Where a run reports progress and warnings (the CLI sends them to stderr)."""


def quiet(_event: RunEvent) -> None:
    """The default ``on_event``: say nothing."""
