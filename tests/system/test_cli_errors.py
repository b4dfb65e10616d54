"""What a user sees when the machine or the input fails: one line, the README's exit code,
one JSON object under ``--json``, and every printed next command runs as printed."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
from pathlib import Path

import pytest
from test_transaction import OK, _run_child

from cudafix.faults import CRASH_ENV, FAIL_ENV
from scenarios.fingerprint import fingerprint
from tests.support.cli import assert_one_line_error, cudafix, one_json_error, repair_pa
from tests.support.tx import remove_pa_plan
from tests.support.venvs import site_rel


def _no_bug(proc: subprocess.CompletedProcess[str]) -> None:
    assert "bug" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.slow
def test_malformed_dlopen_table(venv: tuple[Path, Path], tmp_path: Path) -> None:
    prefix, _ = venv
    bad = tmp_path / "bad.toml"
    bad.write_text("garbage [[[\n")
    proc = cudafix("doctor", "--venv", prefix, "--dlopen-table", bad)
    assert_one_line_error(proc, 2, "--dlopen-table", str(bad))
    _no_bug(proc)
    wrong = tmp_path / "wrong.toml"
    wrong.write_text('[dlopen]\n"libx.so.1" = "libpart.so.1"\n')
    proc = cudafix("doctor", "--venv", prefix, "--dlopen-table", wrong, "--json")
    assert_one_line_error(proc, 2, "expected [dlopen]")
    one_json_error(proc, 2)


@pytest.mark.slow
def test_record_field_over_the_csv_limit(venv: tuple[Path, Path]) -> None:
    prefix, wheels = venv
    record = prefix / site_rel(prefix) / "pa-1.0.dist-info" / "RECORD"
    with record.open("a") as fh:
        fh.write("x" * 200_000 + ",,\n")
    proc = cudafix("doctor", "--venv", prefix)
    assert proc.returncode in (0, 1), proc.stderr
    _no_bug(proc)
    dry = cudafix(
        "remove", "pa", "--venv", prefix, "--dry-run", "--offline", "--find-links", wheels
    )
    assert dry.returncode in (0, 3), dry.stderr
    _no_bug(dry)


@pytest.mark.slow
def test_a_lock_symlink_loop_is_a_clear_refusal(venv: tuple[Path, Path]) -> None:
    prefix, wheels = venv
    (prefix / ".cudafix").mkdir()
    (prefix / ".cudafix" / "lock").symlink_to("lock")
    before = fingerprint(prefix)
    proc = repair_pa(prefix, wheels, "--json")
    assert_one_line_error(proc, 2, ".cudafix/lock", "symlink")
    _no_bug(proc)
    assert one_json_error(proc, 2)["state"] == "error"
    assert fingerprint(prefix) == before


@pytest.mark.slow
def test_enospc_at_commit_is_one_line_exit_1(venv: tuple[Path, Path]) -> None:
    prefix, wheels = venv
    before = fingerprint(prefix)
    proc = repair_pa(prefix, wheels, "--json", env={FAIL_ENV: "commit:ENOSPC"})
    assert_one_line_error(proc, 1, "No space left on device", "rolled back")
    _no_bug(proc)
    assert one_json_error(proc, 1)["state"] == "rolled-back"
    assert fingerprint(prefix) == before


@pytest.mark.slow
def test_a_failed_rollback_exits_4_naming_the_paths(venv: tuple[Path, Path]) -> None:
    prefix, wheels = venv
    sp = site_rel(prefix)
    proc = repair_pa(
        prefix, wheels, "--probe", "import pa_mod", env={FAIL_ENV: "restore@*/pa_mod.py:EPERM"}
    )
    assert_one_line_error(
        proc, 4, "rollback did not finish", f"{sp}/pa_mod.py: Operation not permitted"
    )
    _no_bug(proc)
    _runs_as_printed(_hint(proc), expect=0)


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="a read-only bind mount needs root")
def test_a_read_only_environment_is_exit_2(venv: tuple[Path, Path], tmp_path: Path) -> None:
    prefix, wheels = venv
    ro = tmp_path / "ro"
    ro.mkdir()
    if subprocess.run(["mount", "--bind", str(prefix), str(ro)], capture_output=True).returncode:
        pytest.skip("bind mounts are not available here")
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(ro)], check=True)
        proc = cudafix(
            "remove",
            "pa",
            "--venv",
            ro,
            "--yes",
            "--repair",
            "--offline",
            "--find-links",
            wheels,
            "--json",
        )
        assert_one_line_error(proc, 2, "Read-only file system", ".cudafix")
        _no_bug(proc)
        one_json_error(proc, 2)
    finally:
        subprocess.run(["umount", str(ro)], check=True)


# -- every next command printed runs as printed ----------------------------------------------


def _hint(proc: subprocess.CompletedProcess[str]) -> list[str]:
    [line] = [ln for ln in proc.stderr.splitlines() if ln.startswith("hint: ")]
    command = line.removeprefix("hint: ")
    command = command[command.index("cudafix ") :].split("  ")[0]
    return shlex.split(command)


def _runs_as_printed(argv: list[str], expect: int, *extra: str) -> subprocess.CompletedProcess[str]:
    assert argv[0] == "cudafix", argv
    proc = cudafix(*argv[1:], *extra)
    assert proc.returncode == expect, (argv, proc.stdout, proc.stderr)
    return proc


@pytest.mark.slow
def test_printed_next_commands_run(venv: tuple[Path, Path], tmp_path: Path) -> None:
    prefix, wheels = venv
    before = fingerprint(prefix)
    plan = remove_pa_plan(prefix, wheels)
    assert _run_child(plan, OK, tmp_path, {CRASH_ENV: "backend"}) == -signal.SIGKILL
    blocked = repair_pa(prefix, wheels)
    assert blocked.returncode == 4
    recover = _hint(blocked)
    assert recover[:2] == ["cudafix", "recover"]
    _runs_as_printed(recover, 0, "--dry-run")
    _runs_as_printed(recover, 0)
    assert fingerprint(prefix) == before
    shown = cudafix("show", "no-such-tx", "--venv", prefix)
    assert shown.returncode == 2
    _runs_as_printed(_hint(shown), 0)
    done = repair_pa(prefix, wheels)
    assert done.returncode == 0, done.stderr
    [undo] = [ln for ln in done.stdout.splitlines() if ln.startswith("Undo with: ")]
    _runs_as_printed(shlex.split(undo.removeprefix("Undo with: ")), 0, "--yes")
    assert fingerprint(prefix) == before
