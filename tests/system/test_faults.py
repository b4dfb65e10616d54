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
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from cudafix.faults import CRASH_ENV, FAIL_ENV, FILL_ENV
from cudafix.tx.pending import pending_transactions
from scenarios.fingerprint import diff_fingerprints, fingerprint
from tests.support.cli import cudafix, repair_pa
from tests.support.tx import B_BYTES, shared_pair
from tests.support.venvs import UV, site_rel, uv_env
from tests.support.wheels import make_wheel

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


def _outcome(
    prefix: Path, wheels: Path, before: dict[str, tuple[object, ...]], env: dict[str, str],
    clear: Path | None = None,
) -> str:  # fmt: skip
    """Run one cell; check its invariants; return the outcome class."""
    proc = repair_pa(prefix, wheels, env=env)
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
    assert repair_pa(prefix, wheels).returncode == 0


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
    proc = repair_pa(prefix, wheels, "--probe", "import pa_mod", env=env)
    assert proc.returncode == 4, proc.stderr
    assert "Operation not permitted" in proc.stderr and "Traceback" not in proc.stderr
    assert cudafix("recover", "--venv", prefix).returncode == 0
    assert not diff_fingerprints(before, fingerprint(prefix))


# -- install and run -- ------------------------------------------------------------------------
#
# The same faults at every journaled step of `cudafix install pc` and of `cudafix run -- uv
# pip install pc` (the command is real uv), plus SIGTERM (cudafix unwinds: a rollback, exit
# 143) at each step. Outcomes as above; every cell ends in the after-state or the state before.

C_BYTES = b"C = 1\n"
INSTALL_STEPS = [
    "plan",
    "snapshot-begin",
    "snapshot-done",
    "detach-begin",
    "verify-begin",
    "install-begin",
    "backend",
    "probe-begin",
    "probe-done",
    "commit-begin",
]
RUN_STEPS = [
    "plan",
    "snapshot-begin",
    "snapshot-done",
    "run-begin",
    "process",
    "backend",
    "probe-begin",
    "probe-done",
    "commit-begin",
]
BEFORE_CHANGES = {"plan", "snapshot-begin", "snapshot-done"}
STEPS_OF = {"install": INSTALL_STEPS, "run": RUN_STEPS}
CELLS = [(c, s) for c, steps in STEPS_OF.items() for s in steps]


def _expected(fault: str, step: str) -> str:
    if fault == "sigkill":
        return "recovered"
    if fault == "journal-enospc" and step in BEFORE_CHANGES:
        return "unchanged"
    if fault in ("sigterm", "disk-full") and step in BEFORE_CHANGES - {"snapshot-done"}:
        return "unchanged"
    if fault == "sigterm" and step == "snapshot-done":
        return "unchanged"
    return "rolled-back"


def _disk_full(command: str, step: str) -> set[str]:
    """A full disk from ``step`` on: refused before any change, else rolled back; where the
    rollback cannot even journal (install writes its journal before uv fills the disk),
    finished by ``recover`` once there is space again."""
    if step in BEFORE_CHANGES - {"snapshot-done"}:
        return {"unchanged"}
    return {"rolled-back", "recovered"} if command == "install" else {"rolled-back"}


def _venv_and_pc(tmp: Path) -> tuple[Path, Path]:
    """A venv holding pa, and a wheelhouse that also has pc (a new distribution)."""
    prefix, wheels = shared_pair(tmp)
    make_wheel(wheels, "pc", "1.0", {"pc_mod.py": C_BYTES})
    return prefix, wheels


def _act(command: str, prefix: Path, wheels: Path, env: dict[str, str], *extra: str):  # type: ignore[no-untyped-def]
    if command == "install":
        return cudafix(
            "install", "pc==1.0", "--venv", prefix, "--yes", "--offline", "--find-links", wheels,
            *extra, env=env,
        )  # fmt: skip
    uv_install = [
        UV, "pip", "install", "--python", prefix / "bin" / "python", "--offline", "--no-index",
        "--find-links", wheels, "pc==1.0",
    ]  # fmt: skip
    return cudafix("run", "--venv", prefix, *extra, "--", *uv_install, env={**uv_env(), **env})


def _cell(
    command: str, prefix: Path, wheels: Path, env: dict[str, str], clear: Path | None = None
) -> str:
    """Run one cell of install/run; check its invariants; return the outcome class.

    ``run`` shows its command's own output, uv's ``error:`` lines included: cudafix's own
    error is the last one."""
    before = fingerprint(prefix)
    proc = _act(command, prefix, wheels, env)
    said = proc.stdout + proc.stderr
    if clear is not None:
        clear.unlink(missing_ok=True)
    assert "Traceback" not in said and "bug" not in said, said
    sp = prefix / site_rel(prefix)
    if proc.returncode == 0:
        assert (sp / "pc_mod.py").read_bytes() == C_BYTES
        assert pending_transactions(prefix) == []
        return "committed"
    if proc.returncode == -9:
        assert CRASH_ENV in env
    elif proc.returncode == 143:
        assert env.get(CRASH_ENV, "").endswith(":SIGTERM"), said
    else:
        errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
        assert len(errors) == 1 or (command == "run" and errors), proc.stderr
        assert "rolled back" in errors[-1] or "nothing was changed" in errors[-1], errors
        status = re.search(r"the command failed \(exit status (\d+)", errors[-1])
        if command == "run" and status is not None:  # run returns its command's own status
            assert proc.returncode == int(status[1]), said
        else:
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
        outcome = "rolled-back" if "rolled back" in said else "unchanged"
    diff = diff_fingerprints(before, fingerprint(prefix))
    assert not diff, "\n".join(diff)
    return outcome


@pytest.mark.parametrize(("command", "step"), CELLS)
def test_install_and_run_sigkill(tmp_path: Path, command: str, step: str) -> None:
    prefix, wheels = _venv_and_pc(tmp_path)
    assert _cell(command, prefix, wheels, {CRASH_ENV: step}) == _expected("sigkill", step)


@pytest.mark.parametrize(("command", "step"), CELLS)
def test_install_and_run_sigterm(tmp_path: Path, command: str, step: str) -> None:
    prefix, wheels = _venv_and_pc(tmp_path)
    got = _cell(command, prefix, wheels, {CRASH_ENV: f"{step}:SIGTERM"})
    assert got == _expected("sigterm", step)
    assert pending_transactions(prefix) == []


@pytest.mark.parametrize(("command", "step"), CELLS)
def test_install_and_run_journal_enospc(tmp_path: Path, command: str, step: str) -> None:
    prefix, wheels = _venv_and_pc(tmp_path)
    got = _cell(command, prefix, wheels, {FAIL_ENV: f"journal@{step}:ENOSPC"})
    assert got == _expected("journal-enospc", step)
    assert _act(command, prefix, wheels, {}).returncode == 0  # nothing left that blocks


@pytest.mark.parametrize(("command", "step"), CELLS)
def test_install_and_run_disk_full(tmp_path: Path, tmpfs: Path, command: str, step: str) -> None:
    prefix, wheels = _venv_and_pc(tmp_path / "built")
    moved = tmpfs / "venv"
    subprocess.run(["cp", "-a", str(prefix), str(moved)], check=True)
    shutil.rmtree(prefix)
    filler = tmpfs / "filler"
    got = _cell(command, moved, wheels, {FILL_ENV: f"{step}:{filler}"}, clear=filler)
    assert got in _disk_full(command, step), got


@pytest.mark.parametrize("command", ["install", "run"])
@pytest.mark.parametrize("which", ["one-path", "every-path"])
def test_install_and_run_eperm_during_rollback(tmp_path: Path, command: str, which: str) -> None:
    prefix, wheels = _venv_and_pc(tmp_path)
    before = fingerprint(prefix)
    glob = "*/pc_mod.py" if which == "one-path" else "*"
    env = {FAIL_ENV: f"restore@{glob}:EPERM"}
    proc = _act(command, prefix, wheels, env, "--probe", "raise SystemExit('no')")
    assert proc.returncode == 4, proc.stderr
    assert "Operation not permitted" in proc.stderr and "Traceback" not in proc.stderr
    assert cudafix("recover", "--venv", prefix).returncode == 0
    assert not diff_fingerprints(before, fingerprint(prefix))
