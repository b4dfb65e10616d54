"""Append-only, fsync'd JSON-lines journal: each step is written *before* it happens.

pip's ``StashedUninstallPathSet`` keeps its move list in memory, so a crash leaks state;
here every step is durable first, so ``recover`` can always finish (roll back) a run.

Test-only hooks (never set them outside tests):

* ``CUDAFIX_TEST_CRASH_AFTER=<step>``: SIGKILL this process right after ``<step>`` is
  journaled (or reached, for per-file points such as ``snapshot-file``/``restore-file``).
* ``CUDAFIX_TEST_FAIL=<op>:<ERRNO>``: raise ``OSError(errno.<ERRNO>)`` at operation
  ``<op>`` (``snapshot``, ``restore``, ``keep``), to simulate ENOSPC/EACCES as root.
"""

from __future__ import annotations

import enum
import errno
import json
import os
import signal
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cudafix.env.statedir import fsync_dir

CRASH_ENV = "CUDAFIX_TEST_CRASH_AFTER"
FAIL_ENV = "CUDAFIX_TEST_FAIL"


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

    def __str__(self) -> str:
        return self.value


DONE_EVENTS = frozenset({Event.COMMIT, Event.ROLLED_BACK, Event.ABORTED})
"""A transaction whose journal ends in one of these needs nothing more."""


def crash_point(step: str) -> None:
    """Test hook: SIGKILL ourselves at ``step`` when asked to (simulates a power cut)."""
    if os.environ.get(CRASH_ENV) == step:
        os.kill(os.getpid(), signal.SIGKILL)


def fail_point(op: str) -> None:
    """Test hook: raise the configured OSError at ``op``."""
    spec = os.environ.get(FAIL_ENV, "")
    name, _, code = spec.partition(":")
    if name == op and code:
        num = getattr(errno, code)
        raise OSError(num, f"{os.strerror(num)} (injected at {op})")


def append(path: Path, event: Event, data: Mapping[str, Any] | None = None) -> None:
    """Durably append one step; fsync the file, and the directory when the file is new."""
    is_new = not path.exists()
    record = {"event": event.value, "time": time.time(), **(data or {})}
    line = json.dumps(record, sort_keys=True) + "\n"
    with path.open("a", encoding="utf-8") as fh:
        fh.write(line)
        fh.flush()
        os.fsync(fh.fileno())
    if is_new:
        fsync_dir(path.parent)
    crash_point(event.value)


def read(path: Path) -> list[dict[str, Any]]:
    """Every complete record; a torn last line (crash mid-write) is ignored."""
    if not path.exists():
        return []
    records: list[dict[str, Any]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            records.append(value)
    return records


def events(records: list[dict[str, Any]]) -> list[str]:
    return [str(r.get("event")) for r in records]


def is_done(records: list[dict[str, Any]]) -> bool:
    """True when the last step says nothing more is needed."""
    return bool(records) and records[-1].get("event") in DONE_EVENTS


def find(records: list[dict[str, Any]], event: str) -> dict[str, Any] | None:
    """The first record of ``event``, if any."""
    return next((r for r in records if r.get("event") == event), None)
