"""Every journal record as a typed value, and the one codec that writes and reads them.

A record's JSON keys are its fields' names (``from_`` is written ``from``), so journals
written before these types existed read the same. Reading is lenient: a field of the wrong
JSON type takes its default, and a key no field names is dropped, so a damaged or
hand-edited journal still yields a record and ``history`` can always list the transaction.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar

from cudafix.model.probe import ProbeResult


class Event(str, enum.Enum):
    """Every step a journal records, in the order a transaction takes them.

    A str enum: records stay plain JSON strings and compare equal to them, so journals
    written by older runs read the same.
    """

    PLAN = "plan"
    SNAPSHOT_BEGIN = "snapshot-begin"
    SNAPSHOT_DONE = "snapshot-done"
    ABORTED = "aborted"
    BACKEND = "backend"
    SANITIZE_RECORD = "sanitize-record"
    DETACH_BEGIN = "detach-begin"
    UNINSTALL_BEGIN = "uninstall-begin"
    REINSTALL_BEGIN = "reinstall-begin"
    KEEP_BEGIN = "keep-begin"
    VERIFY_BEGIN = "verify-begin"
    INSTALL_BEGIN = "install-begin"
    PROBE_BEGIN = "probe-begin"
    PROBE_DONE = "probe-done"
    ROLLBACK_BEGIN = "rollback-begin"
    RESTORE_BEGIN = "restore-begin"
    ROLLBACK_INCOMPLETE = "rollback-incomplete"
    ROLLED_BACK = "rolled-back"
    COMMIT_BEGIN = "commit-begin"
    COMMIT = "commit"
    UNDO_BEGIN = "undo-begin"
    RUN_BEGIN = "run-begin"
    PROCESS = "process"
    """A command of the transaction started: its process group (``recover`` waits for it)."""
    STATE_REBUILT = "state-rebuilt"
    """A command removed cudafix's state; it was written again from files held open."""

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Step:
    """What one journal record carries; each subclass is one :class:`Event`."""

    event: ClassVar[Event]


@dataclass(frozen=True)
class Opening(Step):
    """The first record: what the transaction is (``history`` reads it as a ``Head``)."""

    event = Event.PLAN
    kind: str = "apply"
    """``apply``, ``run`` or ``undo``."""
    command: tuple[str, ...] = ()
    plan: dict[str, Any] | None = None
    """An ``apply``'s plan, as :class:`~cudafix.model.plan.Plan` writes its JSON. Kept as
    JSON, not read into a ``Plan``: a journal outlives the plan schema it was written with,
    and ``history`` reads only the fields every version has (``Head``)."""
    argv: tuple[str, ...] | None = None
    """A ``run``'s command."""
    undo: str | None = None
    """The transaction an ``undo`` restores the state before."""


@dataclass(frozen=True)
class SnapshotBegin(Step):
    event = Event.SNAPSHOT_BEGIN
    paths: tuple[str, ...] = ()


@dataclass(frozen=True)
class SnapshotDone(Step):
    event = Event.SNAPSHOT_DONE
    entries: int = 0


@dataclass(frozen=True)
class Aborted(Step):
    """Nothing was changed; ``error`` says why the transaction stopped."""

    event = Event.ABORTED
    error: str = ""


@dataclass(frozen=True)
class BackendCall(Step):
    event = Event.BACKEND
    step: str = ""
    argv: tuple[str, ...] = ()
    returncode: int = 0
    stdout: str = ""
    stderr: str = ""


@dataclass(frozen=True)
class SanitizeRecord(Step):
    """RECORD rows of ``dist`` stripped before the backend reads it."""

    event = Event.SANITIZE_RECORD
    dist: str = ""
    entries: tuple[str, ...] = ()


@dataclass(frozen=True)
class DetachBegin(Step):
    event = Event.DETACH_BEGIN
    paths: tuple[str, ...] = ()


@dataclass(frozen=True)
class UninstallBegin(Step):
    event = Event.UNINSTALL_BEGIN
    names: tuple[str, ...] = ()


@dataclass(frozen=True)
class ReinstallBegin(Step):
    event = Event.REINSTALL_BEGIN
    pins: tuple[str, ...] = ()


@dataclass(frozen=True)
class KeepBegin(Step):
    event = Event.KEEP_BEGIN
    paths: tuple[str, ...] = ()


@dataclass(frozen=True)
class VerifyBegin(Step):
    event = Event.VERIFY_BEGIN


@dataclass(frozen=True)
class InstallBegin(Step):
    event = Event.INSTALL_BEGIN
    pins: tuple[str, ...] = ()


@dataclass(frozen=True)
class ProbeBegin(Step):
    event = Event.PROBE_BEGIN


@dataclass(frozen=True)
class ProbeDone(Step):
    event = Event.PROBE_DONE
    results: tuple[ProbeResult, ...] = ()


@dataclass(frozen=True)
class RollbackBegin(Step):
    event = Event.ROLLBACK_BEGIN
    reason: str | None = None
    """Why the transaction rolls back (``history`` shows it)."""


@dataclass(frozen=True)
class RestoreBegin(Step):
    event = Event.RESTORE_BEGIN
    entries: int = 0
    in_place: tuple[str, ...] = ()
    """Files a command rewrote in place: left out of the restore."""


@dataclass(frozen=True)
class RollbackIncomplete(Step):
    event = Event.ROLLBACK_INCOMPLETE
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class RolledBack(Step):
    event = Event.ROLLED_BACK


@dataclass(frozen=True)
class CommitBegin(Step):
    event = Event.COMMIT_BEGIN


@dataclass(frozen=True)
class Commit(Step):
    event = Event.COMMIT
    changed: tuple[str, ...] | None = None
    """What changed (``-name``, ``+name``); None in journals written before it was recorded."""


@dataclass(frozen=True)
class UndoBegin(Step):
    event = Event.UNDO_BEGIN
    from_: str = ""
    """The transaction undone (written ``from``)."""


@dataclass(frozen=True)
class RunBegin(Step):
    event = Event.RUN_BEGIN
    argv: tuple[str, ...] = ()


@dataclass(frozen=True)
class Process(Step):
    event = Event.PROCESS
    pgid: int | None = None
    boot: str = ""


@dataclass(frozen=True)
class StateRebuilt(Step):
    event = Event.STATE_REBUILT
    missed: int = 0
    """Files the command unlinked before cudafix could hold them open."""
    unrestorable: tuple[str, ...] = ()


STEPS: Mapping[Event, type[Step]] = MappingProxyType(
    {cls.event: cls for cls in Step.__subclasses__()}
)
"""The record type of each event."""


@functools.cache
def _hints(event: Event) -> dict[str, Any]:
    """The field types of ``event``'s step, resolved on first use: resolving all of them
    at import cost every command that only asks whether a transaction is pending."""
    return typing.get_type_hints(STEPS[event])


def encode(step: Step) -> dict[str, Any]:
    """A step's JSON payload (without ``event`` and ``time``); None fields are left out."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(step):
        value = getattr(step, f.name)
        if value is not None:
            out[f.name.rstrip("_")] = _plain(value)
    return out


def decode(event: Event, data: Mapping[str, Any]) -> Step:
    """The step ``event`` records, from its payload; junk fields take their defaults."""
    cls, hints = STEPS[event], _hints(event)
    given = {
        f.name: _READERS[hints[f.name]](data[key])
        for f in dataclasses.fields(cls)
        if (key := f.name.rstrip("_")) in data
    }
    return cls(**{k: v for k, v in given.items() if v is not _JUNK})


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, ProbeResult):
        return dict(sorted(value.__dict__.items()))  # as the line on disk has it
    return value


_JUNK = object()
"""A field whose JSON is of the wrong type: it takes its default."""


def _strings(value: Any) -> Any:
    if not isinstance(value, list):
        return _JUNK
    return tuple(str(v) for v in value if isinstance(v, str | int | float))


def _probe_results(value: Any) -> Any:
    if not isinstance(value, list):
        return _JUNK
    names = {f.name for f in dataclasses.fields(ProbeResult)}
    return tuple(
        ProbeResult(**{k: v for k, v in r.items() if k in names})
        for r in value
        if isinstance(r, dict) and {"label", "ok", "error"} <= r.keys()
    )


_READERS: Mapping[Any, Callable[[Any], Any]] = {
    str: lambda v: str(v) if isinstance(v, str | int | float) else _JUNK,
    int: lambda v: v if isinstance(v, int) and not isinstance(v, bool) else _JUNK,
    int | None: lambda v: v if isinstance(v, int) and not isinstance(v, bool) else _JUNK,
    str | None: lambda v: v if isinstance(v, str) else _JUNK,
    tuple[str, ...]: _strings,
    tuple[str, ...] | None: _strings,
    dict[str, Any] | None: lambda v: v if isinstance(v, dict) else _JUNK,
    tuple[ProbeResult, ...]: _probe_results,
}
