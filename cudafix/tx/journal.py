"""Append-only, fsync'd JSON-lines journal: each step is written *before* it happens.

pip's ``StashedUninstallPathSet`` keeps its move list in memory, so a crash leaks state;
here every step is durable first, so ``recover`` can always finish (roll back) a run.

Test-only hooks (never set them outside tests):

* ``CUDAFIX_TEST_CRASH_AFTER=<step>[:SIGNAL]``: SIGKILL (or send ``SIGNAL``, e.g.
  ``SIGTERM``) this process right after ``<step>`` is journaled (or reached, for per-file
  points such as ``snapshot-file``/``restore-file``).
* ``CUDAFIX_TEST_FAIL=<op>[@<glob>]:<ERRNO>[,...]``: raise ``OSError(errno.<ERRNO>)`` at
  operation ``<op>`` (``snapshot``, ``restore``, ``keep``, ``journal``, ``commit``), only for
  paths or journal events matching ``<glob>`` when one is given, to simulate ENOSPC/EPERM.
* ``CUDAFIX_TEST_FILL_AT=<step>:<file>``: at ``<step>``, fill the file system holding
  ``<file>`` by writing it until ENOSPC (a real full disk from then on).
"""

from __future__ import annotations

import enum
import errno
import fnmatch
import json
import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudafix.env.statedir import fsync_dir, open_file, read_bytes, write_durably

CRASH_ENV = "CUDAFIX_TEST_CRASH_AFTER"
FAIL_ENV = "CUDAFIX_TEST_FAIL"
FILL_ENV = "CUDAFIX_TEST_FILL_AT"


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

    def __str__(self) -> str:
        return self.value


DONE_EVENTS = frozenset({Event.COMMIT, Event.ROLLED_BACK, Event.ABORTED})
"""A transaction whose journal ends in one of these needs nothing more."""


def crash_point(step: str) -> None:
    """Test hook: SIGKILL ourselves at ``step`` when asked to (simulates a power cut)."""
    want, _, how = os.environ.get(CRASH_ENV, "").partition(":")
    if want == step:
        os.kill(os.getpid(), getattr(signal, how or "SIGKILL"))
    _fill_point(step)


def _fill_point(step: str) -> None:
    """Test hook: fill the file system at ``step`` (ENOSPC for every write from then on)."""
    where, _, filler = os.environ.get(FILL_ENV, "").partition(":")
    if where != step or not filler:
        return
    chunk = b"\0" * (1 << 20)
    with open(filler, "ab", buffering=0) as fh:
        for size in (1 << 20, 4096, 1):
            try:
                while True:
                    fh.write(chunk[:size])
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise


def fail_point(op: str, subject: str = "") -> None:
    """Test hook: raise the configured OSError at ``op`` (for ``subject`` matching the glob)."""
    for spec in filter(None, os.environ.get(FAIL_ENV, "").split(",")):
        target, _, code = spec.rpartition(":")
        name, _, glob = target.partition("@")
        if name == op and code and (not glob or fnmatch.fnmatchcase(subject, glob)):
            num = getattr(errno, code)
            raise OSError(num, f"{os.strerror(num)} (injected at {op})", subject or None)


def append(path: Path, event: Event | str, data: Mapping[str, Any] | None = None) -> None:
    """Durably append one step; fsync the file, and the directory when the file is new.

    A line torn by an earlier failed write is ended first, so it can never swallow this
    record; the file is opened without following symlinks.
    """
    name = str(event)
    record = {"event": name, "time": time.time(), **(data or {})}
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

    records: list[dict[str, Any]]
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
    records: list[dict[str, Any]] = []
    damaged: list[int] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        value = _record(line)
        if value is not None:
            records.append(value)
        elif not (torn_tail and number == len(lines)):
            damaged.append(number)
    return Journal(records, tuple(damaged))


def _record(line: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    if isinstance(value, dict) and isinstance(value.get("event"), str):
        return value
    return None


def read(path: Path) -> list[dict[str, Any]]:
    """Every complete record; a torn or garbled line is skipped (see :func:`load`)."""
    return load(path).records


def events(records: list[dict[str, Any]]) -> list[str]:
    return [str(r.get("event")) for r in records]


def is_done(records: list[dict[str, Any]]) -> bool:
    """True when the last step says nothing more is needed."""
    return bool(records) and records[-1].get("event") in DONE_EVENTS


def find(records: list[dict[str, Any]], event: str) -> dict[str, Any] | None:
    """The first record of ``event``, if any."""
    return next((r for r in records if r.get("event") == event), None)
