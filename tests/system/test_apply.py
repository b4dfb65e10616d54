"""``cudafix apply SCRIPT``: one plan, one transaction, on real scenario venvs with real uv."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cudafix.env.hashing import hash_path
from scenarios import BuiltScenario
from scenarios.fingerprint import diff_fingerprints, fingerprint
from tests.support.cli import EXAMPLES, as_json, assert_one_line_error, cudafix
from tests.support.venvs import ScenarioFactory

pytestmark = pytest.mark.slow
"""Builds real venvs or runs the CLI through transactions: left out of ``make test-fast``."""


def write(tmp: Path, text: str, name: str = "script.toml") -> Path:
    path = tmp / name
    path.write_text(textwrap.dedent(text))
    return path


def run_script(built: BuiltScenario, script: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    source = ("--offline", "--find-links", str(built.wheelhouse))
    return cudafix("apply", script, "--venv", built.venv, *source, *extra)


def assert_unchanged(prefix: Path, before: dict[str, tuple[object, ...]]) -> None:
    diff = diff_fingerprints(before, fingerprint(prefix))
    assert not diff, "\n".join(diff[:20])


def installed(built: BuiltScenario) -> set[str]:
    return {p.name.split("-")[0] for p in built.venv.glob("lib/python3*/site-packages/*.dist-info")}


def test_seed_example_commits_and_leaves_a_healthy_env(scenario: ScenarioFactory) -> None:
    built = scenario("incident")
    dry = run_script(built, EXAMPLES / "seed-cleanup.toml", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "Verdict: PASS" in dry.stdout
    assert "'import torch, torch.version; print(torch.version.cuda)' prints '12.'" in dry.stdout
    done = run_script(built, EXAMPLES / "seed-cleanup.toml", "--yes", "--json")
    result = as_json(done)
    assert (done.returncode, result["state"]) == (0, "committed"), done.stderr
    assert sorted(result["removed"]) == [
        "nvidia-cudnn-cu13",
        "nvidia-nccl-cu13",
        "nvidia-nvshmem-cu13",
        "nvidia-nvtx-cu13",
    ]
    assert any("expect-probe" in p for p in result["probes"])
    assert not {n for n in installed(built) if n.endswith("cu13")}
    assert cudafix("doctor", "--venv", built.venv).returncode == 0
    subprocess.run([built.python, "-c", "import torch"], check=True)


def test_failing_last_probe_rolls_back_everything(
    scenario: ScenarioFactory, tmp_path: Path
) -> None:
    built = scenario("incident")
    script = write(
        tmp_path,
        """\
        [[steps]]
        remove = ["nvidia-*-cu13"]
        repair = true

        [[probes.expect]]
        python = "import torch, torch.version; print(torch.version.cuda)"
        output = "13."
        """,
    )
    before = fingerprint(built.venv)
    done = run_script(built, script, "--yes", "--json")
    result = as_json(done)
    assert (done.returncode, result["state"]) == (1, "rolled-back"), done.stderr
    assert "expected '13.' in the output" in result["error"]
    assert_unchanged(built.venv, before)


def test_install_step_runs_after_reinstall(scenario: ScenarioFactory, tmp_path: Path) -> None:
    built = scenario("incident")
    script = write(
        tmp_path,
        """\
        [policy]
        repair = true

        [[steps]]
        remove = ["nvidia-*-cu13"]

        [[steps]]
        install = ["nvidia-nvtx-cu13==13.0.39"]

        [probes]
        imports = ["torch"]
        """,
    )
    plan = as_json(run_script(built, script, "--dry-run", "--json"))
    [install] = plan["install"]
    assert install["name"] == "nvidia-nvtx-cu13"
    assert any(p.endswith("nvidia/cu13/lib/libnvToolsExt.so.1") for p in install["paths"])
    done = run_script(built, script, "--yes", "--json")
    assert as_json(done)["installed"] == ["nvidia-nvtx-cu13==13.0.39"], done.stderr
    assert {n for n in installed(built) if n.endswith("cu13")} == {"nvidia_nvtx_cu13"}
    kinds = {
        f["kind"] for f in as_json(cudafix("doctor", "--venv", built.venv, "--json"))["findings"]
    }
    assert kinds <= {"shared", "clobbered", "mixed-cuda"}, kinds


def test_missing_install_pin_is_refused_and_forced_run_rolls_back(
    scenario: ScenarioFactory, tmp_path: Path
) -> None:
    built = scenario("incident")
    script = write(
        tmp_path,
        """\
        [[steps]]
        remove = ["nvidia-*-cu13"]
        repair = true

        [[steps]]
        install = ["nvidia-nvtx-cu13==99.0"]
        """,
    )
    before = fingerprint(built.venv)
    refused = run_script(built, script, "--yes", "--json")
    result = as_json(refused)
    assert (refused.returncode, result["state"]) == (3, "refused"), refused.stderr
    assert any("no wheel for nvidia-nvtx-cu13==99.0 can be had" in c for c in result["context"])
    assert_unchanged(built.venv, before)
    forced = run_script(built, script, "--yes", "--json", "--force")
    result = as_json(forced)
    assert (forced.returncode, result["state"]) == (1, "rolled-back"), forced.stderr
    assert "install failed" in result["error"]
    assert_unchanged(built.venv, before)


def test_no_terminal_no_yes_refuses_at_once(scenario: ScenarioFactory) -> None:
    built = scenario("incident")
    before = fingerprint(built.venv)
    done = run_script(built, EXAMPLES / "seed-cleanup.toml")  # stdin is /dev/null
    assert_one_line_error(done, 2, "stdin is not a terminal", "--yes")
    target = ["--venv", str(built.venv), "--offline", "--find-links", str(built.wheelhouse)]
    closed = subprocess.run(
        [sys.executable, "-m", "cudafix", "apply", EXAMPLES / "seed-cleanup.toml", *target],
        capture_output=True,
        text=True,
        stdin=None,
        timeout=120,
        preexec_fn=lambda: os.close(0),  # stdin closed, so sys.stdin is None in the child
    )
    assert_one_line_error(closed, 2, "stdin is not a terminal")
    assert_unchanged(built.venv, before)


def test_unmatched_selector_names_its_line(scenario: ScenarioFactory, tmp_path: Path) -> None:
    built = scenario("incident")
    script = write(
        tmp_path,
        """\
        [[steps]]
        remove = ["nvidia-*-cu13"]

        [[steps]]
        remove = ["flashinfer-python"]
        """,
    )
    done = run_script(built, script, "--dry-run")
    assert_one_line_error(done, 2, f"{script}:5:", "flashinfer-python", "missing-ok")


def test_reinstall_step_is_part_of_the_plan(scenario: ScenarioFactory, tmp_path: Path) -> None:
    built = scenario("incident")
    script = write(tmp_path, '[[steps]]\nreinstall = ["torch"]\n')
    plan = as_json(run_script(built, script, "--dry-run", "--json"))
    assert [r["name"] for r in plan["reinstall"]] == ["torch"]
    assert plan["reinstall"][0]["reason"] == {
        "kind": "script-step",
        "subject": "torch",
        "paths": [],
        "step": 1,
    }
    assert plan["remove"] == [] and plan["verdict"] == "pass"


def test_reinstalled_co_owners_leave_the_planned_holder_every_time(
    scenario: ScenarioFactory, tmp_path: Path
) -> None:
    """Two reinstalled builds claim libnccl.so.2: one backend call each, in plan order, so
    the last one's bytes are there, run after run (one call for both is a race)."""
    built = scenario("incident")
    script = write(tmp_path, '[[steps]]\nreinstall = ["nvidia-nccl-cu13", "nvidia-nccl-cu12"]\n')
    plan = as_json(run_script(built, script, "--dry-run", "--json"))
    [lib] = [p for p in plan["holders_after"] if p.endswith("nvidia/nccl/lib/libnccl.so.2")]
    assert plan["holders_after"][lib] == "nvidia-nccl-cu13"
    [info] = built.venv.glob("lib/python3*/site-packages/nvidia_nccl_cu13-*.dist-info")
    row = next(r for r in (info / "RECORD").read_text().splitlines() if "libnccl.so.2," in r)
    want = row.split(",")[1].removeprefix("sha256=")
    for _ in range(3):
        done = run_script(built, script, "--yes", "--no-probe")
        assert done.returncode == 0, done.stdout + done.stderr
        assert hash_path(built.venv / lib) == want
