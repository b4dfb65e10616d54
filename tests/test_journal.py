"""The journal: durable appends, torn lines, and the test-only crash/fault hooks."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cudafix.tx import journal
from cudafix.tx.journal import Event


def test_append_read_and_done(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal.append(path, Event.PLAN, {"x": 1})
    assert not journal.is_done(journal.read(path))
    journal.append(path, Event.COMMIT)
    records = journal.read(path)
    assert journal.events(records) == ["plan", "commit"]
    assert records[0].data["x"] == 1
    assert journal.is_done(records)


def test_torn_last_line_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal.append(path, Event.PLAN)
    with path.open("a") as fh:
        fh.write('{"event": "comm')
    assert journal.events(journal.read(path)) == ["plan"]
    assert journal.read(tmp_path / "missing") == []


def test_crash_hook_kills_after_the_step_is_durable(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    code = (
        "from cudafix.tx import journal\nfrom pathlib import Path\n"
        f"p = Path({str(path)!r})\n"
        "for step in journal.Event:\n    journal.append(p, step)\n"
    )
    env = {**os.environ, journal.CRASH_ENV: "snapshot-begin"}
    done = subprocess.run([sys.executable, "-c", code], env=env, check=False)
    assert done.returncode == -signal.SIGKILL
    assert journal.events(journal.read(path)) == ["plan", "snapshot-begin"]


def test_fail_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    journal.fail_point("snapshot")
    monkeypatch.setenv(journal.FAIL_ENV, "snapshot:EACCES")
    journal.fail_point("restore")
    with pytest.raises(OSError) as info:
        journal.fail_point("snapshot")
    assert info.value.errno == errno.EACCES
