"""The journal codec on hand-written lines: what decodes, what is junk, how lenient reading
fills defaults, and what ``history`` reads from the first record (``Head``)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from cudafix.model.probe import ProbeResult
from cudafix.tx import journal, steps
from cudafix.tx.journal import Record
from cudafix.tx.steps import (
    Aborted,
    BackendCall,
    Commit,
    Event,
    Opening,
    ProbeDone,
    RestoreBegin,
    RolledBack,
    SnapshotDone,
    StateRebuilt,
)


def _line(**fields: Any) -> bytes:
    return json.dumps(fields).encode()


@pytest.mark.parametrize(
    "line",
    [
        b"",
        b"not json",
        b"\xff\xfe",
        b"[1, 2]",
        b'"plan"',
        b"{}",
        b'{"event": 3}',
        b'{"event": null}',
        b'{"event": "no-such-step"}',
        b'{"event": "commit"',
    ],
)
def test_a_line_that_is_not_a_record_decodes_to_none(line: bytes) -> None:
    assert journal.decode(line) is None


@pytest.mark.parametrize("event", list(Event))
def test_every_event_decodes_from_its_bare_name_to_defaults(event: Event) -> None:
    record = journal.decode(_line(event=event.value))
    assert record is not None
    assert record.step == steps.STEPS[event]()
    assert (record.event, record.time) == (event, 0.0)


@pytest.mark.parametrize(
    ("fields", "step"),
    [
        ({"event": "snapshot-done", "entries": "7"}, SnapshotDone()),
        ({"event": "snapshot-done", "entries": True}, SnapshotDone()),
        ({"event": "snapshot-done", "entries": 7}, SnapshotDone(entries=7)),
        ({"event": "aborted", "error": 12}, Aborted(error="12")),
        ({"event": "aborted", "error": ["x"]}, Aborted()),
        ({"event": "commit", "changed": "-pa"}, Commit()),
        ({"event": "commit", "changed": ["-pa", 3, None, {"x": 1}]}, Commit(changed=("-pa", "3"))),
        ({"event": "plan", "plan": [1]}, Opening()),
        ({"event": "plan", "plan": {"verdict": "pass"}}, Opening(plan={"verdict": "pass"})),
        ({"event": "plan", "undo": 5}, Opening()),
        (
            {"event": "backend", "returncode": 1.5, "argv": ["uv", "pip"]},
            BackendCall(argv=("uv", "pip")),
        ),
        (
            {"event": "restore-begin", "in_place": ["a"], "unknown": 1},
            RestoreBegin(in_place=("a",)),
        ),
        ({"event": "state-rebuilt", "missed": -2}, StateRebuilt(missed=-2)),
    ],
)
def test_a_field_of_the_wrong_json_type_takes_its_default(
    fields: dict[str, Any], step: steps.Step
) -> None:
    """A hand-edited journal still yields its record, so history can list it."""
    record = journal.decode(_line(**fields))
    assert record is not None and record.step == step


def test_probe_results_keep_only_well_formed_entries() -> None:
    record = journal.decode(
        _line(
            event="probe-done",
            results=[
                {"label": "import torch", "ok": True, "error": "", "extra": 1},
                {"label": "half"},
                "junk",
            ],
        )
    )
    assert record is not None
    assert record.step == ProbeDone(results=(ProbeResult("import torch", True, ""),))
    assert journal.decode(_line(event="probe-done", results="x")).step == ProbeDone()  # type: ignore[union-attr]


@pytest.mark.parametrize(("time", "read"), [(5, 5.0), (1.25, 1.25), ("soon", 0.0), (None, 0.0)])
def test_time_is_a_number_or_zero(time: object, read: float) -> None:
    record = journal.decode(_line(event="commit", time=time))
    assert record is not None and record.time == read


@pytest.mark.parametrize("step", [cls() for cls in steps.STEPS.values()])
def test_encode_then_decode_is_the_same_record(step: steps.Step) -> None:
    record = Record(step, 12.5)
    assert journal.decode(json.dumps(record.encode()).encode()) == record


def test_encode_leaves_out_none_and_writes_from_without_underscore() -> None:
    assert steps.encode(Commit()) == {}
    assert steps.encode(steps.UndoBegin(from_="T1")) == {"from": "T1"}
    assert Record(RolledBack(), 3.0).encode() == {"event": "rolled-back", "time": 3.0}
    assert list(Record(Commit(changed=("+a",)), 1.0).encode()) == ["changed", "event", "time"]


def test_events_are_str_values_that_print_as_themselves() -> None:
    assert Event.COMMIT == "commit"  # type: ignore[comparison-overlap]  # the point: a str enum
    assert str(Event.ROLLBACK_BEGIN) == "rollback-begin"
    assert f"{Event.PROCESS}" == "process"
    assert all(cls.event is e for e, cls in steps.STEPS.items())
    assert all(dataclasses.is_dataclass(cls) for cls in steps.STEPS.values())


def _head(opening: Opening, time: float = 9.0) -> journal.Head:
    return journal.head([Record(opening, time), Record(Commit(), time + 1)])


def test_head_reads_the_plan_json_by_name() -> None:
    plan = {
        "verdict": "pass",
        "remove": [{"name": "pa"}, {"name": "pb"}, {"nome": "typo"}, "bare"],
        "reinstall": [{"name": "pc"}],
        "kept_paths": ["lib/x.so"],
        "install": [{"name": "pd", "version": "1"}],
        "probe_modules": ["torch", 7],
    }
    head = _head(Opening(command=("cudafix", "remove", "pa"), plan=plan))
    assert head == journal.Head(
        kind="apply",
        time=9.0,
        command=("cudafix", "remove", "pa"),
        verdict="pass",
        removed=("pa", "pb", "bare"),
        reinstalled=("pc",),
        kept=("lib/x.so",),
        installed=("pd",),
        undoes=None,
        probe_modules=("torch", "7"),
        planned=("-pa", "-pb", "+pd 1", "~pc"),
    )


@pytest.mark.parametrize(
    ("opening", "verdict"),
    [
        (Opening(kind="undo", undo="T1"), "pass"),
        (Opening(kind="run"), ""),
        (Opening(plan={"verdict": "refused"}), "refused"),
        (Opening(plan={"remove": "not-a-list"}), ""),
    ],
)
def test_head_verdict_defaults_by_kind(opening: Opening, verdict: str) -> None:
    head = _head(opening)
    assert head.verdict == verdict
    assert head.removed == ()


def test_head_without_an_opening_record_is_the_default() -> None:
    assert journal.head([]) == journal.Head()
    assert journal.head([Record(Commit(), 1.0)]) == journal.Head()


def test_changes_are_the_last_commits_and_none_before_commits_recorded() -> None:
    assert journal.changes([Record(Opening())]) is None
    assert journal.changes([Record(Opening()), Record(Commit())]) is None
    both = [Record(Commit(changed=("-a",))), Record(Commit(changed=("+b",)))]
    assert journal.changes(both) == ("+b",)


@pytest.mark.parametrize(
    ("last", "done"),
    [
        (Commit(), True),
        (RolledBack(), True),
        (Aborted(error="x"), True),
        (steps.CommitBegin(), False),
        (steps.RollbackBegin(), False),
        (steps.RollbackIncomplete(), False),
    ],
)
def test_is_done_by_the_last_record_alone(last: steps.Step, done: bool) -> None:
    assert journal.is_done([Record(Opening()), Record(last)]) is done
    assert not journal.is_done([])


def test_load_tells_damage_from_a_torn_tail(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    path.write_bytes(b'{"event": "plan"}\ngarbage\n\n{"event": "bogus"}\n{"event": "commit"}\n{"ev')
    loaded = journal.load(path)
    assert journal.events(loaded.records) == ["plan", "commit"]
    assert loaded.damaged == (2, 4)
    assert not loaded.intact
    path.write_bytes(b'{"event": "plan"}\n{"ev')
    assert journal.load(path).intact
    assert journal.load(tmp_path / "absent") == journal.Journal([])
