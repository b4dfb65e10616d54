"""Append-only, fsync'd JSON-lines journal: each step is written *before* it happens.

Each line is one typed step (:mod:`cudafix.tx.steps`, whose codec writes and reads it).

pip's ``StashedUninstallPathSet`` keeps its move list in memory, so a crash leaks state;
here every step is durable first, so ``recover`` can always finish (roll back) a run.

Its test fault hooks (:mod:`cudafix.faults`) fire as each step is journaled.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudafix.env.statedir import fsync_dir, open_file, read_bytes, write_durably
from cudafix.faults import crash_point, fail_point
from cudafix.tx import steps
from cudafix.tx.steps import Commit, Event, Opening, Step

DONE_EVENTS = frozenset({Event.COMMIT, Event.ROLLED_BACK, Event.ABORTED})
"""A transaction whose journal ends in one of these needs nothing more."""

BEFORE_CHANGES = frozenset(
    {Event.PLAN, Event.SNAPSHOT_BEGIN, Event.SNAPSHOT_DONE, Event.ROLLBACK_BEGIN}
)
"""Journal events that precede any change to the environment."""


@dataclass(frozen=True)
class Record:
    """One journal line, decoded: the step it records and when it was written."""

    step: Step
    time: float = 0.0

    @property
    def event(self) -> Event:
        return self.step.event

    def encode(self) -> dict[str, Any]:
        """The record as it is written (and as ``cudafix show`` prints it)."""
        payload = steps.encode(self.step)
        return dict(sorted({**payload, "event": str(self.event), "time": self.time}.items()))


@dataclass(frozen=True)
class Head:
    """The first record (``plan``): what the transaction was, as ``history`` lists it.

    Read leniently: a damaged or hand-edited journal still yields a head (junk becomes
    empty values), so ``history`` can always list the transaction.
    """

    kind: str = "apply"
    """``apply``, ``run`` or ``undo``."""
    time: float = 0.0
    command: tuple[str, ...] = ()
    verdict: str = ""
    removed: tuple[str, ...] = ()
    reinstalled: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()
    installed: tuple[str, ...] = ()
    undoes: str | None = None
    """The transaction an ``undo`` restores the state before."""
    probe_modules: tuple[str, ...] = ()
    """What the plan imported after applying (an undo imports them again)."""
    planned: tuple[str, ...] = ()
    """What the plan meant to change: ``-name version``, ``+name version``, ``~name``."""
    argv: tuple[str, ...] = ()
    """A ``run``'s command."""


def head(records: Sequence[Record]) -> Head:
    """The typed first record; defaults when the journal does not start with one."""
    if not records or not isinstance(opening := records[0].step, Opening):
        return Head()
    plan: Mapping[str, Any] = opening.plan or {}
    return Head(
        kind=opening.kind,
        time=records[0].time,
        command=opening.command,
        verdict=str(plan.get("verdict", "pass" if opening.kind == "undo" else "")),
        removed=_strings(plan.get("remove"), "name"),
        reinstalled=_strings(plan.get("reinstall"), "name"),
        kept=_strings(plan.get("kept_paths")),
        installed=_strings(plan.get("install"), "name"),
        undoes=opening.undo,
        probe_modules=_strings(plan.get("probe_modules")),
        planned=(
            *_pins(plan.get("remove"), "-"),
            *_pins(plan.get("install"), "+"),
            *(f"~{n}" for n in _strings(plan.get("reinstall"), "name")),
        ),
        argv=opening.argv or (),
    )


def _pins(value: Any, sign: str) -> tuple[str, ...]:
    """``{sign}name version`` of each ``{name, version}`` in the plan's JSON list (the name
    alone where the version is missing); junk becomes ()."""
    if not isinstance(value, list):
        return ()
    out = []
    for v in value:
        name = v.get("name") if isinstance(v, dict) else None
        if isinstance(name, str):
            version = v.get("version")
            out.append(f"{sign}{name}" + (f" {version}" if isinstance(version, str) else ""))
    return tuple(out)


def changes(records: Sequence[Record]) -> tuple[str, ...] | None:
    """What a committed transaction changed, as its ``commit`` record says (None: a journal
    written before commits recorded it)."""
    done = next((r.step for r in reversed(records) if isinstance(r.step, Commit)), None)
    return None if done is None else done.changed


def _strings(value: Any, key: str | None = None) -> tuple[str, ...]:
    """A list of strings (or of ``{key: str}``) from the plan's JSON; junk becomes ()."""
    if not isinstance(value, list):
        return ()
    items = [v.get(key) if key and isinstance(v, dict) else v for v in value]
    return tuple(str(v) for v in items if isinstance(v, str | int | float))


def append(path: Path, step: Step) -> None:
    """Durably append one step; fsync the file, and the directory when the file is new.

    A line torn by an earlier failed write is ended first, so it can never swallow this
    record; the file is opened without following symlinks.
    """
    name = str(step.event)
    record = Record(step, time.time()).encode()
    line = (json.dumps(record, sort_keys=True) + "\n").encode("utf-8")
    fd = open_file(path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line
        fail_point("journal", name)
        write_durably(fd, line)
    finally:
        os.close(fd)
    if size == 0:
        fsync_dir(path.parent)
    crash_point(name)


@dataclass(frozen=True)
class Journal:
    """What a journal file holds: its records, and the lines that are not records."""

    records: list[Record]
    damaged: tuple[int, ...] = ()
    """1-based numbers of lines that are not a JSON record (a torn last line excepted)."""

    @property
    def intact(self) -> bool:
        return not self.damaged


def load(path: Path) -> Journal:
    """Read a journal, telling apart a torn last line (a crash mid-append) from damage."""
    try:
        raw = read_bytes(path)
    except FileNotFoundError:
        return Journal([])
    lines = raw.split(b"\n")
    torn_tail = bool(lines) and lines[-1] != b""
    records: list[Record] = []
    damaged: list[int] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        value = decode(line)
        if value is not None:
            records.append(value)
        elif not (torn_tail and number == len(lines)):
            damaged.append(number)
    return Journal(records, tuple(damaged))


def decode(line: bytes) -> Record | None:
    """One line as a :class:`Record`; None when it is not one (torn, garbled, unknown step)."""
    try:
        value = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(value, dict) or not isinstance(value.get("event"), str):
        return None
    try:
        event = Event(value.pop("event"))
    except ValueError:
        return None
    when = value.pop("time", 0.0)
    moment = float(when) if isinstance(when, int | float) else 0.0
    return Record(steps.decode(event, value), moment)


def read(path: Path) -> list[Record]:
    """Every complete record; a torn or garbled line is skipped (see :func:`load`)."""
    return load(path).records


def last(path: Path) -> Record | None:
    """The last complete record, as ``read(path)[-1]`` (None: there is none), decoding the
    lines from the end only until one is a record: a state check, which needs no more,
    skips the plan the first record carries."""
    try:
        raw = read_bytes(path)
    except FileNotFoundError:
        return None
    for line in reversed(raw.split(b"\n")):
        if line.strip() and (record := decode(line)) is not None:
            return record
    return None


def events(records: Sequence[Record]) -> list[Event]:
    return [r.event for r in records]


def is_done(records: Sequence[Record]) -> bool:
    """True when the last step says nothing more is needed."""
    return bool(records) and records[-1].event in DONE_EVENTS


def note(path: Path, step: Step) -> str | None:
    """Journal a step of a rollback, best effort: None, or why it could not be written.

    A rollback restores from the snapshot whatever the journal can record (hard links
    need no space); what the journal could not say is reported, and ``recover`` finishes.
    """
    try:
        append(path, step)
    except OSError as exc:
        return f"the journal could not record '{step.event}': {exc.strerror or exc}"
    return None
