"""One plan file, twenty nodes: 20 copies of a scenario venv, applied in parallel processes.

Every copy ends committed and healthy, or, where the node differs from what was planned
for, untouched (fingerprint equal) with a ``stale`` JSON result and exit 3.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scenarios.fingerprint import diff_fingerprints, fingerprint
from tests.support.cli import as_json, cudafix, save_seed_plan, uv_uninstall
from tests.support.venvs import ScenarioFactory

pytestmark = pytest.mark.slow
"""Builds real venvs or runs the CLI through transactions: left out of ``make test-fast``."""

NODES = 20
DIFFERENT = frozenset({0, 7, 13})


def make_nodes(venv: Path, root: Path) -> list[Path]:
    """``cp -a`` copies: bin/python links to the base interpreter by absolute path."""
    nodes = []
    for i in range(NODES):
        node = root / f"node{i:02d}" / "venv"
        node.parent.mkdir(parents=True)
        subprocess.run(["cp", "-a", str(venv), str(node)], check=True)
        nodes.append(node)
    assert os.readlink(nodes[0] / "bin" / "python") == os.readlink(venv / "bin" / "python")
    return nodes


def apply_everywhere(plan: Path, nodes: list[Path]) -> list[tuple[int, dict[str, object]]]:
    """Start all nodes at once (no --yes prompt possible: stdin is /dev/null), then collect."""
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cudafix",
                "apply",
                str(plan),
                "--venv",
                str(n),
                "--yes",
                "--json",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in nodes
    ]
    out = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=300)
        assert stdout.strip(), stderr
        out.append((proc.returncode, json.loads(stdout)))
    return out


def test_one_plan_on_twenty_nodes(scenario: ScenarioFactory, tmp_path: Path) -> None:
    built = scenario("incident")
    plan = save_seed_plan(built, tmp_path / "plan.json")
    nodes = make_nodes(built.venv, tmp_path / "fleet")
    for i in DIFFERENT:
        uv_uninstall(nodes[i] / "bin" / "python", "nvidia-nvtx-cu13")  # changed by hand
    before = [fingerprint(n) for n in nodes]
    results = apply_everywhere(plan, nodes)
    for i, (node, (code, result)) in enumerate(zip(nodes, results, strict=True)):
        if i in DIFFERENT:
            assert (code, result["state"]) == (3, "stale"), result
            assert "nvidia-nvtx-cu13 13.0.39 is not installed" in result["context"]
            assert not diff_fingerprints(before[i], fingerprint(node))
        else:
            assert (code, result["state"], result["target"]) == (0, "committed", str(node))
            doctor = cudafix("doctor", "--venv", node, "--json")
            assert doctor.returncode == 0, as_json(doctor)["findings"]
    assert not list(built.venv.glob(".cudafix/transactions/*")), "planning changed the source"
