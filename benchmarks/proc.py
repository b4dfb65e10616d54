"""Run one command and measure it as a user would see it: wall time, exit status, peak RSS."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import uv


@dataclass(frozen=True)
class Timed:
    """One finished command."""

    argv: tuple[str, ...]
    seconds: float
    returncode: int
    max_rss_mib: float
    """Peak RSS of the largest process in the tree (the command or a child it waited for)."""
    stdout: str
    stderr: str


def timed(
    argv: Sequence[str | Path],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Timed:
    """Run ``argv`` to completion; ``os.wait4`` gives this child's own rusage.

    Linux reports ``ru_maxrss`` of a reaped child as the maximum over it and every
    descendant it reaped, so uv or a probe interpreter spawned by cudafix is included.
    """
    args = tuple(str(a) for a in argv)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env, cwd=cwd
        )
        _pid, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text_out = out.read().decode(errors="replace")
        text_err = err.read().decode(errors="replace")
    return Timed(args, seconds, proc.returncode, usage.ru_maxrss / 1024, text_out, text_err)


def check(done: Timed, allowed: Sequence[int] = (0,)) -> Timed:
    """``done`` itself, or an error naming the command and its last output lines."""
    if done.returncode not in allowed:
        tail = (done.stderr or done.stdout).strip().splitlines()[-15:]
        raise RuntimeError(
            f"{' '.join(done.argv)} exited {done.returncode} (expected {list(allowed)}):\n"
            + "\n".join(tail)
        )
    return done


def uv_argv(*args: str | Path) -> list[str | Path]:
    """The bundled uv binary with ``args``: the uv cudafix itself runs."""
    return [uv.find_uv_bin(), *args]
