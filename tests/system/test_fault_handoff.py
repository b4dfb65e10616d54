"""The fault matrix, continued: the steps around a transaction's core.

* the trash hand-off (an old snapshot renamed into ``.cudafix/trash/``, then deleted by a
  detached process): SIGKILL, SIGTERM or a failure after the move, the deleting process
  killed or stopped mid-way, a second cudafix started meanwhile;
* the writes of remembered answers and caches (``answers.json``, ``last-seen.json``, the
  tree and ELF caches): SIGKILL, ENOSPC or EACCES half-way through the write;
* the stop of ``run``'s command: cudafix killed (SIGKILL, SIGTERM) while its command, and
  a daemon the command started in a session of its own, write into site-packages.

Each cell drives the CLI as a process and checks that the environment is byte-identical to
before or fully committed, that ``recover`` finishes what was left, that ``doctor`` tells
the truth afterwards, and that nothing prints a traceback.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cudafix.env.statedir import StateDir
from cudafix.faults import CRASH_ENV, FAIL_ENV
from cudafix.tx.pending import pending_transactions
from scenarios import BuiltScenario
from scenarios.fingerprint import diff_fingerprints, fingerprint
from tests.support.cli import cudafix, repair_pa, uv_uninstall
from tests.support.tx import shared_pair
from tests.support.venvs import ScenarioFactory, settle, site_dir

pytestmark = pytest.mark.slow
"""Builds real venvs or runs the CLI through transactions: left out of ``make test-fast``."""


def _quiet(proc: subprocess.CompletedProcess[str]) -> str:
    said = proc.stdout + proc.stderr
    assert "Traceback" not in said and "bug" not in said, said
    return said


def _errors(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]


def _trash(prefix: Path) -> Path:
    return StateDir(prefix).trash


def _held(prefix: Path) -> list[str]:
    where = _trash(prefix)
    return sorted(p.name for p in where.iterdir() if p.is_dir()) if where.is_dir() else []


def _snapshots(prefix: Path) -> list[bool]:
    listed = cudafix("history", "--venv", prefix, "--json")
    assert listed.returncode == 0, listed.stderr
    return [bool(e["snapshot"]) for e in json.loads(listed.stdout)]


def _healthy(prefix: Path) -> None:
    told = cudafix("doctor", "--venv", prefix)
    assert told.returncode == 0, _quiet(told)
    assert "Healthy" in told.stdout and pending_transactions(prefix) == []


def _committed(tmp: Path) -> tuple[Path, Path]:
    """A venv with one committed transaction whose snapshot frees bytes when deleted."""
    prefix, wheels = shared_pair(tmp)
    done = repair_pa(prefix, wheels)
    assert done.returncode == 0, done.stderr
    assert _snapshots(prefix) == [True]
    return prefix, wheels


def _until(check: object, seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if callable(check) and check():
            return True
        time.sleep(0.05)
    return False


def _children(pid: int) -> list[tuple[int, str]]:
    """(pid, state) of the live children of ``pid``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                found.append((int(entry), fields[0]))
    return found


def _state(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "gone"
    return stat[stat.rindex(")") + 2 :].split()[0]


# -- the trash hand-off -----------------------------------------------------------------------


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
def test_gc_stopped_after_the_move_is_finished_by_recover(tmp_path: Path, how: str) -> None:
    prefix, _ = _committed(tmp_path)
    before = fingerprint(prefix)
    proc = cudafix("gc", "--venv", prefix, "--keep", "0", env={CRASH_ENV: f"trash-moved:{how}"})
    _quiet(proc)
    assert proc.returncode == -signal.SIGKILL if how == "SIGKILL" else 143, proc.stderr
    assert _snapshots(prefix) == [False] and len(_held(prefix)) == 1  # out of the log at once
    assert not diff_fingerprints(before, fingerprint(prefix))

    told = cudafix("recover", "--venv", prefix, "--dry-run")
    assert told.returncode == 0 and "would: delete the 1 old snapshot(s)" in told.stdout, told
    done = cudafix("recover", "--venv", prefix)
    assert done.returncode == 0, _quiet(done)
    assert "done: deleted the 1 old snapshot(s)" in done.stdout
    assert _held(prefix) == []
    assert not diff_fingerprints(before, fingerprint(prefix))
    _healthy(prefix)


def test_gc_killed_while_it_waits_for_the_deletion_leaves_it_running(tmp_path: Path) -> None:
    prefix, _ = _committed(tmp_path)
    before = fingerprint(prefix)
    proc = cudafix("gc", "--venv", prefix, "--keep", "0", env={CRASH_ENV: "trash-emptying"})
    assert proc.returncode == -signal.SIGKILL, _quiet(proc)
    assert _until(lambda: _held(prefix) == []), _held(prefix)  # a session of its own
    assert _snapshots(prefix) == [False] and not diff_fingerprints(before, fingerprint(prefix))
    done = cudafix("recover", "--venv", prefix)
    assert done.returncode == 0 and "No unfinished transaction" in done.stdout, _quiet(done)
    _healthy(prefix)


def test_a_commit_after_an_interrupted_hand_off_deletes_what_it_left(tmp_path: Path) -> None:
    prefix, _ = _committed(tmp_path)
    killed = cudafix("gc", "--venv", prefix, "--keep", "0", env={CRASH_ENV: "trash-moved"})
    assert killed.returncode == -signal.SIGKILL and len(_held(prefix)) == 1
    mark = cudafix("run", "--venv", prefix, "--", "sh", "-c", 'echo 1 > "$VIRTUAL_ENV/mark"')
    assert mark.returncode == 0, _quiet(mark)
    assert _snapshots(prefix) == [True, False]  # a sixth commit is not needed to empty it
    assert _until(lambda: _held(prefix) == []), _held(prefix)


def test_gc_whose_deletion_was_killed_says_so_and_recover_finishes_it(tmp_path: Path) -> None:
    prefix, _ = _committed(tmp_path)
    before = fingerprint(prefix)
    proc = cudafix("gc", "--venv", prefix, "--keep", "0", env={CRASH_ENV: "trash-unlink"})
    _quiet(proc)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.strip() == "Deleted 0 snapshot(s), freeing 0 B."
    (error,) = _errors(proc)
    assert "1 old snapshot(s) set aside in" in error and "could not be deleted" in error
    assert len(_held(prefix)) == 1

    done = cudafix("recover", "--venv", prefix)
    assert done.returncode == 0, _quiet(done)
    assert _held(prefix) == [] and not diff_fingerprints(before, fingerprint(prefix))
    _healthy(prefix)
    again = cudafix("gc", "--venv", prefix)
    assert again.stdout.strip() == "Deleted 0 snapshot(s), freeing 0 B.", again


@pytest.mark.parametrize("errno_name", ["ENOSPC", "EACCES"])
def test_a_move_that_fails_frees_nothing_and_keeps_undo(tmp_path: Path, errno_name: str) -> None:
    prefix, _ = _committed(tmp_path)
    proc = cudafix("gc", "--venv", prefix, "--keep", "0", env={FAIL_ENV: f"trash:{errno_name}"})
    assert proc.returncode == 0, _quiet(proc)
    assert proc.stdout.strip() == "Deleted 0 snapshot(s), freeing 0 B."
    assert _snapshots(prefix) == [True] and _held(prefix) == []
    undone = cudafix("undo", "last", "--venv", prefix, "--yes")
    assert undone.returncode == 0, _quiet(undone)
    assert (site_dir(prefix) / "pa_mod.py").is_file()


@pytest.fixture
def stopped() -> Iterator[list[int]]:
    """Pids a test stopped (SIGSTOP): killed whatever the test's outcome."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        for sig in (signal.SIGKILL, signal.SIGCONT):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                break


def _background(*args: str | Path, env: dict[str, str]) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "cudafix", *map(str, args)]
    return subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env={**os.environ, **env},
    )


def test_a_second_cudafix_while_a_deletion_is_stopped(tmp_path: Path, stopped: list[int]) -> None:
    """The deleting process stops half-way; meanwhile another cudafix commits: its commit
    deletes what was left, the log stays right, and the first gc ends telling the truth."""
    prefix, _ = _committed(tmp_path)
    gc = _background("gc", "--venv", prefix, "--keep", "0", env={CRASH_ENV: "trash-unlink:SIGSTOP"})
    stopped.append(gc.pid)
    assert _until(lambda: any(s == "T" for _, s in _children(gc.pid)))
    (emptier,) = [pid for pid, _ in _children(gc.pid)]
    stopped.append(emptier)

    before_run = fingerprint(prefix)
    mark = cudafix("run", "--venv", prefix, "--", "sh", "-c", 'echo 1 > "$VIRTUAL_ENV/mark"')
    assert mark.returncode == 0, _quiet(mark)
    assert _until(lambda: _held(prefix) == []), _held(prefix)

    os.kill(emptier, signal.SIGCONT)
    out, err = gc.communicate(timeout=60)
    assert gc.returncode == 0 and "Traceback" not in err, out + err
    assert out.strip().startswith("Deleted 1 snapshot(s), freeing ")
    assert _snapshots(prefix) == [True, False]
    undone = cudafix("undo", "last", "--venv", prefix, "--yes")
    assert undone.returncode == 0, _quiet(undone)
    assert not diff_fingerprints(before_run, fingerprint(prefix))


def _emptiers(prefix: Path) -> list[int]:
    """The processes holding the trash directory open: the detached deletion."""
    trash = str(_trash(prefix))
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{entry}/fd")
            if any(os.readlink(f"/proc/{entry}/fd/{fd}") == trash for fd in fds):
                found.append(int(entry))
        except OSError:
            continue
    return found


def test_a_snapshot_deleted_while_a_run_runs_is_not_its_write(
    tmp_path: Path, stopped: list[int]
) -> None:
    """Unlinking an old snapshot's hard links moves the ctimes of the venv's files; a run
    whose command changed nothing, while such a deletion goes on, must not take that for
    writes in place (it pauses the deletion): "Nothing changed", no transaction."""
    prefix, _ = shared_pair(tmp_path)
    first = cudafix("run", "--venv", prefix, "--", "true", env={CRASH_ENV: "trash-unlink:SIGSTOP"})
    assert first.returncode == 0 and "Nothing changed" in first.stdout, _quiet(first)
    assert _until(lambda: any(_state(p) == "T" for p in _emptiers(prefix)))
    (emptier,) = _emptiers(prefix)
    stopped.append(emptier)

    go, started = tmp_path / "go", tmp_path / "started"
    wait = f'touch "{started}"; while [ ! -e "{go}" ]; do sleep 0.05; done'
    second = _background("run", "--venv", prefix, "--", "sh", "-c", wait, env={})
    assert _until(started.exists)
    os.kill(emptier, signal.SIGCONT)  # the deletion goes on while the command runs
    time.sleep(1.0)
    go.touch()
    out, err = second.communicate(timeout=120)
    assert second.returncode == 0, out + err
    assert "rewritten in place" not in out + err and "Nothing changed" in out, out + err
    assert _snapshots(prefix) == []
    assert _until(lambda: _held(prefix) == [])  # and the deletion finished after it


def test_gc_waits_for_an_undo_that_reads_the_snapshot(tmp_path: Path, stopped: list[int]) -> None:
    """An undo stopped after its own snapshot still has to read the old one: a gc started
    meanwhile must not set that aside under it."""
    prefix, wheels = shared_pair(tmp_path)
    original = fingerprint(prefix)
    said = cudafix("doctor", "--venv", prefix)
    assert said.returncode == 1 and "clobbered" in said.stdout  # what the repair repairs
    assert repair_pa(prefix, wheels).returncode == 0
    undo = _background(
        "undo", "last", "--venv", prefix, "--yes", env={CRASH_ENV: "snapshot-done:SIGSTOP"}
    )
    stopped.append(undo.pid)
    assert _until(lambda: _state(undo.pid) == "T")

    gc = cudafix("gc", "--venv", prefix, "--keep", "0", "--lock-timeout", "1")
    _quiet(gc)
    assert gc.returncode == 4 and len(_errors(gc)) == 1, gc.stdout + gc.stderr
    assert _held(prefix) == []

    os.kill(undo.pid, signal.SIGCONT)
    out, err = undo.communicate(timeout=120)
    assert undo.returncode == 0 and "Traceback" not in err, out + err
    assert not diff_fingerprints(original, fingerprint(prefix))
    assert cudafix("gc", "--venv", prefix, "--keep", "0").returncode == 0
    again = cudafix("doctor", "--venv", prefix)
    assert (again.returncode, again.stdout) == (said.returncode, said.stdout)
    assert pending_transactions(prefix) == []


# -- remembered answers and caches ------------------------------------------------------------

CACHES = ["answers.json", "last-seen.json", "tree-cache.json", "dist-infos.json"]
"""The JSON files cudafix rewrites whole (the index of facts is SQLite's: its journal keeps it
whole, and a damaged one is rebuilt, ``tests/unit/test_elfindex.py``)."""
FAULTS = {
    "sigkill": lambda name: {CRASH_ENV: f"write-half@*/{name}"},
    "enospc": lambda name: {FAIL_ENV: f"write@*/{name}:ENOSPC"},
    "eacces": lambda name: {FAIL_ENV: f"write@*/{name}:EACCES"},
}


def _doctor(
    built: BuiltScenario, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    proc = cudafix("doctor", "--venv", built.venv, env=env)
    _quiet(proc)
    return proc


@pytest.mark.parametrize("fault", list(FAULTS))
@pytest.mark.parametrize("name", CACHES)
def test_a_cache_write_cut_half_way_leaves_the_old_file_and_the_right_answer(
    scenario: ScenarioFactory, name: str, fault: str
) -> None:
    built = scenario("clean")
    cache = StateDir(Path(built.venv)).cache
    _doctor(built)
    settle()
    remembered = _doctor(built)
    assert remembered.returncode == 0 and (cache / "answers.json").is_file()
    old = (cache / name).read_bytes()
    uv_uninstall(built.python, "torch")  # every cache, the answer and the memory change
    settle()

    cut = _doctor(built, env=FAULTS[fault](name))
    if fault == "sigkill":
        assert cut.returncode == -signal.SIGKILL, cut.stdout + cut.stderr
    assert (cache / name).read_bytes() == old  # the old file whole, never half a new one
    after = _doctor(built)
    for leftover in cache.glob(f".{name}.*.tmp"):  # a killed write's temporary is never read
        assert fault == "sigkill", leftover

    for made in cache.iterdir():  # cold, but for the memory of what provided a library
        if made.name != "last-seen.json":
            made.unlink()
    cold = _doctor(built)
    assert cold.stdout != remembered.stdout and "2 distributions" in cold.stdout, cold.stdout
    assert (after.returncode, after.stdout) == (cold.returncode, cold.stdout)
    if fault != "sigkill":
        assert (cut.returncode, cut.stdout) == (cold.returncode, cold.stdout)


# -- the stop of run's command ----------------------------------------------------------------

_WRITER = r"""
import os, sys, time
sp, pidfile = sys.argv[1], sys.argv[2]
with open(os.path.join(sp, "first_mod.py"), "w") as f:
    f.write("x = 1\n")
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        with open(pidfile + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.rename(pidfile + ".tmp", pidfile)
        for _ in range(1500):
            with open(os.path.join(sp, "daemon.txt"), "a") as f:
                f.write("x\n")
            time.sleep(0.02)
        os._exit(0)
    os._exit(0)
time.sleep(60)
"""
"""Writes a module, starts a daemon in a session of its own that appends to site-packages
every 20 ms for 30 s, and sleeps: cudafix is killed while both run."""


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
def test_cudafix_killed_while_its_command_and_a_daemon_write(tmp_path: Path, how: str) -> None:
    prefix, _ = shared_pair(tmp_path)
    before = fingerprint(prefix)
    said = cudafix("doctor", "--venv", prefix)
    sp = site_dir(prefix)
    pidfile = tmp_path / "daemon.pid"
    argv = [prefix / "bin" / "python", "-c", _WRITER, sp, pidfile]
    run = _background("run", "--venv", prefix, "--", *argv, env={})
    try:
        assert _until(lambda: pidfile.exists() and (sp / "daemon.txt").exists())
        daemon = int(pidfile.read_text())
        os.kill(run.pid, getattr(signal, how))
        out, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
    assert "Traceback" not in out + err, out + err
    if how == "SIGKILL":
        assert run.returncode == -signal.SIGKILL
        for _ in range(50):  # recover refuses while the command's group is still alive
            done = cudafix("recover", "--venv", prefix)
            if done.returncode != 4 or "still running" not in done.stderr:
                break
            time.sleep(0.1)
        assert done.returncode == 0, _quiet(done)
    else:
        assert run.returncode == 143, out + err
        assert "rolled back" in err, err
    assert pending_transactions(prefix) == []
    assert _until(lambda: _state(daemon) in ("gone", "Z"), 10), _state(daemon)
    time.sleep(0.2)  # a daemon still writing would show now
    assert not diff_fingerprints(before, fingerprint(prefix))
    again = cudafix("doctor", "--venv", prefix)  # the truth: as before, nothing pending
    assert (again.returncode, again.stdout) == (said.returncode, said.stdout), again.stderr
