"""Probes: does the environment still work, asked of its own interpreter.

Each probe is a subprocess (through :func:`cudafix.process.run`) with a timeout and
``PYTHONDONTWRITEBYTECODE=1``, so probing writes nothing into the environment. A failure
carries the probe's own last error line (``ImportError: libcudnn.so.9: cannot open ...``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from cudafix.linker.hostdeps import provided_by_system
from cudafix.model.probe import ProbeResult, ProbeSpec
from cudafix.process import Completed, activated, run

_LOAD = """\
import ctypes, json, sys
for p in json.load(sys.stdin):
    try:
        ctypes.CDLL(p)
    except OSError as e:
        print("cudafix-load-failed\\t" + p + "\\t" + str(e).replace("\\n", " "))
"""
_RUN_TIME = """\
import ctypes, json, os, sys
for label, need, dirs in json.load(sys.stdin):
    there = [os.path.join(d, need) for d in dirs if os.path.exists(os.path.join(d, need))]
    try:
        ctypes.CDLL(there[0] if there else need)
    except OSError as e:
        print("cudafix-load-failed\\t" + label + "\\t" + str(e).replace("\\n", " "))
"""
"""Each soname from the first of the object's own dirs that holds it, as the object's dlopen()
finds it (then the system's paths, as ld.so goes on); a full path as it is. Both read their
list from stdin: a venv with many run-time loads outgrows what one argument may hold."""
_NOT_FOUND = re.compile(r"^(?P<soname>[^\s:/]+): cannot open shared object file")


def _env(prefix: Path) -> dict[str, str | None]:
    return {**activated(prefix), "PYTHONDONTWRITEBYTECODE": "1"}


def _error(done: Completed, timeout: float) -> str:
    if done.timed_out:
        return f"timed out after {timeout:g} s"
    said = done.stderr or done.stdout
    lines = [ln for ln in said.splitlines() if ln.strip()]
    if lines and "Traceback (most recent call last):" in said:
        return lines[-1].strip()  # Python's own last word: the exception, the cause
    return exit_said(done.returncode, said)


def exit_said(returncode: int, output: str, stream: str = "output") -> str:
    """How a command failed: its exit status, and the last line of its ``stream`` labelled
    as that (a command's last words need not be the cause: a progress line, a summary)."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    if not lines:
        return f"exit status {returncode}, no {stream}"
    return f"exit status {returncode}; last {stream} line: {lines[-1]}"


def _probes(python: Path, spec: ProbeSpec) -> list[tuple[str, list[str], str | None]]:
    """Each probe: its label, its argv, and what it reads on stdin."""
    py = [str(python), "-B", "-s"]
    out: list[tuple[str, list[str], str | None]] = [
        (f"import {m}", [*py, "-c", f"import {m}"], None) for m in spec.modules
    ]
    if spec.libraries:
        label = "load " + ", ".join(spec.libraries)
        out.append((label, [*py, "-c", _LOAD], json.dumps(list(spec.libraries))))
    if spec.run_time:
        label = "load at run time " + ", ".join(label for label, _, _ in spec.run_time)
        out.append((label, [*py, "-c", _RUN_TIME], json.dumps(spec.run_time)))
    out += [(f"probe {c!r}", [*py, "-c", c], None) for c in spec.code]
    out += [(f"probe-cmd {c!r}", ["/bin/sh", "-c", c], None) for c in spec.commands]
    return out


def run_probes(prefix: Path, python: Path, spec: ProbeSpec, cwd: Path) -> list[ProbeResult]:
    """Run every probe; ``cwd`` should be outside the import path (e.g. the transaction dir)."""
    results = []
    for label, argv, given in _probes(python, spec):
        done = run(argv, env=_env(prefix), timeout=spec.timeout, cwd=cwd, stdin=given)
        ok = done.returncode == 0 and not done.timed_out
        if ok and label.startswith("load "):
            results.append(_graded_load(label, done.stdout))
            continue
        results.append(ProbeResult(label, ok, "" if ok else _error(done, spec.timeout)))
    return results


def _graded_load(label: str, stdout: str) -> ProbeResult:
    """Grade the libraries that failed to load the way ``doctor`` grades their needs.

    A library that fails only because the NVIDIA driver (or an optional system stack) is
    absent, a CPU box's normal state, passes with a note: the planner has already checked
    that every need a wheel provides still resolves, so nothing the plan changed is hidden
    behind that gap.
    """
    system = provided_by_system()
    errors, notes = [], []
    for line in stdout.splitlines():
        marker, _, rest = line.partition("\t")
        if marker != "cudafix-load-failed":
            continue
        path, _, why = rest.partition("\t")
        found = _NOT_FOUND.match(why)
        if found and found.group("soname") in system:
            soname = found.group("soname")
            notes.append(f"{path} not loaded: needs {soname} ({system[soname]})")
        else:
            errors.append(why)
    return ProbeResult(label, not errors, "; ".join(errors), "; ".join(notes))
