"""The fault matrix: every fault at every journaled step of a real ``cudafix remove --repair``.

Faults: SIGKILL (a power cut), a real full disk (a small tmpfs filled at the step; root
only), ENOSPC on the journal write of the step itself, and EPERM on restoring a path.
Whatever the cell, the environment ends either in the planned after-state with no pending
transaction, or byte-identical to the state before (after ``cudafix recover`` where the run
says it is needed); no cell prints a traceback or calls a machine error a bug. The outcome
of each cell is asserted, and the counts are summarised in BENCHMARKS.md.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from cudafix.tx.journal import CRASH_ENV, FAIL_ENV, FILL_ENV
from cudafix.tx.recovery import pending_transactions
from scenarios.fingerprint import diff_fingerprints, fingerprint
from tests.support.cli import cudafix
from tests.support.tx import B_BYTES, shared_pair
from tests.support.venvs import site_rel

pytestmark = pytest.mark.slow
"""Builds real venvs or runs the CLI through transactions: left out of ``make test-fast``."""

STEPS = [
    "plan",
    "snapshot-begin",
    "snapshot-done",
    "detach-begin",
    "uninstall-begin",
    "backend",
    "reinstall-begin",
    "verify-begin",
    "probe-begin",
    "probe-done",
    "commit-begin",
]

# Outcomes: "committed" (after-state), "rolled-back" (as before, nothing pending),
# "recovered" (as before once `cudafix recover` ran; the run said so), "unchanged" (refused
# before anything changed).
EXPECTED: dict[str, dict[str, str]] = {
    "sigkill": {s: "recovered" for s in STEPS},
    "disk-full": {
        **{s: "rolled-back" for s in STEPS},
        "plan": "unchanged",
        "snapshot-begin": "unchanged",
    },
    "journal-enospc": {
        **{s: "rolled-back" for s in STEPS},
        "plan": "unchanged",
        "snapshot-begin": "unchanged",
        "snapshot-done": "unchanged",
    },
}


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 48 MiB tmpfs (root only) to fill up for real."""
    where = tmp_path / "fs"
    where.mkdir()
    if os.geteuid() != 0:
        pytest.skip("a real full disk needs root (mount -t tmpfs); run as root to cover it")
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(where)], capture_output=True
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _remove(prefix: Path, wheels: Path, env: dict[str, str], *extra: str):  # type: ignore[no-untyped-def]
    return cudafix(
        "remove", "pa", "--venv", prefix, "--repair", "--yes", "--offline",
        "--find-links", wheels, *extra, env=env,
    )  # fmt: skip


def _outcome(
    prefix: Path, wheels: Path, before: dict[str, tuple[object, ...]], env: dict[str, str],
    clear: Path | None = None,
) -> str:  # fmt: skip
    """Run one cell; check its invariants; return the outcome class."""
    proc = _remove(prefix, wheels, env)
    said = proc.stdout + proc.stderr
    assert "Traceback" not in said and "bug" not in said, said
    if clear is not None:
        clear.unlink(missing_ok=True)
    sp = prefix / site_rel(prefix)
    if proc.returncode == 0:
        assert not (sp / "pa_mod.py").exists()
        assert (sp / "shared" / "lib.so").read_bytes() == B_BYTES
        assert pending_transactions(prefix) == []
        return "committed"
    if proc.returncode == -9:
        assert CRASH_ENV in env
    else:
        errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
        assert len(errors) == 1, proc.stderr
        assert proc.returncode in (1, 4), said
    pending = pending_transactions(prefix)
    if pending or proc.returncode in (-9, 4):
        if proc.returncode != -9:
            assert "cudafix recover --venv" in said, said
        done = cudafix("recover", "--venv", prefix)
        assert done.returncode == 0, done.stderr
        assert pending_transactions(prefix) == []
        outcome = "recovered"
    else:
        outcome = "unchanged" if "nothing was changed" in said else "rolled-back"
    diff = diff_fingerprints(before, fingerprint(prefix))
    assert not diff, "\n".join(diff)
    return outcome


@pytest.mark.parametrize("step", STEPS)
def test_sigkill(tmp_path: Path, step: str) -> None:
    prefix, wheels = shared_pair(tmp_path)
    got = _outcome(prefix, wheels, fingerprint(prefix), {CRASH_ENV: step})
    assert got == EXPECTED["sigkill"][step]


@pytest.mark.parametrize("step", STEPS)
def test_journal_enospc(tmp_path: Path, step: str) -> None:
    prefix, wheels = shared_pair(tmp_path)
    got = _outcome(prefix, wheels, fingerprint(prefix), {FAIL_ENV: f"journal@{step}:ENOSPC"})
    assert got == EXPECTED["journal-enospc"][step]
    assert pending_transactions(prefix) == []
    assert _remove(prefix, wheels, {}).returncode == 0


@pytest.mark.parametrize("step", STEPS)
def test_disk_full(tmp_path: Path, tmpfs: Path, step: str) -> None:
    wheels_dir = tmp_path / "built"
    prefix, wheels = shared_pair(wheels_dir)
    moved = tmpfs / "venv"
    subprocess.run(["cp", "-a", str(prefix), str(moved)], check=True)
    shutil.rmtree(prefix)
    filler = tmpfs / "filler"
    before = fingerprint(moved)
    got = _outcome(moved, wheels, before, {FILL_ENV: f"{step}:{filler}"}, clear=filler)
    assert got == EXPECTED["disk-full"][step], got


@pytest.mark.parametrize("which", ["one-path", "every-path"])
def test_eperm_during_rollback(tmp_path: Path, which: str) -> None:
    prefix, wheels = shared_pair(tmp_path)
    before = fingerprint(prefix)
    glob = "*/pa_mod.py" if which == "one-path" else "*"
    env = {FAIL_ENV: f"restore@{glob}:EPERM"}
    proc = _remove(prefix, wheels, env, "--probe", "import pa_mod")
    assert proc.returncode == 4, proc.stderr
    assert "Operation not permitted" in proc.stderr and "Traceback" not in proc.stderr
    assert cudafix("recover", "--venv", prefix).returncode == 0
    assert not diff_fingerprints(before, fingerprint(prefix))
