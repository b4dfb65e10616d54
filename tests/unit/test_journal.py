"""The journal: durable appends, torn lines, and the test-only crash/fault hooks."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cudafix import faults
from cudafix.model.probe import ProbeResult
from cudafix.tx import journal, steps
from cudafix.tx.steps import Commit, Event, Opening, ProbeDone, Process


def test_append_read_and_done(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal.append(path, Opening(kind="run", command=("cudafix", "run"), argv=("true",)))
    assert not journal.is_done(journal.read(path))
    journal.append(path, Commit(changed=("-pa",)))
    records = journal.read(path)
    assert journal.events(records) == ["plan", "commit"]
    assert records[0].step == Opening(kind="run", command=("cudafix", "run"), argv=("true",))
    assert journal.changes(records) == ("-pa",)
    assert journal.is_done(records)


def test_every_step_is_written_and_read_back_as_the_same_value(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    written = [kind() for kind in steps.STEPS.values()]
    for step in written:
        journal.append(path, step)
    journal.append(path, ProbeDone(results=(ProbeResult("import torch", True, ""),)))
    records = journal.read(path)
    assert [r.step for r in records[:-1]] == written
    assert {r.event for r in records} == set(Event)
    lines = path.read_text().splitlines()
    assert [json.dumps(r.encode()) for r in records] == lines  # show prints what is on disk


def test_a_journal_line_of_todays_shape_reads_as_its_typed_step(tmp_path: Path) -> None:
    """The keys are the ones journals were always written with; junk takes the default."""
    path = tmp_path / "journal.jsonl"
    path.write_text(
        '{"event": "plan", "kind": "undo", "command": ["cudafix", "undo"], "undo": "T1", '
        '"time": 5}\n{"event": "undo-begin", "from": "T1", "time": 6}\n'
        '{"event": "process", "pgid": "junk", "boot": "b", "time": 7}\n'
    )
    records = journal.read(path)
    assert [r.step for r in records] == [
        Opening(kind="undo", command=("cudafix", "undo"), undo="T1"),
        steps.UndoBegin(from_="T1"),
        Process(pgid=None, boot="b"),
    ]
    assert journal.head(records).undoes == "T1"
    assert records[1].encode() == {"event": "undo-begin", "from": "T1", "time": 6.0}


def test_torn_last_line_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal.append(path, Opening())
    with path.open("a") as fh:
        fh.write('{"event": "comm')
    assert journal.events(journal.read(path)) == ["plan"]
    assert journal.read(tmp_path / "missing") == []


def test_crash_hook_kills_after_the_step_is_durable(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    code = (
        "from cudafix.tx import journal, steps\nfrom pathlib import Path\n"
        f"p = Path({str(path)!r})\n"
        "for kind in steps.STEPS.values():\n    journal.append(p, kind())\n"
    )
    env = {**os.environ, faults.CRASH_ENV: "snapshot-begin"}
    done = subprocess.run([sys.executable, "-c", code], env=env, check=False)
    assert done.returncode == -signal.SIGKILL
    assert journal.events(journal.read(path)) == ["plan", "snapshot-begin"]


def test_fail_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    faults.fail_point("snapshot")
    monkeypatch.setenv(faults.FAIL_ENV, "snapshot:EACCES")
    faults.fail_point("restore")
    with pytest.raises(OSError) as info:
        faults.fail_point("snapshot")
    assert info.value.errno == errno.EACCES
