"""``cudafix run -- CMD`` as a user runs it: its own options, live output, time limits,
signals, the whole environment snapshotted, writes in place found.

Each test drives the real CLI on a real venv (uv, real wheels) and a real command.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cudafix.process import group_members
from cudafix.tx.history import history, show
from cudafix.tx.pending import pending_transactions
from scenarios.fingerprint import diff_fingerprints, fingerprint
from tests.support.cli import as_json, cudafix
from tests.support.venvs import UV, settle, site_dir, site_rel, uv_env, venv_with
from tests.support.wheels import make_wheel

pytestmark = pytest.mark.slow
"""Runs the CLI on real venvs: left out of ``make test-fast``."""


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "pa", "1.0", {"pa_mod.py": b"A = 1\n"})
    return venv_with(tmp_path / "venv", wheels, "pa==1.0")


REMEMBERED = "the command is judged against its findings"


def _doctor_kept(prefix: Path, code: int = 0) -> None:
    """doctor, and again past the racy window (the first made ``.cudafix/``): its
    findings are remembered for the next run."""
    for _ in range(2):
        settle()
        assert cudafix("doctor", "--venv", prefix).returncode == code


def _journal(prefix: Path) -> list[dict[str, object]]:
    [txid] = history(prefix)[-1:] and [history(prefix)[-1].txid]
    return list(show(prefix, txid).journal)


def _pgid(prefix: Path) -> int:
    [record] = [r for r in _journal(prefix) if r["event"] == "process"]
    return int(record["pgid"])  # type: ignore[call-overload]


def _spawn(*args: str | Path) -> subprocess.Popen[str]:
    """cudafix in the background, its stdout read line by line; Ctrl-C reaches it as on a
    terminal, even where these tests were started in the background of a script (which
    starts them with SIGINT ignored, and Python then keeps it ignored)."""
    return subprocess.Popen(
        [sys.executable, "-m", "cudafix", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def _lines_until(proc: subprocess.Popen[str], marker: str) -> Iterator[str]:
    assert proc.stdout is not None
    for line in proc.stdout:
        yield line
        if marker in line:
            return
    raise AssertionError(f"cudafix ended before printing {marker!r}")


# -- options ---------------------------------------------------------------------------------


def test_options_before_the_separator_are_cudafix_own(venv: Path) -> None:
    argv = ["touch", str(venv / "made")]
    done = cudafix("run", "--venv", venv, "--json", "--yes", "--no-probe", "--", *argv)
    assert done.returncode == 0, done.stderr
    result = as_json(done)
    assert result["state"] == "committed" and result["argv"] == argv
    assert result["returncode"] == 0
    before = len(history(venv))
    bogus = cudafix("run", "--venv", venv, "--bogus", "--", "true")
    assert bogus.returncode == 2, bogus.stderr
    assert "--bogus" in bogus.stderr and "Traceback" not in bogus.stderr
    assert len(history(venv)) == before  # nothing ran, nothing was snapshotted


def test_json_failure_is_one_object_and_the_command_output_goes_to_stderr(venv: Path) -> None:
    script = 'echo said-this; touch "$VIRTUAL_ENV/made"; exit 3'
    done = cudafix("run", "--venv", venv, "--json", "--", "sh", "-c", script)
    assert done.returncode == 3  # the command's own status
    assert as_json(done)["state"] == "rolled-back"
    assert "said-this" in done.stderr and "said-this" not in done.stdout


# -- output ----------------------------------------------------------------------------------


def test_output_is_shown_while_the_command_runs(venv: Path, tmp_path: Path) -> None:
    """The command waits for a file the test creates only once it has seen the first line
    on cudafix's stdout: with output held back until the end, this cannot finish."""
    go = tmp_path / "go"
    script = f"echo tick 1; while [ ! -e {go} ]; do sleep 0.05; done; echo tick 2"
    proc = _spawn("run", "--venv", venv, "--timeout", "120", "--", "sh", "-c", script)
    seen = list(_lines_until(proc, "tick 1"))
    go.touch()
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert "tick 2" in out and seen[-1].strip() == "tick 1"


def test_a_failing_command_keeps_its_stdout(venv: Path) -> None:
    script = "echo 'No solution found when resolving'; echo 'hint: last line' >&2; "
    script += 'touch "$VIRTUAL_ENV/made"; exit 1'
    done = cudafix("run", "--venv", venv, "--", "sh", "-c", script)
    assert done.returncode == 1
    assert "No solution found when resolving" in done.stdout
    assert "rolled back" in done.stderr


def test_the_journal_keeps_a_bounded_tail(venv: Path) -> None:
    script = 'touch "$VIRTUAL_ENV/mark"; head -c 5000000 /dev/zero | tr "\\0" x; echo; echo the-end'
    done = cudafix("run", "--venv", venv, "--", "sh", "-c", script)
    assert done.returncode == 0, done.stderr[-2000:]
    [txid] = [e.txid for e in history(venv)]
    journal = venv / ".cudafix" / "transactions" / txid / "journal.jsonl"
    assert journal.stat().st_size < 500_000
    [step] = [r for r in show(venv, txid).journal if r["event"] == "backend"]
    assert step["stdout"].rstrip().endswith("the-end")
    assert "earlier bytes not kept" in step["stdout"]


# -- time and processes ----------------------------------------------------------------------


def test_timeout_stops_the_command_and_rolls_back(venv: Path) -> None:
    before = fingerprint(venv)
    sp = site_dir(venv)
    script = f"echo new > {sp}/new_mod.py; sleep 600"
    done = cudafix("run", "--venv", venv, "--timeout", "2", "--", "sh", "-c", script)
    assert done.returncode == 1, done.stderr
    assert "did not finish within 2 s" in done.stderr and "rolled back" in done.stderr
    assert not diff_fingerprints(before, fingerprint(venv))
    assert group_members(_pgid(venv)) == []


def test_a_daemon_left_by_the_command_does_not_hold_the_run(venv: Path) -> None:
    """``sh -c 'sleep 600 &'`` exits at once; the run ends with it (the clihelp timeout is
    300 s), and the leftover process is stopped, so nothing runs after the verdict."""
    script = 'touch "$VIRTUAL_ENV/mark"; sleep 600 & echo started'  # a change: it is recorded
    done = cudafix("run", "--venv", venv, "--", "sh", "-c", script)
    assert done.returncode == 0, done.stderr
    assert "started" in done.stdout
    assert group_members(_pgid(venv)) == []


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_to_cudafix_stops_the_command_and_rolls_back(
    venv: Path, sig: signal.Signals, code: int
) -> None:
    before = fingerprint(venv)
    sp = site_dir(venv)
    script = f"echo new > {sp}/new_mod.py; echo ready; sleep 600"
    proc = _spawn("run", "--venv", venv, "--", "sh", "-c", script)
    list(_lines_until(proc, "ready"))
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == code, err
    assert "error: interrupted; rolled back" in err and "Traceback" not in err
    assert "KeyboardInterrupt" not in err and "Terminated" not in err
    assert not diff_fingerprints(before, fingerprint(venv))
    assert group_members(_pgid(venv)) == []
    assert pending_transactions(venv) == []


def _wait_gone(pgid: int) -> None:
    """Wait (no time asserted) until the group is empty; pytest's own timeout bounds it."""
    while group_members(pgid):
        os.sched_yield()


def _killed_then_recovered(
    venv: Path, proc: subprocess.Popen[str]
) -> subprocess.CompletedProcess[str]:
    """SIGKILL cudafix once its command said ``ready``, wait until the command's group is
    gone too (it dies with cudafix; before, ``sleep`` lived on), then ``recover``."""
    list(_lines_until(proc, "ready"))
    pgid = _pgid(venv)
    proc.kill()
    proc.communicate(timeout=300)
    _wait_gone(pgid)
    done = cudafix("recover", "--venv", venv)
    assert done.returncode == 0, done.stderr
    return done


def test_sigkill_of_cudafix_alone_kills_the_command(venv: Path) -> None:
    before = fingerprint(venv)
    sp = site_dir(venv)
    script = f"echo new > {sp}/new_mod.py; echo ready; sleep 600"
    proc = _spawn("run", "--venv", venv, "--", "sh", "-c", script)
    _killed_then_recovered(venv, proc)  # the command died with cudafix
    assert not diff_fingerprints(before, fingerprint(venv))


def test_sigkill_of_cudafix_also_stops_what_left_the_group(venv: Path) -> None:
    """A descendant that left the command's group (``setsid``) is the wrapper's child once
    its parent dies (the wrapper is its subreaper), so it dies with cudafix too: it can no
    longer write into the environment after ``recover`` rolled back."""
    sp = site_dir(venv)
    late = sp / "late_mod.py"
    daemon = f"sleep 3; echo X = 1 > {late}"
    script = f"setsid sh -c '{daemon}' </dev/null >/dev/null 2>&1 & echo ready; sleep 600"
    proc = _spawn("run", "--venv", venv, "--", "sh", "-c", script)
    _killed_then_recovered(venv, proc)
    time.sleep(5)
    assert not late.exists()


def test_recover_refuses_while_a_process_of_the_transaction_lives(venv: Path) -> None:
    """cudafix and the command's parent killed at once (an OOM kill): the command lives on,
    and recover says so instead of rolling back under it."""
    before = fingerprint(venv)
    script = "echo ready; sleep 600"
    proc = _spawn("run", "--venv", venv, "--", "sh", "-c", script)
    list(_lines_until(proc, "ready"))
    pgid = _pgid(venv)
    proc.send_signal(signal.SIGSTOP)  # both die before either can act, as in an OOM kill
    os.kill(pgid, signal.SIGKILL)  # the group's leader is the command's parent
    proc.kill()
    proc.communicate(timeout=300)
    left = group_members(pgid)
    assert left, "the command should have outlived its parent here"
    refused = cudafix("recover", "--venv", venv)
    assert refused.returncode == 4, refused.stderr
    assert str(left[0][0]) in refused.stderr and "still running" in refused.stderr
    dry = cudafix("recover", "--venv", venv, "--dry-run")
    assert "still running" in dry.stdout + dry.stderr
    os.killpg(pgid, signal.SIGKILL)
    _wait_gone(pgid)
    assert cudafix("recover", "--venv", venv).returncode == 0
    assert not diff_fingerprints(before, fingerprint(venv))


# -- what is snapshotted ---------------------------------------------------------------------


def test_the_whole_prefix_is_restored(venv: Path) -> None:
    before = fingerprint(venv)
    script = (
        'mkdir -p "$VIRTUAL_ENV/share/x" "$VIRTUAL_ENV/etc" "$VIRTUAL_ENV/include/y";'
        'echo data > "$VIRTUAL_ENV/share/x/f"; echo cfg > "$VIRTUAL_ENV/etc/c";'
        'echo h > "$VIRTUAL_ENV/include/y/h.h"; echo "extra = 1" >> "$VIRTUAL_ENV/pyvenv.cfg";'
        "exit 1"
    )
    done = cudafix("run", "--venv", venv, "--", "sh", "-c", script)
    assert done.returncode == 1, done.stderr
    assert "rolled back" in done.stderr
    assert not diff_fingerprints(before, fingerprint(venv))


@pytest.mark.parametrize("after_doctor", [False, True])
def test_a_write_in_place_that_keeps_size_and_mtime_is_found(
    venv: Path, after_doctor: bool
) -> None:
    """Its owners are named whether the run read the environment itself or was judged
    against the last doctor's remembered reading."""
    if after_doctor:
        _doctor_kept(venv)
    sp = site_dir(venv)
    target = sp / "pa_mod.py"
    writer = (
        "import os, sys\n"
        "p = sys.argv[1]\n"
        "st = os.stat(p)\n"
        "with open(p, 'r+b') as f:\n    f.write(b'B')\n"
        "os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))\n"
        "raise SystemExit(1)\n"
    )
    done = cudafix("run", "-v", "--venv", venv, "--", venv / "bin" / "python", "-c", writer, target)
    assert done.returncode == 1, done.stderr
    assert (REMEMBERED in done.stderr) == after_doctor
    assert "rewritten in place" in done.stderr and "pa_mod.py" in done.stderr
    assert target.read_bytes() == b"B = 1\n"  # what the command left, and cudafix says so
    said = json.dumps(show(venv, history(venv)[-1].txid).journal)
    assert "pa_mod.py" in said
    # the way back it names runs as printed and brings pa's own bytes back
    line = done.stderr.split("reinstall their distributions to bring them back: `")[1]
    argv = shlex.split(line.split("`")[0])
    assert argv[:2] == ["cudafix", "run"] and "pa==1.0" in argv
    wheels = venv.parent / "wheels"
    env = {"UV_FIND_LINKS": str(wheels), "UV_NO_INDEX": "1"}
    fixed = cudafix(*argv[1:], env=env)
    assert fixed.returncode == 0, fixed.stderr
    assert target.read_bytes() == b"A = 1\n"


# -- the target, resolved once ---------------------------------------------------------------


def test_a_venv_link_swapped_during_the_run_does_not_redirect_the_rollback(
    tmp_path: Path,
) -> None:
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "pa", "1.0", {"pa_mod.py": b"A = 1\n"})
    make_wheel(wheels, "pb", "1.0", {"pb_mod.py": b"B = 1\n"})
    real = venv_with(tmp_path / "real", wheels, "pa==1.0")
    other = venv_with(tmp_path / "other", wheels, "pb==1.0")
    link = tmp_path / "link"
    link.symlink_to(real)
    before_real, before_other = fingerprint(real), fingerprint(other)
    sp = site_rel(real)
    script = f"ln -sfn {other} {link}; echo new > {real / sp}/new_mod.py; exit 1"
    done = cudafix("run", "--venv", link, "--", "sh", "-c", script)
    assert done.returncode == 1, done.stderr
    assert not diff_fingerprints(before_other, fingerprint(other))
    assert not diff_fingerprints(before_real, fingerprint(real))
    assert pending_transactions(real) == [] and history(other) == []


# -- small ones ------------------------------------------------------------------------------


def test_a_socket_in_the_environment_is_named(venv: Path) -> None:
    sp = site_dir(venv)
    bind = (
        "import os, socket; os.chdir(os.sys.argv[1]); socket.socket(socket.AF_UNIX).bind('d.sock')"
    )
    subprocess.run([sys.executable, "-c", bind, sp], check=True)  # the socket file stays
    done = cudafix("run", "--venv", venv, "--", "true")
    assert done.returncode != 0
    assert "d.sock" in done.stderr and "Traceback" not in done.stderr
    assert "nothing was changed" in done.stderr


def test_undo_after_a_run_that_made_a_directory_a_symlink(venv: Path, tmp_path: Path) -> None:
    sp = site_dir(venv)
    (sp / "pkgdir").mkdir()
    (sp / "pkgdir" / "x.py").write_text("x = 1\n")
    before = fingerprint(venv)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "x.py").write_text("outside\n")
    relative = os.path.relpath(elsewhere, sp)
    script = f"rm -r {sp}/pkgdir && ln -s {relative} {sp}/pkgdir"
    done = cudafix("run", "--venv", venv, "--", "sh", "-c", script)
    assert done.returncode == 0, done.stderr
    txid = history(venv)[-1].txid
    undone = cudafix("undo", txid, "--venv", venv, "--yes")
    assert undone.returncode == 0, undone.stderr
    assert not diff_fingerprints(before, fingerprint(venv))
    assert [p.name for p in elsewhere.iterdir()] == ["x.py"]  # nothing written through it
    assert (elsewhere / "x.py").stat().st_nlink == 1


# -- uv's lock -------------------------------------------------------------------------------

_FLOCK = """\
import fcntl, os, sys, time
lock, mark, until = sys.argv[1:4]
fd = os.open(lock, os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
if mark != "-":
    open(mark, "w").write("written while holding uv's lock\\n")
print("holding", flush=True)
while not os.path.exists(until):
    time.sleep(0.02)
time.sleep(0.5)
"""
"""Takes ``<venv>/.lock`` as uv does (an exclusive flock), writes ``mark``, holds it until
the file ``until`` exists and half a second more: a ``uv pip install`` whose install takes a
while (cudafix looks for holders of the lock every 50 ms, and as it takes the lock back)."""


def test_an_outside_process_that_gets_uvs_lock_inside_the_run_is_named(
    venv: Path, tmp_path: Path
) -> None:
    from cudafix.tx.lock import lock_users

    before = fingerprint(venv)
    lock, go, done_mark = venv / ".lock", tmp_path / "go", tmp_path / "go-outside"
    intruder_file = site_dir(venv) / "outsider_mod.py"
    py = sys.executable
    ours = _spawn("run", "--venv", venv, "--", py, "-c", _FLOCK, lock, "-", go)
    list(_lines_until(ours, "holding"))  # the run's own command has uv's lock
    outside = subprocess.Popen(
        [py, "-c", _FLOCK, lock, intruder_file, done_mark], stdout=subprocess.PIPE, text=True
    )
    while not any(u.pid == outside.pid and u.waiting for u in lock_users(lock)):
        os.sched_yield()  # the outside process queues on the lock
    go.touch()  # our command ends: the outside process gets the lock inside the transaction
    assert outside.stdout is not None and "holding" in outside.stdout.readline()
    done_mark.touch()
    outside.communicate(timeout=300)
    out, err = ours.communicate(timeout=300)
    if ours.returncode == 0:  # cudafix took the lock back first: the outsider waited for the run
        assert "Nothing changed" in out + err, err
        assert intruder_file.exists()  # written after the run, and kept
        return
    assert ours.returncode == 1, err
    assert f"pid {outside.pid}" in err and "rolled back" in err, err
    assert not intruder_file.exists()  # rolled away, and the message says so
    assert not diff_fingerprints(before, fingerprint(venv))


def test_undo_of_a_run_that_wrote_in_place_works_as_printed(venv: Path) -> None:
    sp = site_dir(venv)
    before = fingerprint(venv)
    script = f"echo more >> {sp}/pa_mod.py; echo new > {sp}/new_mod.py"
    done = cudafix("run", "--venv", venv, "--accept", "--", "sh", "-c", script)
    assert done.returncode == 0, done.stderr
    assert "pa_mod.py was rewritten in place" in done.stderr
    hint = done.stdout.split("Undo with: ")[1].split(" (")[0].split()
    assert hint[:2] == ["cudafix", "undo"] and "rewritten in place" in done.stdout
    undone = cudafix(*hint[1:], "--yes")
    assert undone.returncode == 0, undone.stderr
    assert not (sp / "new_mod.py").exists()
    left = diff_fingerprints(before, fingerprint(venv))
    assert [line.split()[1] for line in left] == [f"{site_rel(venv)}/pa_mod.py"]


def test_recover_after_a_kill_names_a_write_in_place(venv: Path) -> None:
    target = site_dir(venv) / "pa_mod.py"
    writer = (
        "import os, sys, time\n"
        "p = sys.argv[1]\n"
        "st = os.stat(p)\n"
        "with open(p, 'r+b') as f:\n    f.write(b'B')\n"
        "os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))\n"
        "print('ready', flush=True)\n"
        "time.sleep(600)\n"
    )
    proc = _spawn("run", "--venv", venv, "--", venv / "bin" / "python", "-c", writer, target)
    done = _killed_then_recovered(venv, proc)
    assert "pa_mod.py was rewritten in place" in done.stderr
    assert target.read_bytes() == b"B = 1\n"


# -- cudafix's own state ---------------------------------------------------------------------


def test_a_command_that_clears_the_venv_is_rolled_back_from_held_state(venv: Path) -> None:
    before = fingerprint(venv)
    done = cudafix("run", "--venv", venv, "--", UV, "venv", "--clear", venv)
    assert done.returncode == 1, done.stderr
    assert "removed or replaced cudafix's own state" in done.stderr and "rolled back" in done.stderr
    assert not diff_fingerprints(before, fingerprint(venv))
    assert pending_transactions(venv) == []
    assert [e.state for e in history(venv)] == ["rolled-back"]


def test_a_command_that_replaces_the_state_with_a_symlink(venv: Path, tmp_path: Path) -> None:
    before = fingerprint(venv)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    sp = site_dir(venv)
    script = f"echo x > {sp}/new_mod.py; rm -rf {venv}/.cudafix; ln -s {elsewhere} {venv}/.cudafix"
    done = cudafix("run", "--venv", venv, "--", "sh", "-c", script)
    assert done.returncode == 1, done.stderr
    assert "rolled back" in done.stderr
    assert not diff_fingerprints(before, fingerprint(venv))
    assert not (venv / ".cudafix").is_symlink() and list(elsewhere.iterdir()) == []
    assert pending_transactions(venv) == []


@pytest.mark.parametrize(
    "change",
    [
        'rm "$f"',
        'echo B = 2 > "$f.new" && mv "$f.new" "$f"',
        'd=$(dirname "$f"); t=$(stat -c %y "$d"); rm "$f"; touch -d "$t" "$d"',
    ],
    ids=["rm", "mv", "rm-and-put-the-mtime-back"],
)
def test_a_command_that_removes_or_replaces_one_snapshotted_file_is_rolled_back(
    venv: Path, change: str
) -> None:
    """One name in the snapshot, not the whole state: found through its directory."""
    before = fingerprint(venv)
    store = '"$VIRTUAL_ENV"/.cudafix/transactions/*/snapshot'
    snap = f"$(find {store} -samefile {site_dir(venv)}/pa_mod.py)"
    script = f"echo x > {site_dir(venv)}/new_mod.py; for f in {snap}; do {change}; done"
    done = cudafix("run", "--venv", venv, "--", "sh", "-c", script)
    assert done.returncode == 1, done.stderr
    assert "removed or replaced cudafix's own state" in done.stderr and "rolled back" in done.stderr
    assert not diff_fingerprints(before, fingerprint(venv))
    assert (site_dir(venv) / "pa_mod.py").read_bytes() == b"A = 1\n"


def test_on_a_terminal_the_command_gets_a_terminal(venv: Path) -> None:
    """uv draws its progress only on a terminal: the command sees one where cudafix has one."""
    import shlex
    import shutil

    if shutil.which("script") is None:
        pytest.skip("needs script(1) for a pseudo-terminal")
    probe = "test -t 1 && echo out-is-a-tty; test -t 2 && echo err-is-a-tty >&2; true"
    argv = [sys.executable, "-m", "cudafix", "run", "--venv", str(venv), "--", "sh", "-c", probe]
    done = subprocess.run(
        ["script", "-qec", shlex.join(argv), "/dev/null"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout
    assert "out-is-a-tty" in done.stdout and "err-is-a-tty" in done.stdout


def test_what_the_command_installed_is_imported_unless_no_probe(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "pa", "1.0", {"pa_mod.py": b"A = 1\n"})
    make_wheel(wheels, "pbad", "1.0", {"pbad_mod.py": b"raise ImportError('broken build')\n"})
    venv = venv_with(tmp_path / "venv", wheels, "pa==1.0")
    before = fingerprint(venv)
    uv_install = [
        UV, "pip", "install", "--python", venv / "bin" / "python", "--offline", "--no-index",
        "--find-links", wheels, "pbad==1.0",
    ]  # fmt: skip
    probed = cudafix("run", "--venv", venv, "--", *uv_install, env=uv_env())
    assert probed.returncode == 1, probed.stderr
    assert "probe failed" in probed.stderr and "broken build" in probed.stderr
    assert not diff_fingerprints(before, fingerprint(venv))
    unprobed = cudafix("run", "--venv", venv, "--no-probe", "--", *uv_install, env=uv_env())
    assert unprobed.returncode == 0, unprobed.stderr
    assert (site_dir(venv) / "pbad_mod.py").exists()


def test_a_command_that_mends_part_of_a_problem_is_no_new_problem(tmp_path: Path) -> None:
    """Findings are compared by subject and paths, not wording: 3 missing files going to 1
    changes the message's count, yet nothing new is wrong, so the run commits; a command
    that deletes one more file is a new problem and is rolled back."""
    wheels = tmp_path / "wheels"
    files = {f"pm/m{i}.py": f"X = {i}\n".encode() for i in range(4)}
    make_wheel(wheels, "pm", "1.0", {"pm/__init__.py": b"", **files})
    prefix = venv_with(tmp_path / "venv", wheels, "pm==1.0")
    pm = site_dir(prefix) / "pm"
    saved = {n: (pm / n).read_bytes() for n in ("m0.py", "m1.py")}
    for n in ("m0.py", "m1.py", "m2.py"):
        (pm / n).unlink()
    mend = "; ".join(f"printf '{saved[n].decode().strip()}\\n' > {pm / n}" for n in saved)
    done = cudafix("run", "--venv", prefix, "--no-probe", "--", "sh", "-c", mend)
    assert done.returncode == 0, done.stderr
    assert (pm / "m0.py").is_file() and (pm / "m1.py").is_file()
    worse = cudafix("run", "--venv", prefix, "--no-probe", "--", "rm", str(pm / "m3.py"))
    assert worse.returncode == 1, worse.stderr
    assert "[missing-files]" in worse.stderr and (pm / "m3.py").is_file()


def test_a_command_that_changes_nothing_is_judged_without_reading_again(venv: Path) -> None:
    """A command that changed nothing is neither judged nor probed. A command that changes
    what the diagnosis reads is judged on a fresh read, and its new problem rolls it back."""
    idle = cudafix("run", "-v", "--venv", venv, "--", "python", "-c", "pass")
    assert idle.returncode == 0, idle.stderr
    assert "Nothing changed" in idle.stdout and "probing" not in idle.stderr
    target = site_dir(venv) / "pa_mod.py"
    broke = cudafix("run", "-v", "--venv", venv, "--no-probe", "--", "rm", str(target))
    assert broke.returncode == 1, broke.stderr
    assert "nothing the diagnosis reads changed" not in broke.stderr
    assert "[missing-files]" in broke.stderr and target.is_file()


def test_after_doctor_a_run_is_judged_against_its_remembered_findings(tmp_path: Path) -> None:
    """doctor's findings are kept beside its answer, so a run right after it does not read
    the environment first: a problem doctor found is not the command's doing (the command
    changes what the diagnosis reads, so the findings after are compared), and a problem
    the command makes still rolls it back."""
    wheels = tmp_path / "wheels"
    files = {f"pm/m{i}.py": f"X = {i}\n".encode() for i in range(3)}
    make_wheel(wheels, "pm", "1.0", {"pm/__init__.py": b"", **files})
    prefix = venv_with(tmp_path / "venv", wheels, "pm==1.0")
    pm = site_dir(prefix) / "pm"
    (pm / "m0.py").unlink()
    _doctor_kept(prefix, code=1)
    touch = cudafix("run", "-v", "--venv", prefix, "--", "touch", str(pm / "new.py"))
    assert touch.returncode == 0, touch.stderr
    assert REMEMBERED in touch.stderr and (pm / "new.py").is_file()
    _doctor_kept(prefix, code=1)
    worse = cudafix("run", "-v", "--venv", prefix, "--", "rm", str(pm / "m1.py"))
    assert worse.returncode == 1, worse.stderr
    assert REMEMBERED in worse.stderr
    assert "[missing-files]" in worse.stderr and (pm / "m1.py").is_file()


def test_runs_after_doctor_keep_its_findings_while_nothing_doctor_reads_changed(
    venv: Path,
) -> None:
    """A run's snapshot moves the ctime of every file it links, and doctor's findings do
    not depend on ctimes: runs that change nothing doctor reads keep being judged against
    them. A command that changes what doctor reads ends that; the next run reads first,
    and keeps its own reading's findings for the run after it."""
    _doctor_kept(venv)
    for _ in range(2):
        idle = cudafix("run", "-v", "--venv", venv, "--", "python", "-c", "pass")
        assert idle.returncode == 0, idle.stderr
        assert REMEMBERED in idle.stderr
    new = site_dir(venv) / "new_mod.py"
    touch = cudafix("run", "-v", "--venv", venv, "--", "touch", str(new))
    assert touch.returncode == 0, touch.stderr
    assert REMEMBERED in touch.stderr and new.is_file()
    settle()  # the new file is then no recent change
    after = cudafix("run", "-v", "--venv", venv, "--", "python", "-c", "pass")
    assert after.returncode == 0, after.stderr
    assert REMEMBERED not in after.stderr and "reading distributions" in after.stderr
    again = cudafix("run", "-v", "--venv", venv, "--", "python", "-c", "pass")
    assert again.returncode == 0, again.stderr
    assert REMEMBERED in again.stderr


def test_a_change_since_doctor_is_not_judged_against_its_findings(tmp_path: Path) -> None:
    """A file deleted after doctor ran (outside cudafix) moves the stamp of what doctor
    read: the run reads the environment itself, so the deletion is not taken for the
    command's doing and the run commits."""
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "pm", "1.0", {"pm/__init__.py": b"", "pm/m0.py": b"X = 0\n"})
    prefix = venv_with(tmp_path / "venv", wheels, "pm==1.0")
    pm = site_dir(prefix) / "pm"
    _doctor_kept(prefix, code=0)
    (pm / "m0.py").unlink()
    done = cudafix("run", "-v", "--venv", prefix, "--", "touch", str(pm / "new.py"))
    assert done.returncode == 0, done.stderr
    assert REMEMBERED not in done.stderr and "reading distributions" in done.stderr


def test_a_process_that_leaves_the_group_does_not_outlive_the_run(venv: Path) -> None:
    """``setsid`` takes a descendant out of the command's process group, so stopping the
    group misses it; cudafix is its subreaper, and stops it before judging, so it cannot
    write into the environment after the transaction committed."""
    late = site_dir(venv) / "late_mod.py"
    daemon = f"sleep 2; echo X = 1 > {late}"
    script = f"setsid sh -c '{daemon}' </dev/null >/dev/null 2>&1 & echo ready"
    done = cudafix("run", "--venv", venv, "--no-probe", "--", "sh", "-c", script)
    assert done.returncode == 0, done.stderr
    time.sleep(4)
    assert not late.exists()


def test_a_run_that_cannot_read_the_environment_never_starts_its_command(
    tmp_path: Path,
) -> None:
    """The reading before the command is taken under the lock, once the snapshot is: when
    it fails (here an unreadable ``$CUDAFIX_RUNTIME_TABLE``), the transaction is dropped as
    one that changed nothing, the command never runs, and the error is said as it is."""
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "pa", "1.0", {"pa_mod.py": b"A = 1\n"})
    prefix = venv_with(tmp_path / "venv", wheels, "pa==1.0")
    bad = tmp_path / "runtime.toml"
    bad.write_text("[runtime\n")
    marker = tmp_path / "ran"
    before = fingerprint(prefix)
    env = {**os.environ, "CUDAFIX_RUNTIME_TABLE": str(bad)}
    done = cudafix("run", "--venv", prefix, "--", "touch", marker, env=env)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: $CUDAFIX_RUNTIME_TABLE ")
    assert "Traceback" not in done.stderr
    assert not marker.exists()
    assert pending_transactions(prefix) == [] and history(prefix) == []
    assert not diff_fingerprints(before, fingerprint(prefix))


@pytest.mark.parametrize(("files", "limit"), [(400, 384), (1200, 1600)])
def test_a_snapshot_larger_than_the_open_file_limit_still_commits(
    tmp_path: Path, files: int, limit: int
) -> None:
    """The snapshot is held open file by file; past the open-file limit it is held in part,
    leaving descriptors for the run itself (it took every one, and the run then failed on
    its own lock with "Too many open files"), and the command's output is read from pipes
    above descriptor 1024 (``select()`` refused those)."""
    wheels = tmp_path / "wheels"
    many = {f"pa_many/m{i}.py": b"A = 1\n" for i in range(files)}
    make_wheel(wheels, "pa", "1.0", {"pa_mod.py": b"A = 1\n", **many})
    prefix = venv_with(tmp_path / "venv", wheels, "pa==1.0")

    def low_limit() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    argv = [sys.executable, "-m", "cudafix", "run", "--venv", str(prefix), "--", "echo", "hi"]
    done = subprocess.run(
        argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, preexec_fn=low_limit
    )
    assert done.returncode == 0, done.stderr
    assert "Too many open files" not in done.stderr
    assert done.stdout.splitlines()[0] == "hi"


_ESCAPE = r"""
import os, sys, time
how, path = sys.argv[1], sys.argv[2]
group, up = os.getpgrp(), os.getppid()
while os.getpgid(up) == group:  # the first process above the command's group: cudafix
    stat = open(f"/proc/{up}/stat").read()
    up = int(stat[stat.rindex(")") + 2 :].split()[1])
if os.fork():
    os._exit(0)
if how == "setsid":
    os.setsid()
else:
    os.setpgid(0, os.getpgid(up))  # joins cudafix's own process group
if os.fork():
    os._exit(0)  # twice: the writer is nobody's child but the subreaper's
n = 0
while True:
    n += 1
    with open(path, "w") as fh:
        fh.write(f"N = {n}\n")
    time.sleep(0.02)
"""
"""A daemon that leaves the command's process group (``setsid``, or into cudafix's own) by a
double fork and keeps rewriting ``path`` under site-packages."""


def _escaping(how: str, late: Path, code: int) -> list[str]:
    wait = f"while [ ! -s {late} ]; do sleep 0.02; done"
    py = shlex.quote(sys.executable)
    return ["sh", "-c", f"{py} -c {shlex.quote(_ESCAPE)} {how} {late}; {wait}; exit {code}"]


@pytest.mark.parametrize("how", ["setsid", "join"])
@pytest.mark.parametrize("cell", ["cgroup", "tree"])
def test_an_escaped_writer_is_stopped_before_the_verdict_and_rolled_back(
    venv: Path, how: str, cell: str
) -> None:
    """Whatever group or session a descendant moved to, it is stopped before the run is
    judged (through the command's cgroup, or the process tree cudafix is subreaper of):
    the rollback is final, and nothing writes into the environment after it."""
    before = fingerprint(venv)
    late = site_dir(venv) / "late_mod.py"
    env = {"CUDAFIX_TEST_NO_CGROUP": "1"} if cell == "tree" else {}
    done = cudafix("run", "--venv", venv, "--", *_escaping(how, late, 3), env=env)
    assert done.returncode == 3, done.stderr
    assert "rolled back" in done.stderr
    time.sleep(0.5)
    assert not late.exists()
    assert not diff_fingerprints(before, fingerprint(venv))


@pytest.mark.parametrize("cell", ["cgroup", "tree"])
def test_an_escaped_writer_does_not_write_after_the_commit(venv: Path, cell: str) -> None:
    before = fingerprint(venv)
    late = site_dir(venv) / "late_mod.py"
    env = {"CUDAFIX_TEST_NO_CGROUP": "1"} if cell == "tree" else {}
    done = cudafix("run", "--venv", venv, "--no-probe", "--", *_escaping("join", late, 0), env=env)
    assert done.returncode == 0, done.stderr
    written = late.read_bytes()
    time.sleep(0.5)
    assert late.read_bytes() == written
    assert cudafix("undo", "last", "--venv", venv, "--yes").returncode == 0
    assert not diff_fingerprints(before, fingerprint(venv))


# -- other writers ---------------------------------------------------------------------------


def _until(mark: Path) -> str:
    return f"while [ ! -e {mark} ]; do sleep 0.05; done"


def test_an_outside_uv_install_waits_for_the_run(tmp_path: Path) -> None:
    """uv's lock is held for the whole run and lent only to the command's own processes: a
    ``uv pip install`` from outside waits until the run has rolled back, so its install is
    neither done inside the transaction nor undone by the rollback."""
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "pa", "1.0", {"pa_mod.py": b"A = 1\n"})
    make_wheel(wheels, "pb", "1.0", {"pb_mod.py": b"B = 1\n"})
    venv = venv_with(tmp_path / "venv", wheels, "pa==1.0")
    sp, go = site_dir(venv), tmp_path / "go"
    script = f"echo ready; {_until(go)}; echo X = 1 > {sp}/mine_mod.py; exit 1"
    ours = _spawn("run", "--venv", venv, "--", "sh", "-c", script)
    list(_lines_until(ours, "ready"))
    install = [UV, "pip", "install", "--offline", "--no-index", "--find-links", wheels]
    outside = subprocess.Popen(
        [*install, "--python", venv / "bin" / "python", "pb==1.0"],
        env=uv_env(tmp_path / "uv-cache"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(2)
    assert outside.poll() is None, "the outside install did not wait for the run"
    go.touch()
    _, err = ours.communicate(timeout=300)
    assert ours.returncode == 1, err
    assert "rolled back" in err and "outside this transaction" not in err, err
    _, uv_err = outside.communicate(timeout=300)
    assert outside.returncode == 0, uv_err
    assert (sp / "pb_mod.py").exists() and not (sp / "mine_mod.py").exists()
    assert list(sp.glob("pb-1.0.dist-info"))


_HOLDS_OPEN = (
    "import sys, time\n"
    "f = open(sys.argv[1], 'w')\n"
    "f.write('F = 1\\n')\n"
    "f.flush()\n"
    "print('open', flush=True)\n"
    "time.sleep(1.5)\n"
    "f.close()\n"
)
"""A writer that takes no lock (as pip takes none), holding its file open a while."""


@pytest.mark.parametrize("code", [1, 0], ids=["rolled-back", "committed-then-undone"])
def test_a_change_by_a_writer_outside_the_run_is_named_and_kept(venv: Path, code: int) -> None:
    before = fingerprint(venv)
    sp, go = site_dir(venv), venv.parent / "go"
    foreign = sp / "foreign_mod.py"
    script = f"echo ready; {_until(go)}; echo X = 1 > {sp}/mine_mod.py; exit {code}"
    ours = _spawn("run", "--venv", venv, "--no-probe", "--", "sh", "-c", script)
    list(_lines_until(ours, "ready"))
    writer = subprocess.run(
        [sys.executable, "-c", _HOLDS_OPEN, foreign], capture_output=True, text=True, check=True
    )
    assert "open" in writer.stdout
    go.touch()
    _, err = ours.communicate(timeout=300)
    assert ours.returncode == code, err
    assert "outside this transaction" in err and "foreign_mod.py" in err, err
    if code == 0:
        undone = cudafix("undo", "last", "--venv", venv, "--yes")
        assert undone.returncode == 0, undone.stderr
    assert foreign.read_text() == "F = 1\n"
    assert not (sp / "mine_mod.py").exists()
    diff = diff_fingerprints(before, fingerprint(venv))
    assert len(diff) == 1 and "foreign_mod.py" in diff[0], diff


def test_the_lock_is_not_lent_while_an_outside_uv_waits_for_it(tmp_path: Path) -> None:
    """The command's own uv and an outside one both wait for uv's lock: lending it would
    let either in, so the run stops and rolls back, naming the other; the outside install
    then runs after it, and stays."""
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "pa", "1.0", {"pa_mod.py": b"A = 1\n"})
    make_wheel(wheels, "pb", "1.0", {"pb_mod.py": b"B = 1\n"})
    make_wheel(wheels, "pc", "1.0", {"pc_mod.py": b"C = 1\n"})
    venv = venv_with(tmp_path / "venv", wheels, "pa==1.0")
    sp, go, lock = site_dir(venv), tmp_path / "go", venv / ".lock"
    install = [UV, "pip", "install", "--offline", "--no-index", "--find-links", wheels]
    python = ["--python", venv / "bin" / "python"]
    ours_uv = shlex.join(map(str, [*install, *python, "pc==1.0"]))
    script = f"echo X = 1 > {sp}/mine_mod.py; echo ready; {_until(go)}; {ours_uv}"
    env = uv_env(tmp_path / "uv-cache")
    ours = subprocess.Popen(
        [sys.executable, "-m", "cudafix", "run", "--venv", venv, "--", "sh", "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    list(_lines_until(ours, "ready"))
    outside = subprocess.Popen(
        [*install, *python, "pb==1.0"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    from cudafix.tx.lock import lock_users

    deadline = time.monotonic() + 60
    try:
        while not any(u.pid == outside.pid and u.waiting for u in lock_users(lock)):
            assert outside.poll() is None and time.monotonic() < deadline, "uv did not wait"
            time.sleep(0.01)
    finally:
        go.touch()
    _, err = ours.communicate(timeout=300)
    assert ours.returncode == 1, err
    assert f"pid {outside.pid}" in err and "not lent" in err and "rolled back" in err, err
    _, uv_err = outside.communicate(timeout=300)
    assert outside.returncode == 0, uv_err
    assert (sp / "pb_mod.py").exists()
    assert not (sp / "pc_mod.py").exists() and not (sp / "mine_mod.py").exists()
