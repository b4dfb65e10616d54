"""Run the cudafix CLI on a real terminal (a pty), as a person at a shell does.

What a terminal changes (colour, progress, the confirmation prompt) can only be tested on
one: stdin, stdout and stderr are all the pty's slave side, so ``isatty()`` is true for each.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TtyRun:
    returncode: int
    output: str
    """Everything written to the terminal (stdout and stderr interleaved, ``\\r\\n`` lines)."""


def cudafix_tty(
    *args: str | Path,
    answer: str | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> TtyRun:
    """``python -m cudafix ARGS`` on a pty; ``answer`` is typed once the prompt shows."""
    master, slave = os.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "cudafix", *map(str, args)],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env={**os.environ, "TERM": "xterm", **(env or {})},
        cwd=cwd,
        close_fds=True,
    )
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + 300
    typed = answer is None
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
            if not typed and b"[y/N]" in b"".join(chunks):
                os.write(master, (answer or "").encode() + b"\n")
                typed = True
        elif proc.poll() is not None:
            break
    os.close(master)
    code = proc.wait(timeout=60)
    return TtyRun(code, b"".join(chunks).decode(errors="replace").replace("\r\n", "\n"))
