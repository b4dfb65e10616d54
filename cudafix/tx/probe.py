"""Probes: does the environment still work, asked of its own interpreter.

Each probe is a subprocess (through :func:`cudafix.tx.backend.run`) with a timeout and
``PYTHONDONTWRITEBYTECODE=1``, so probing writes nothing into the environment. A failure
carries the probe's own last error line (``ImportError: libcudnn.so.9: cannot open ...``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from cudafix.process import Completed, run

_LOAD = "import ctypes, sys\nfor p in sys.argv[1:]:\n    ctypes.CDLL(p)\n"


@dataclass(frozen=True)
class ProbeSpec:
    """What to probe after applying a plan."""

    modules: tuple[str, ...] = ()
    """Top-level modules to import."""
    libraries: tuple[str, ...] = ()
    """ELF paths to ``ctypes.CDLL``."""
    code: tuple[str, ...] = ()
    """User Python snippets (``--probe``)."""
    commands: tuple[str, ...] = ()
    """User shell commands (``--probe-cmd``), run with the environment's bin/ first on PATH."""
    timeout: float = 60.0


@dataclass(frozen=True)
class ProbeResult:
    """One probe's outcome."""

    label: str
    ok: bool
    error: str


def _env(prefix: Path) -> dict[str, str]:
    path = f"{prefix / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    return {"PYTHONDONTWRITEBYTECODE": "1", "VIRTUAL_ENV": str(prefix), "PATH": path}


def _error(done: Completed, timeout: float) -> str:
    if done.timed_out:
        return f"timed out after {timeout:g} s"
    lines = [ln for ln in (done.stderr or done.stdout).splitlines() if ln.strip()]
    return lines[-1].strip() if lines else f"exit status {done.returncode}"


def _probes(python: Path, spec: ProbeSpec) -> list[tuple[str, list[str]]]:
    py = [str(python), "-B", "-s"]
    out = [(f"import {m}", [*py, "-c", f"import {m}"]) for m in spec.modules]
    if spec.libraries:
        out.append(("load " + ", ".join(spec.libraries), [*py, "-c", _LOAD, *spec.libraries]))
    out += [(f"probe {c!r}", [*py, "-c", c]) for c in spec.code]
    out += [(f"probe-cmd {c!r}", ["/bin/sh", "-c", c]) for c in spec.commands]
    return out


def run_probes(prefix: Path, python: Path, spec: ProbeSpec, cwd: Path) -> list[ProbeResult]:
    """Run every probe; ``cwd`` should be outside the import path (e.g. the transaction dir)."""
    results = []
    for label, argv in _probes(python, spec):
        done = run(argv, env=_env(prefix), timeout=spec.timeout, cwd=cwd)
        ok = done.returncode == 0 and not done.timed_out
        results.append(ProbeResult(label, ok, "" if ok else _error(done, spec.timeout)))
    return results
