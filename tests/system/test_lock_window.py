"""Changes made while a run waits for the lock: caught under the lock, never applied stale."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from cudafix.env.statedir import StateDir
from tests.support.cli import cudafix
from tests.support.venvs import site_rel

pytestmark = pytest.mark.slow
"""Builds real venvs or runs the CLI through transactions: left out of ``make test-fast``."""


def _same_size_same_mtime(path: Path) -> None:
    st = path.stat()
    data = path.read_bytes()
    path.write_bytes(data[::-1])
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns


def _edit_record(path: Path) -> None:
    lines = path.read_text().splitlines(keepends=True)
    lines = [ln.replace("sha256=", "sha256=AAAA", 1) if "pb_mod.py" in ln else ln for ln in lines]
    path.write_text("".join(lines))


def _change_while_waiting(
    prefix: Path, plan_file: Path, change: Callable[[], None]
) -> subprocess.CompletedProcess[str]:
    lock = StateDir(prefix).lock
    lock.parent.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl,sys\nf=open(sys.argv[1],'a')\n"
         "fcntl.flock(f, fcntl.LOCK_EX)\nprint('held', flush=True)\nsys.stdin.read()", str(lock)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    argv = [
        sys.executable,
        "-m",
        "cudafix",
        "apply",
        str(plan_file),
        "--yes",
        "--lock-timeout",
        "60",
    ]
    run = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert run.stderr is not None
    seen = []
    for line in run.stderr:
        seen.append(line)
        if line.startswith("waiting for another cudafix run"):
            break
    change()
    holder.communicate("")
    out, err = run.communicate(timeout=300)
    return subprocess.CompletedProcess(argv, run.returncode, out, "".join(seen) + err)


@pytest.mark.parametrize("what", ["bytes", "record"])
def test_a_change_made_while_waiting_for_the_lock_is_refused(
    venv: tuple[Path, Path], tmp_path: Path, what: str
) -> None:
    prefix, wheels = venv
    sp = prefix / site_rel(prefix)
    plan_file = tmp_path / "plan.json"
    made = cudafix(
        "remove", "pa", "--venv", prefix, "--repair", "--dry-run", "--offline",
        "--find-links", wheels, "--out", plan_file,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    if what == "bytes":
        change = lambda: _same_size_same_mtime(sp / "shared" / "lib.so")  # noqa: E731
    else:
        change = lambda: _edit_record(sp / "pb-1.0.dist-info" / "RECORD")  # noqa: E731
    proc = _change_while_waiting(prefix, plan_file, change)
    assert proc.returncode == 3, proc.stderr
    assert "changed since this plan was made" in proc.stderr
    assert (sp / "pa_mod.py").exists()


def test_a_concurrent_uv_install_waits_and_is_not_wiped(
    venv: tuple[Path, Path], tmp_path: Path
) -> None:
    import uv

    from tests.support.venvs import uv_env
    from tests.support.wheels import make_wheel

    prefix, wheels = venv
    sp = prefix / site_rel(prefix)
    make_wheel(wheels, "pc", "1.0", {"pc_mod.py": b"C = 1\n"})
    started = tmp_path / "probe-started"
    probe = f"touch {started}; sleep 4; exit 1"
    argv = [sys.executable, "-m", "cudafix", "remove", "pa", "--venv", str(prefix), "--repair",
            "--yes", "--offline", "--find-links", str(wheels), "--probe-cmd", probe]  # fmt: skip
    run = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)  # fmt: skip
    import time

    deadline = time.monotonic() + 120
    while not started.exists():
        assert run.poll() is None and time.monotonic() < deadline, run.communicate()
        time.sleep(0.05)
    install = subprocess.Popen(
        [uv.find_uv_bin(), "pip", "install", "-q", "--python", str(prefix / "bin" / "python"),
         "--offline", "--no-index", "--find-links", str(wheels), "--no-deps", "pc==1.0"],
        env=uv_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    _out, err = run.communicate(timeout=300)
    assert run.returncode == 1, err
    assert "rolled back" in err
    said = install.communicate(timeout=120)
    assert install.returncode == 0, said
    assert (sp / "pc_mod.py").read_bytes() == b"C = 1\n"
    assert (sp / "pa_mod.py").exists()
