"""Step durations of one transaction, from the timestamps its journal records."""

from __future__ import annotations

from pathlib import Path

from cudafix.env.statedir import StateDir
from cudafix.tx import journal
from cudafix.tx.steps import SnapshotDone

SPANS = {
    "snapshot": ("snapshot-begin", "snapshot-done"),
    "uninstall": ("uninstall-begin", "backend"),
    "verify+probe": ("verify-begin", "commit-begin"),
    "commit": ("commit-begin", "commit"),
    "restore": ("restore-begin", "rolled-back"),
    "rollback": ("rollback-begin", "rolled-back"),
    "total": ("plan", None),
}


def latest_spans(venv: Path) -> dict[str, float]:
    """Seconds per step of the newest transaction in ``venv`` (absent steps are left out)."""
    state = StateDir(venv)
    ids = state.transaction_ids()
    if not ids:
        return {}
    records = journal.read(state.tx(ids[-1]).journal)
    times: dict[str, float] = {}
    for r in records:
        times.setdefault(str(r.event), r.time)
    last = records[-1].time
    out: dict[str, float] = {}
    for name, (start, end) in SPANS.items():
        if start in times and (end is None or end in times):
            out[name] = (last if end is None else times[end]) - times[start]
    return out


def snapshot_entries(venv: Path) -> int:
    state = StateDir(venv)
    ids = state.transaction_ids()
    if not ids:
        return 0
    records = journal.read(state.tx(ids[-1]).journal)
    done = next((r.step for r in records if isinstance(r.step, SnapshotDone)), None)
    return done.entries if done else 0
