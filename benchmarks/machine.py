"""The machine a benchmark ran on: every table is printed with these facts."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import uv


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return 0.0


def uv_version() -> str:
    done = subprocess.run(
        [uv.find_uv_bin(), "--version"], capture_output=True, text=True, check=False
    )
    return done.stdout.strip() or "unknown"


def describe() -> dict[str, str]:
    """nproc, CPU model, memory, Python, uv, kernel."""
    return {
        "nproc": str(os.cpu_count()),
        "cpu": _cpu_model(),
        "memory_gib": str(_memory_gib()),
        "python": sys.version.split()[0],
        "uv": uv_version(),
        "kernel": platform.release(),
    }


def as_markdown(facts: dict[str, str]) -> str:
    return "Machine: " + ", ".join(f"{k}={v}" for k, v in facts.items())
