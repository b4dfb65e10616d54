"""run_transaction / recover / undo on real venvs with the real uv binary."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from filelock import FileLock

from cudafix import process
from cudafix.env.statedir import StateDir
from cudafix.faults import CRASH_ENV, FAIL_ENV
from cudafix.model.errors import (
    ExitCode,
    LockedError,
    PlanRefused,
    RollbackIncomplete,
    StalePlan,
    TransactionFailed,
)
from cudafix.model.plan import Plan
from cudafix.model.probe import ProbeSpec
from cudafix.model.transaction import RunEvent
from cudafix.tx.apply import run_transaction
from cudafix.tx.difference import Deviation
from cudafix.tx.history import gc, history, show
from cudafix.tx.pending import pending_transactions
from cudafix.tx.recovery import recover
from cudafix.tx.undo import undo
from scenarios.fingerprint import diff_fingerprints, fingerprint
from tests.support.tx import B_BYTES, make_plan, remove_pa_plan
from tests.support.venvs import site_rel

pytestmark = pytest.mark.slow
"""Builds real venvs or runs the CLI through transactions: left out of ``make test-fast``."""

OK = ProbeSpec(modules=("pb_mod",))
BAD = ProbeSpec(code=("import pa_mod",))


def assert_same(prefix: Path, before: dict[str, tuple[object, ...]]) -> None:
    diff = diff_fingerprints(before, fingerprint(prefix))
    assert not diff, "\n".join(diff)


def test_uninstall_and_reinstall_commit(venv: tuple[Path, Path]) -> None:
    prefix, wheels = venv
    sp = prefix / site_rel(prefix)
    events: list[RunEvent] = []
    result = run_transaction(remove_pa_plan(prefix, wheels), probes=OK, on_event=events.append)
    assert not (sp / "pa_mod.py").exists()
    assert not (sp / "pa-1.0.dist-info").exists()
    assert (sp / "shared" / "lib.so").read_bytes() == B_BYTES
    assert result.probes == ("import pb_mod",)
    assert any(e.kind == "progress" and e.text == "committing" for e in events)
    [entry] = history(prefix)
    assert (entry.state, entry.removed, entry.reinstalled) == ("committed", ("pa",), ("pb",))
    assert pending_transactions(prefix) == []


def test_failing_probe_rolls_back_byte_identical(venv: tuple[Path, Path]) -> None:
    prefix, wheels = venv
    before = fingerprint(prefix)
    with pytest.raises(TransactionFailed) as info:
        run_transaction(remove_pa_plan(prefix, wheels), probes=BAD)
    assert "ModuleNotFoundError: No module named 'pa_mod'" in info.value.message
    assert "restored" in info.value.context[0]
    assert_same(prefix, before)
    assert [e.state for e in history(prefix)] == ["rolled-back"]


def test_backend_failure_rolls_back(venv: tuple[Path, Path]) -> None:
    prefix, wheels = venv
    before = fingerprint(prefix)
    plan = remove_pa_plan(prefix, wheels, reinstall=[("pb", "9.9")])
    with pytest.raises(TransactionFailed, match=r"uv reinstall failed \(exit status"):
        run_transaction(plan, probes=OK)
    assert_same(prefix, before)
    [record] = [
        r
        for r in show(prefix, history(prefix)[0].txid).journal
        if r["event"] == "backend" and r["returncode"]
    ]
    assert "pb==9.9" in record["argv"]


def test_hanging_probe_times_out_and_rolls_back(venv: tuple[Path, Path]) -> None:
    prefix, wheels = venv
    before = fingerprint(prefix)
    hang = ProbeSpec(code=("import time; time.sleep(60)",), timeout=2)
    with pytest.raises(TransactionFailed, match="timed out after 2 s"):
        run_transaction(remove_pa_plan(prefix, wheels), probes=hang)
    assert_same(prefix, before)


def test_probe_command_error_is_reported(venv: tuple[Path, Path]) -> None:
    prefix, wheels = venv
    probe = ProbeSpec(
        commands=("echo 'libcudnn.so.9: cannot open shared object file' >&2; exit 3",)
    )
    with pytest.raises(TransactionFailed, match=r"libcudnn\.so\.9: cannot open shared object file"):
        run_transaction(remove_pa_plan(prefix, wheels), probes=probe)


def test_verify_mismatch_and_interrupt_roll_back(venv: tuple[Path, Path]) -> None:
    prefix, wheels = venv
    before = fingerprint(prefix)
    differs = [Deviation("not-present", "predicted/lib.so")]
    with pytest.raises(TransactionFailed, match=r"predicted/lib\.so should be present"):
        run_transaction(remove_pa_plan(prefix, wheels), verify=lambda: differs)
    assert_same(prefix, before)

    def interrupt() -> list[Deviation]:
        raise KeyboardInterrupt

    with pytest.raises(TransactionFailed, match=r"^interrupted; rolled back"):
        run_transaction(remove_pa_plan(prefix, wheels), verify=interrupt)
    assert_same(prefix, before)


def test_keep_shared_puts_the_path_back(venv: tuple[Path, Path]) -> None:
    prefix, wheels = venv
    sp = site_rel(prefix)
    old = (prefix / sp / "shared/lib.so").read_bytes()
    plan = remove_pa_plan(prefix, wheels, reinstall=[], kept=["shared/lib.so"])
    run_transaction(plan, probes=OK)
    assert (prefix / sp / "shared/lib.so").read_bytes() == old
    assert not (prefix / sp / "pa_mod.py").exists()


def test_refused_plan_needs_force(venv: tuple[Path, Path]) -> None:
    prefix, wheels = venv
    before = fingerprint(prefix)
    plan = remove_pa_plan(prefix, wheels, verdict="refused")
    with pytest.raises(PlanRefused):
        run_transaction(plan, probes=OK)
    with pytest.raises(TransactionFailed):
        run_transaction(plan, probes=BAD, force=True)
    assert_same(prefix, before)


def test_paths_outside_prefix_are_refused_up_front(venv: tuple[Path, Path], tmp_path: Path) -> None:
    prefix, wheels = venv
    outside = tmp_path / "outside"
    outside.write_text("precious")
    before = fingerprint(prefix)
    plan = make_plan(
        prefix,
        wheels,
        remove=[("pa", "1.0")],
        deleted=["../../outside", str(outside), "../outside"],
    )
    with pytest.raises(PlanRefused) as info:
        run_transaction(plan, probes=OK)
    assert len(info.value.context) == 3
    assert outside.read_text() == "precious"
    assert_same(prefix, before)
    assert history(prefix) == []


def test_symlink_out_is_kept_as_a_symlink(venv: tuple[Path, Path], tmp_path: Path) -> None:
    prefix, wheels = venv
    sp = prefix / site_rel(prefix)
    target = tmp_path / "outside-dir"
    target.mkdir()
    (target / "keep.txt").write_text("precious")
    (sp / "pa-1.0.dist-info" / "evil").symlink_to(target)
    before = fingerprint(prefix)
    with pytest.raises(TransactionFailed):
        run_transaction(remove_pa_plan(prefix, wheels), probes=BAD)
    assert_same(prefix, before)
    assert (sp / "pa-1.0.dist-info" / "evil").is_symlink()
    run_transaction(remove_pa_plan(prefix, wheels), probes=OK)
    assert (target / "keep.txt").read_text() == "precious"
    assert not (sp / "pa-1.0.dist-info" / "RECORD").exists()
    assert (sp / "pa-1.0.dist-info" / "evil").is_symlink()  # uv leaves foreign entries


def test_lock_held_fails_cleanly(venv: tuple[Path, Path]) -> None:
    prefix, wheels = venv
    lock = StateDir(prefix).lock
    lock.parent.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import filelock, sys\nlock = filelock.FileLock({str(lock)!r})\n"
            "lock.acquire()\nprint('held', flush=True)\nsys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        before = fingerprint(prefix)
        events: list[RunEvent] = []
        with pytest.raises(LockedError, match="another cudafix run"):
            run_transaction(
                remove_pa_plan(prefix, wheels), probes=OK, lock_timeout=0.3, on_event=events.append
            )
        assert events and events[0].kind == "info" and events[0].text.startswith("waiting")
        assert_same(prefix, before)
    finally:
        holder.communicate("")
    assert FileLock(str(lock)).acquire(timeout=5)


def _child_script(plan_file: Path, probes: ProbeSpec) -> str:
    return textwrap.dedent(f"""
        from pathlib import Path
        from cudafix.model.plan import Plan
        from cudafix.model.probe import ProbeSpec
        from cudafix.tx.apply import run_transaction
        plan = Plan.model_validate_json(Path({str(plan_file)!r}).read_text())
        run_transaction(plan, probes=ProbeSpec(code={probes.code!r}, modules={probes.modules!r}))
    """)


def _run_child(plan: Plan, probes: ProbeSpec, tmp: Path, env: dict[str, str]) -> int:
    plan_file = tmp / "plan.json"
    plan_file.write_text(plan.model_dump_json())
    child = subprocess.run(
        [sys.executable, "-c", _child_script(plan_file, probes)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
    )
    return child.returncode


CRASH_POINTS = [
    ("plan", OK),
    ("snapshot-begin", OK),
    ("snapshot-file", OK),
    ("snapshot-done", OK),
    ("detach-begin", OK),
    ("uninstall-begin", OK),
    ("backend", OK),
    ("reinstall-begin", OK),
    ("verify-begin", OK),
    ("probe-begin", OK),
    ("probe-done", OK),
    ("commit-begin", OK),
    ("rollback-begin", BAD),
    ("restore-begin", BAD),
    ("restore-file", BAD),
]


UNTOUCHED = {"plan", "snapshot-begin", "snapshot-file", "snapshot-done", "detach-begin"}


@pytest.mark.parametrize(("step", "probes"), CRASH_POINTS, ids=[c[0] for c in CRASH_POINTS])
def test_sigkill_at_each_step_then_recover(
    venv: tuple[Path, Path], tmp_path: Path, step: str, probes: ProbeSpec
) -> None:
    prefix, wheels = venv
    before = fingerprint(prefix)
    plan = remove_pa_plan(prefix, wheels)
    assert _run_child(plan, probes, tmp_path, {CRASH_ENV: step}) == -signal.SIGKILL
    [pending] = pending_transactions(prefix)
    with pytest.raises(LockedError) as info:
        run_transaction(plan, probes=OK)
    assert info.value.hint is not None and "cudafix recover" in info.value.hint
    mid = fingerprint(prefix)
    assert (mid == before) == (step in UNTOUCHED), (
        "crash point reached a different state than expected"
    )
    dry = recover(prefix, dry_run=True)
    assert dry.transactions == (pending,) and pending in dry.actions[0]
    assert fingerprint(prefix) == mid
    recover(prefix)
    assert_same(prefix, before)
    assert pending_transactions(prefix) == []
    assert recover(prefix).transactions == ()


def test_sigkill_while_keeping_shared(venv: tuple[Path, Path], tmp_path: Path) -> None:
    prefix, wheels = venv
    before = fingerprint(prefix)
    plan = remove_pa_plan(prefix, wheels, reinstall=[], kept=["shared/lib.so"])
    assert _run_child(plan, OK, tmp_path, {CRASH_ENV: "keep-begin"}) == -signal.SIGKILL
    recover(prefix)
    assert_same(prefix, before)


def test_crash_after_commit_leaves_the_after_state(venv: tuple[Path, Path], tmp_path: Path) -> None:
    prefix, wheels = venv
    assert (
        _run_child(remove_pa_plan(prefix, wheels), OK, tmp_path, {CRASH_ENV: "commit"})
        == -signal.SIGKILL
    )
    assert pending_transactions(prefix) == []
    assert not (prefix / site_rel(prefix) / "pa_mod.py").exists()


@pytest.mark.parametrize("code", ["ENOSPC", "EACCES"])
def test_snapshot_failure_changes_nothing(
    venv: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, code: str
) -> None:
    prefix, wheels = venv
    before = fingerprint(prefix)
    monkeypatch.setenv(FAIL_ENV, f"snapshot:{code}")
    with pytest.raises(TransactionFailed, match="nothing was changed"):
        run_transaction(remove_pa_plan(prefix, wheels), probes=OK)
    assert_same(prefix, before)
    assert [e.state for e in history(prefix)] == ["aborted"]


@pytest.mark.parametrize("code", ["ENOSPC", "EACCES"])
def test_restore_failure_then_recover(
    venv: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, code: str
) -> None:
    prefix, wheels = venv
    before = fingerprint(prefix)
    monkeypatch.setenv(FAIL_ENV, f"restore:{code}")
    with pytest.raises(RollbackIncomplete, match="rollback did not finish") as info:
        run_transaction(remove_pa_plan(prefix, wheels), probes=BAD)
    assert info.value.exit_code == ExitCode.LOCKED
    assert info.value.hint == f"cudafix recover --venv {prefix}"
    assert pending_transactions(prefix)
    monkeypatch.delenv(FAIL_ENV)
    recover(prefix)
    assert_same(prefix, before)


def test_keep_failure_rolls_back(venv: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    prefix, wheels = venv
    before = fingerprint(prefix)
    monkeypatch.setenv(FAIL_ENV, "keep:ENOSPC")
    with pytest.raises(TransactionFailed, match="No space left"):
        run_transaction(
            remove_pa_plan(prefix, wheels, reinstall=[], kept=["shared/lib.so"]), probes=OK
        )
    assert_same(prefix, before)


def test_undo_restores_and_refuses_after_changes(venv: tuple[Path, Path]) -> None:
    prefix, wheels = venv
    before = fingerprint(prefix)
    first = run_transaction(remove_pa_plan(prefix, wheels), probes=OK)
    after = fingerprint(prefix)
    undone = undo(prefix, first.txid, probes=ProbeSpec(modules=("pa_mod", "pb_mod")))
    assert_same(prefix, before)
    assert [e.kind for e in history(prefix)] == ["apply", "undo"]
    undo(prefix, undone.txid)
    assert_same(prefix, after)
    second = history(prefix)[-1].txid
    (prefix / site_rel(prefix) / "pb_mod.py").write_text("B = 2\n")
    with pytest.raises(StalePlan) as info:
        undo(prefix, second)
    assert any("pb_mod.py" in c for c in info.value.context)


def test_gc_keeps_the_newest_snapshots(venv: tuple[Path, Path]) -> None:
    prefix, wheels = venv
    first = run_transaction(remove_pa_plan(prefix, wheels), probes=OK)
    current = first.txid
    for _ in range(2):
        current = undo(prefix, current).txid
    assert [e.snapshot for e in history(prefix)] == [True, True, True]
    assert gc(prefix, keep=1) == [e.txid for e in history(prefix)[:2]]
    assert [e.snapshot for e in history(prefix)] == [False, False, True]
    assert (
        json.loads((StateDir(prefix).tx(current).journal).read_text().splitlines()[0])["kind"]
        == "undo"
    )


def test_a_detached_process_holds_no_stream_of_its_caller_and_is_not_waited_for(
    tmp_path: Path,
) -> None:
    """What deletes old snapshots after a commit: a pipe reading cudafix's output must end
    when cudafix does, and Ctrl-C at the prompt must not reach it."""
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        code = "import os, sys, time; os.mkdir('seen', dir_fd=int(sys.argv[1])); time.sleep(60)"
        pid = process.spawn_detached(code, fd)
    finally:
        os.close(fd)
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "seen").is_dir() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (tmp_path / "seen").is_dir()
        assert os.waitpid(pid, os.WNOHANG) == (0, 0)
        assert os.getsid(pid) == pid != os.getsid(0)
        assert {os.readlink(f"/proc/{pid}/fd/{n}") for n in (0, 1, 2)} == {os.devnull}
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
