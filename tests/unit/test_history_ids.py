"""Naming a transaction: short ids, unique starts and ends, ``last~N``, and what undo steps over."""

from __future__ import annotations

import pytest

from cudafix.cli.wording import undo_effects
from cudafix.model.commands import subcommand
from cudafix.model.errors import ExitCode, UsageError
from cudafix.model.transaction import HistoryEntry
from cudafix.tx.history import annotated, pick, short_ids, undoable

A = "20260101T000000-000000001-e4298f"
B = "20260101T000001-000000002-0a1b2c"
C = "20260101T000002-000000003-77aa00"
D = "20260101T000003-000000004-deadbe"


def _e(txid: str, kind: str = "apply", state: str = "committed", undoes: str | None = None):
    return HistoryEntry(
        txid=txid, time=0.0, kind=kind, command=(), verdict="", state=state, removed=(),
        reinstalled=(), kept=(), error=None, snapshot=True, undoes=undoes,
    )  # fmt: skip


def test_short_ids_are_the_suffix_unless_two_share_it() -> None:
    twin = "20260101T000009-000000009-e4298f"
    assert short_ids([A, B]) == {A: "e4298f", B: "0a1b2c"}
    assert short_ids([A, twin, "odd-name"]) == {A: A, twin: twin, "odd-name": "odd-name"}


def test_an_id_is_named_whole_by_six_characters_of_its_start_or_its_end() -> None:
    log = [_e(A), _e(B)]
    assert pick(A, log) == A
    assert pick("e4298f", log) == A
    assert pick("2-0a1b2c", log) == B
    assert pick("20260101T000001", log) == B


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("202601", "names 2 transactions"),
        ("e4298", "at least 6 characters"),
        ("ffffff", "no transaction 'ffffff'"),
        ("last~x", "`last~1`"),
        ("last~2", "goes back further than the 2"),
    ],
)
def test_an_ambiguous_short_or_unknown_id_is_a_usage_error(given: str, said: str) -> None:
    with pytest.raises(UsageError) as caught:
        pick(given, [_e(A), _e(B)])
    assert said in caught.value.message and caught.value.exit_code == ExitCode.USAGE


def test_last_steps_back_over_undos_and_what_they_undid() -> None:
    log = annotated([_e(A), _e(B), _e(C, kind="undo", undoes=B), _e(D, state="rolled-back")])
    assert [e.txid for e in undoable(log)] == [A]
    assert pick("last", log) == A
    assert [e.undone_by for e in log] == [None, C, None, None]


def test_last_tilde_n_counts_back_through_committed_transactions() -> None:
    log = [_e(A), _e(B), _e(C), _e(D, kind="run")]
    assert [pick(f"last~{n}", log) for n in range(4)] == [D, C, B, A]
    assert pick("last~0", log) == pick("last", log) == D


def test_an_undo_undone_makes_what_it_undid_count_again() -> None:
    log = annotated([_e(A), _e(B, kind="undo", undoes=A), _e(C, kind="undo", undoes=B)])
    assert [e.undone_by for e in log] == [None, C, None]
    assert pick("last", log) == A
    looped = annotated([_e(A, kind="undo", undoes=B), _e(B, kind="undo", undoes=A)])
    assert len([e for e in looped if e.undone_by]) == 1  # a damaged log still lists


def test_a_recorded_command_line_names_its_subcommand() -> None:
    assert subcommand(["/x/cudafix", "repair", "--venv", "V"]) == "repair"
    assert subcommand(["cudafix", "--venv", "repair", "-q", "install", "six"]) == "install"
    assert subcommand(["cudafix", "-p", "py", "--color", "never", "uninstall", "x"]) == "remove"
    assert subcommand(["cudafix", "--venv=V", "run", "--", "uv"]) == "run"
    assert subcommand(["cudafix", "-q"]) is None and subcommand([]) is None


def test_undo_is_said_in_package_terms() -> None:
    said = undo_effects(["+six 1.17.0", "-nvidia-x 9.1", "nvidia-y 1 -> 2", "~pc"])
    assert said == (
        "removes six 1.17.0; puts back nvidia-x 9.1; takes nvidia-y back from 2 to 1; "
        "puts back the files of pc as they were before"
    )
    assert undo_effects([]) == ""
