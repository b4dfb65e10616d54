"""The README's first command (``make demo``) keeps telling the story it claims."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
"""Builds real venvs or runs the CLI through transactions: left out of ``make test-fast``."""

REPO = Path(__file__).resolve().parents[2]


def test_demo_shows_uv_breaking_and_cudafix_repairing(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "scenarios.demo"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},  # the demo lives in scenarios/
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    broken, _, rest = out.partition("2. The same removal with cudafix")
    fixed, _, began = rest.partition("3. How it began: an install")
    assert "libcudnn.so.9: cannot open shared object file" in broken
    assert (
        "Verdict: REFUSED" in fixed
        and "libcudnn.so.9 needed by torch/lib/libtorch_cuda.so" in fixed
    )
    assert "Committed transaction" in fixed and "Healthy: no problems found." in fixed
    plain, _, guarded = began.partition("cudafix install refuses it")
    assert "[clobbered]" in plain and "nvidia-cudnn-cu12 and nvidia-cudnn-cu13" in plain
    assert "Verdict: REFUSED" in guarded
    assert "would switch builds of libcudnn.so.9" in guarded
