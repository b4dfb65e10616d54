"""undo, history and show as a user runs them after a repair and after a ``run``.

``requires`` with its cuDNN uninstalled by plain uv, then ``cudafix repair``: undoing that
repair would break ``import torch`` again, so the undo is a transaction like any other (it
is rolled back and says so, unless ``--accept``). ``clean`` for ``run``'s history.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from scenarios import BuiltScenario
from scenarios.build import uv_binary
from tests.support.cli import as_json, assert_one_line_error, cudafix, uv_uninstall
from tests.support.tty import cudafix_tty
from tests.support.venvs import ScenarioFactory, try_import

pytestmark = pytest.mark.slow
"""Runs the CLI on real venvs: left out of ``make test-fast``."""

TIME = re.compile(r"\b\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\b")


def _repaired(scenario: ScenarioFactory) -> tuple[BuiltScenario, str]:
    built = scenario("requires")
    uv_uninstall(built.python, "nvidia-cudnn-cu12")
    done = cudafix(
        "repair", "--venv", built.venv, "-f", built.wheelhouse, "--offline", "--yes", "--json"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return built, str(as_json(done)["transaction"])


def test_history_has_time_and_what_changed_and_show_summarises(scenario: ScenarioFactory) -> None:
    built, txid = _repaired(scenario)
    lines = cudafix("history", "--venv", built.venv).stdout.splitlines()
    [line] = [ln for ln in lines if ln.startswith(txid)]
    assert TIME.search(line), line
    assert "+nvidia-cudnn-cu12 9.10.2.21" in line and "committed" in line
    summary = cudafix("show", txid[:15], "--venv", built.venv)
    assert summary.returncode == 0, summary.stderr
    assert len(summary.stdout.splitlines()) < 20
    assert f"Transaction {txid}" in summary.stdout and "+nvidia-cudnn-cu12" in summary.stdout
    full = as_json(cudafix("show", "last", "--venv", built.venv, "--json"))
    assert full["entry"]["txid"] == txid and full["journal"] and full["paths"]


def test_undo_by_prefix_or_last_previews_and_is_judged_like_any_transaction(
    scenario: ScenarioFactory,
) -> None:
    built, txid = _repaired(scenario)
    preview = as_json(cudafix("undo", "last", "--venv", built.venv, "--dry-run", "--json"))
    assert preview["transaction"] == txid and preview["state"] == "pass"
    assert_one_line_error(cudafix("undo", "nope", "--venv", built.venv, "--yes"), 2, "nope")

    declined = cudafix_tty("undo", txid[:12], "--venv", built.venv, answer="n")
    assert declined.returncode == 1, declined.output
    undo_at = declined.output.index("Undo:")
    assert "+nvidia-cudnn-cu12 9.10.2.21" in declined.output[undo_at:]
    assert undo_at < declined.output.index("[y/N]") and "Nothing changed." in declined.output

    broke = cudafix("undo", txid[:12], "--venv", built.venv, "--yes")
    assert broke.returncode == 1, broke.stdout + broke.stderr
    assert "libcudnn.so.9" in broke.stderr and "--accept" in broke.stderr
    assert try_import(built.python, "torch").returncode == 0
    ambiguous = cudafix("undo", txid[:8], "--venv", built.venv, "--dry-run")
    assert_one_line_error(ambiguous, 2, "is the start of 2 transaction(s)")

    accepted = cudafix("undo", "last", "--venv", built.venv, "--yes", "--accept", "--json")
    assert as_json(accepted)["state"] == "committed", accepted.stderr
    assert try_import(built.python, "torch").returncode != 0
    history = cudafix("history", "--venv", built.venv, "--json")
    last = json.loads(history.stdout)[-1]
    assert last["undoes"] == txid and "-nvidia-cudnn-cu12 9.10.2.21" in last["changed"]


def test_run_history_says_what_the_command_changed_and_gc_says_what_it_freed(
    scenario: ScenarioFactory, tmp_path: Path
) -> None:
    built = scenario("clean")
    argv = [uv_binary(), "pip", "uninstall", "--python", str(built.python), "nvidia-nvtx-cu12"]
    done = cudafix("run", "--venv", built.venv, "--", *argv)
    assert done.returncode == 0, done.stdout + done.stderr
    [entry] = json.loads(cudafix("history", "--venv", built.venv, "--json").stdout)
    assert entry["kind"] == "run" and entry["changed"] == ["-nvidia-nvtx-cu12 12.8.90"]
    text = cudafix("history", "--venv", built.venv).stdout
    assert "-nvidia-nvtx-cu12 12.8.90" in text and TIME.search(text)
    collected = cudafix("gc", "--venv", built.venv, "--keep", "0")
    assert collected.returncode == 0
    assert re.search(r"Deleted 1 snapshot\(s\), freeing \d+(\.\d)? (B|KiB|MiB)\.", collected.stdout)


def _trash(built: BuiltScenario) -> Path:
    return Path(built.venv) / ".cudafix" / "trash"


def test_a_commit_past_the_kept_five_sets_the_oldest_snapshot_aside_and_deletes_it_unwaited(
    scenario: ScenarioFactory,
) -> None:
    built = scenario("clean")
    for n in range(6):
        done = cudafix("run", "--venv", built.venv, "--", "touch", Path(built.venv) / f"m{n}")
        assert done.returncode == 0, done.stdout + done.stderr
    entries = json.loads(cudafix("history", "--venv", built.venv, "--json").stdout)
    assert [e["snapshot"] for e in entries] == [False] + [True] * 5
    oldest = Path(built.venv) / ".cudafix" / "transactions" / entries[0]["txid"]
    assert (oldest / "journal.jsonl").is_file() and not (oldest / "snapshot").exists()
    deadline = time.monotonic() + 60
    while any(_trash(built).iterdir()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_trash(built).iterdir())


def test_gc_deletes_what_an_interrupted_deletion_left_and_never_follows_a_link_out(
    scenario: ScenarioFactory, tmp_path: Path
) -> None:
    built = scenario("clean")
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "deep" / "keep.txt").write_text("not cudafix's\n")
    left = _trash(built) / "20260101T000000-000000001-abcdef-0a1b2c"
    (left / "site-packages").mkdir(parents=True)
    (left / "site-packages" / "old.so").write_bytes(b"\0" * 4096)
    (left / "site-packages" / "out").symlink_to(outside)
    (_trash(built) / "planted").symlink_to(outside / "deep")

    collected = cudafix("gc", "--venv", built.venv)
    assert collected.returncode == 0, collected.stderr
    assert collected.stdout.strip() == "Deleted 1 snapshot(s), freeing 4.0 KiB."
    assert not any(_trash(built).iterdir())
    assert (outside / "deep" / "keep.txt").read_text() == "not cudafix's\n"


def test_gc_of_a_venv_cudafix_never_changed_writes_nothing(scenario: ScenarioFactory) -> None:
    built = scenario("clean")
    collected = cudafix("gc", "--venv", built.venv)
    assert collected.returncode == 0, collected.stderr
    assert collected.stdout.strip() == "Deleted 0 snapshot(s), freeing 0 B."
    assert not (Path(built.venv) / ".cudafix" / "trash").exists()


def test_a_clock_set_back_still_makes_the_newest_transaction_last(
    scenario: ScenarioFactory,
) -> None:
    """ids sort by creation time, and ``undo last`` and ``gc`` rely on it: a transaction begun
    after the clock went back (NTP, a VM resumed) must still sort after the ones before."""
    built = scenario("clean")
    uv = [uv_binary(), "pip", "uninstall", "--python", str(built.python)]
    first = cudafix("run", "--venv", built.venv, "--json", "--", *uv, "nvidia-nvtx-cu12")
    assert first.returncode == 0, first.stdout + first.stderr
    transactions = Path(built.venv) / ".cudafix" / "transactions"
    ahead = "20991231T235959-999999999-abcdef"  # begun when the clock read 2099
    (transactions / str(as_json(first)["transaction"])).rename(transactions / ahead)

    second = cudafix("run", "--venv", built.venv, "--json", "--", *uv, "torch")
    assert second.returncode == 0, second.stdout + second.stderr
    txid = str(as_json(second)["transaction"])
    assert txid > ahead
    ids = [e["txid"] for e in json.loads(cudafix("history", "--venv", built.venv, "--json").stdout)]
    assert ids == [ahead, txid]
    preview = as_json(cudafix("undo", "last", "--venv", built.venv, "--dry-run", "--json"))
    assert preview["transaction"] == txid
