"""What needs recovery and what gc collects, from the journal's last record read from the
end, against reading every record: generated journals with torn, garbled, blank and
unknown lines."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from cudafix.env.statedir import StateDir, TxDir
from cudafix.tx import journal, steps
from cudafix.tx.history import collectable, history
from cudafix.tx.pending import pending_transactions, unfinished

_EVENTS = [str(e) for e in steps.Event]


def _line(rng: random.Random) -> bytes:
    kind = rng.randrange(7)
    if kind == 0:
        return b"{garbled"
    if kind == 1:
        return rng.choice([b"", b"   ", b"\t"])
    if kind == 2:
        return json.dumps({"event": "no-such-event", "time": 1}).encode()
    if kind == 3:
        return b"\xff\xfe not utf-8"
    if kind == 4:
        return json.dumps(["not", "a", "dict"]).encode()
    event = rng.choice(_EVENTS)
    return json.dumps({"event": event, "time": rng.random(), "paths": ["a"]}).encode()


def _journal(rng: random.Random) -> bytes:
    lines = [_line(rng) for _ in range(rng.randrange(6))]
    raw = b"\n".join(lines)
    return raw + (b"\n" if rng.random() < 0.7 else b"")  # else: a torn last line


@pytest.mark.parametrize("seed", range(10))
def test_the_last_record_is_the_last_of_every_record(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    path = tmp_path / "journal.jsonl"
    for _ in range(200):
        path.write_bytes(_journal(rng))
        records = journal.read(path)
        assert journal.last(path) == (records[-1] if records else None)
    path.unlink()
    assert journal.last(path) is None and journal.read(path) == []


def _transactions(
    prefix: Path, rng: random.Random, *, snapshots: float, manifests: float
) -> list[TxDir]:
    """60 transaction directories, most with a generated journal, some with a snapshot
    directory or a manifest (each with the odds given)."""
    state = StateDir(prefix)
    made = []
    for i in range(60):
        tx = state.tx(f"20260101T000000-{i:09d}-abcdef")
        tx.root.mkdir(parents=True)
        if rng.random() < 0.9:
            tx.journal.write_bytes(_journal(rng))
        if rng.random() < snapshots:
            tx.snapshot.mkdir()
        if rng.random() < manifests:
            tx.manifest.write_text("{}")
        made.append(tx)
    return made


def test_pending_is_what_every_record_says(tmp_path: Path) -> None:
    expected = []
    for tx in _transactions(tmp_path, random.Random(7), snapshots=0.3, manifests=0.0):
        records = journal.read(tx.journal)
        waiting = tx.snapshot.exists() or tx.manifest.exists()
        if (not journal.is_done(records)) if records else waiting:
            expected.append(tx.txid)
    assert 0 < len(expected) < 60
    assert pending_transactions(tmp_path) == expected
    assert unfinished(tmp_path) == (expected, [])


def _reference_collectable(prefix: Path, keep: int) -> list[str]:
    """gc's choice from the whole history: every journal read in full."""
    entries = [e for e in history(prefix) if e.snapshot and e.state != "pending"]
    committed = [e for e in entries if e.state == "committed"]
    return [e.txid for e in entries if e.state != "committed"] + [
        e.txid for e in committed[: max(0, len(committed) - keep)]
    ]


@pytest.mark.parametrize("seed", range(3))
def test_gc_collects_what_the_whole_history_says(tmp_path: Path, seed: int) -> None:
    _transactions(tmp_path, random.Random(seed), snapshots=0.7, manifests=0.7)
    for keep in (0, 1, 3, 100):
        assert collectable(tmp_path, keep) == _reference_collectable(tmp_path, keep)
    assert collectable(tmp_path, 0)
