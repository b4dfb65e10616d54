"""Every process cudafix spawns goes through here: uv, pip, and the target interpreter.

``run`` logs the command and captures its output, so the transaction journal can record
exactly what was run and what it said (pypa/build's ``run_subprocess``).
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("cudafix.process")


@dataclass(frozen=True)
class Completed:
    """A finished process: what ran and what it said."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool = False


def activated(prefix: Path) -> dict[str, str]:
    """Variables that make a command act on the environment at ``prefix`` as if activated:
    ``VIRTUAL_ENV`` and its ``bin/`` first on ``PATH``."""
    path = f"{prefix / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    return {"VIRTUAL_ENV": str(prefix), "PATH": path}


def run(
    argv: Sequence[str | Path],
    *,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    cwd: Path | None = None,
) -> Completed:
    """Run ``argv`` to completion and capture its output; never raise on a non-zero exit.

    A timeout kills the process and reports ``timed_out`` rather than raising, so callers
    (probes, the backend) decide what a hang means.
    """
    args = tuple(str(a) for a in argv)
    log.debug("run: %s", " ".join(args))
    merged = {**os.environ, **env} if env is not None else None
    try:
        proc = subprocess.run(
            args,
            env=merged,
            cwd=cwd,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else ""
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
        return Completed(args, -9, out, err, timed_out=True)
    except OSError as exc:
        return Completed(args, 127, "", f"{args[0]}: {exc.strerror}")
    return Completed(args, proc.returncode, proc.stdout, proc.stderr)
