"""``cudafix.process.reap``: every process a command started is stopped, wherever it went;
nothing else is. Run in a child interpreter, as being a subreaper is for a whole process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

_SCRIPT = r"""
import os, subprocess, sys, time
from cudafix.process import reap
reap.become_subreaper()
kept = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
before = reap.identities(os.getpid())
escape = (
    "import os, time\n"
    "if os.fork(): os._exit(0)\n"
    "os.setsid()\n"
    "if os.fork(): os._exit(0)\n"
    "print(os.getpid(), flush=True)\n"
    "time.sleep(60)\n"
)
cell = reap.open_cell() if sys.argv[1] == "cell" else None
setup = cell.join if cell is not None else None
child = subprocess.Popen([sys.executable, "-c", escape], stdout=subprocess.PIPE, text=True,
                         preexec_fn=setup)
daemon = int(child.stdout.readline())
child.wait()
assert reap.read_proc(daemon) is not None
if cell is not None:
    assert daemon in cell.pids()
    assert cell.kill()
    cell.remove()
    assert not cell.path.exists()
left = reap.stop_descendants(before)
assert left == [], left
assert reap.read_proc(daemon) is None, "the escaped daemon lives on"
assert kept.poll() is None, "a process there before was signalled"
kept.kill()
kept.wait()
print("ok")
"""


@pytest.mark.parametrize("way", ["tree", "cell"])
def test_an_escaped_daemon_is_stopped_and_nothing_else(way: str) -> None:
    if way == "cell":
        probe = [sys.executable, "-c", "from cudafix.process import reap; c = reap.open_cell()"]
        probe[-1] += "; print(c is not None); c and c.remove()"
        offered = subprocess.run(probe, capture_output=True, text=True, cwd=ROOT, check=True)
        if offered.stdout.strip() != "True":
            pytest.skip("this host offers no writable cgroup v2")
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, way], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
