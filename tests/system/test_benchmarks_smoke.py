"""The benchmark harness runs end to end on a tiny scenario and writes well-formed results.

No timing is asserted: this only proves ``make bench`` works (numbers live in BENCHMARKS.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
"""Builds real venvs or runs the CLI through transactions: left out of ``make test-fast``."""

REPO = Path(__file__).resolve().parents[2]
TINY = ["--files", "600", "--elves", "30", "--sparse-mib", "8", "--sparse-libs", "3"]
STRESS = ["--stress-objects", "2", "--stress-rows", "300", "--stress-needs", "3"]


def test_bench_harness_runs_end_to_end(tmp_path: Path) -> None:
    argv = [
        sys.executable,
        "-m",
        "benchmarks.run",
        *TINY,
        *STRESS,
        "--runs",
        "1",
        "--scaling",
        "600",
    ]
    argv += ["--no-drop-caches", "--out", str(tmp_path)]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    for title in ("## 1.", "## 2a.", "## 2b.", "## 3.", "## 4.", "## 5.", "Machine: nproc="):
        assert title in done.stdout
    results = json.loads((tmp_path / "latest.json").read_text())
    sections = {"plan", "transaction", "snapshot", "commit_rollback", "scaling", "metadata_scaling"}
    assert {"machine", *sections} <= set(results)
    assert set(results["machine"]) == {"nproc", "cpu", "memory_gib", "python", "uv", "kernel"}
    assert len(results["transaction"]["cudafix"]) == len(results["transaction"]["uv"]) == 1
    cases = [v for v in results["commit_rollback"].values() if isinstance(v, dict)]
    assert len(cases) == 2
    for case in cases:
        assert case["identical"] == 1, "a rollback left the tree different"
    assert results["scaling"]["600"]["files"] > 500
    assert set(results["metadata_scaling"]) >= {"elf-2", "elf-8", "record-300", "record-1200"}
