"""Transactions through the CLI on the incident scenario: refuse, roll back, repair, recover."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from scenarios import BuiltScenario
from scenarios.fingerprint import diff_fingerprints, fingerprint
from tests.support.cli import as_json, assert_one_line_error, cudafix, repair_offline
from tests.support.venvs import ScenarioFactory, try_import
from tests.support.wheels import make_wheel

pytestmark = pytest.mark.slow
"""Builds real venvs or runs the CLI through transactions: left out of ``make test-fast``."""

SELECT = "nvidia-*-cu13"


def _repair_flags(built: BuiltScenario) -> list[str]:
    return ["--repair", "--offline", "--find-links", str(built.wheelhouse)]


def test_refused_removal_changes_nothing(scenario: ScenarioFactory) -> None:
    built = scenario("incident")
    before = fingerprint(built.venv)
    proc = cudafix("remove", SELECT, "--venv", built.venv, "--yes")
    assert proc.returncode == 3, proc.stderr
    assert "Verdict: REFUSED" in proc.stdout and "libcudnn.so.9" in proc.stdout
    assert diff_fingerprints(before, fingerprint(built.venv)) == []
    assert not (built.venv / ".cudafix" / "transactions").exists()


def test_forced_plan_rolls_back_on_the_import_probe(scenario: ScenarioFactory) -> None:
    built = scenario("incident")
    before = fingerprint(built.venv)
    proc = cudafix("remove", SELECT, "--venv", built.venv, "--yes", "--force")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "libcudnn.so.9: cannot open shared object file" in proc.stderr
    assert "rolled back" in proc.stderr
    assert diff_fingerprints(before, fingerprint(built.venv)) == []
    assert try_import(built.python, "torch").returncode == 0
    history = cudafix("history", "--venv", built.venv)
    assert "rolled-back" in history.stdout


def test_failing_user_probe_rolls_back_a_passing_plan(scenario: ScenarioFactory) -> None:
    built = scenario("incident")
    before = fingerprint(built.venv)
    proc = cudafix(
        "remove",
        SELECT,
        "--venv",
        built.venv,
        *_repair_flags(built),
        "--yes",
        "--probe",
        "import torch; raise SystemExit('probe says no')",
    )
    assert proc.returncode == 1
    assert "probe says no" in proc.stderr
    assert diff_fingerprints(before, fingerprint(built.venv)) == []


def test_repair_commits_and_doctor_is_clean(scenario: ScenarioFactory) -> None:
    built = scenario("incident")
    proc = cudafix("remove", SELECT, "--venv", built.venv, *_repair_flags(built), "--yes")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Committed transaction" in proc.stdout
    assert try_import(built.python, "torch").returncode == 0
    report = cudafix("doctor", "--venv", built.venv, "--json")
    assert report.returncode == 0, report.stdout
    names = {f["kind"] for f in as_json(report)["findings"]}
    assert not names & {"missing-files", "unresolved", "clobbered", "mixed-cuda"}
    listed = subprocess.run(
        [
            str(built.python),
            "-c",
            "import importlib.metadata as m;"
            " print([d.metadata['Name'] for d in m.distributions()])",
        ],
        capture_output=True,
        text=True,
    ).stdout
    assert "nvidia-cudnn-cu12" in listed and "nvidia-cudnn-cu13" not in listed


def test_undo_restores_the_state_before_a_commit(scenario: ScenarioFactory) -> None:
    built = scenario("incident")
    before = fingerprint(built.venv)
    applied = cudafix("remove", SELECT, "--venv", built.venv, *_repair_flags(built), "--yes")
    assert applied.returncode == 0, applied.stderr
    txid = applied.stdout.split("Committed transaction ")[1].split(":")[0]
    undone = cudafix("undo", txid, "--venv", built.venv, "--yes")
    assert undone.returncode == 0, undone.stderr
    assert diff_fingerprints(before, fingerprint(built.venv)) == []
    shown = cudafix("show", txid, "--venv", built.venv, "--json")
    assert as_json(shown)["entry"]["state"] == "committed"


def test_repair_command_fixes_what_plain_uv_broke(scenario: ScenarioFactory) -> None:
    built = scenario("incident", "broken")
    assert "libcudnn.so.9" in try_import(built.python, "torch").stderr
    dry = cudafix(
        "repair", "--venv", built.venv, "--dry-run", "--offline", "--find-links", built.wheelhouse
    )
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "+ nvidia-cudnn-cu12==" in dry.stdout
    done = repair_offline(built)
    assert done.returncode == 0, done.stdout + done.stderr
    assert try_import(built.python, "torch").returncode == 0


@pytest.mark.parametrize("step", ["snapshot-done", "uninstall-begin", "backend", "probe-begin"])
def test_killed_run_is_recovered_through_the_cli(scenario: ScenarioFactory, step: str) -> None:
    built = scenario("incident")
    before = fingerprint(built.venv)
    killed = cudafix(
        "remove",
        SELECT,
        "--venv",
        built.venv,
        *_repair_flags(built),
        "--yes",
        env={"CUDAFIX_TEST_CRASH_AFTER": step},
    )
    assert killed.returncode < 0, killed.stderr  # died by signal
    blocked = cudafix("remove", SELECT, "--venv", built.venv, *_repair_flags(built), "--yes")
    assert_one_line_error(blocked, 4, "cudafix recover")
    warned = cudafix("doctor", "--venv", built.venv)  # the first error, not a warning aside
    assert warned.returncode == 4 and "[pending-transaction]" in warned.stdout, warned.stdout
    assert warned.stdout.splitlines()[-1] == f"Next: cudafix recover --venv {built.venv}"
    look = cudafix("recover", "--venv", built.venv, "--dry-run")
    assert look.returncode == 0 and "would:" in look.stdout
    fixed = cudafix("recover", "--venv", built.venv)
    assert fixed.returncode == 0, fixed.stderr
    assert diff_fingerprints(before, fingerprint(built.venv)) == []


def test_no_terminal_and_no_yes_never_waits(scenario: ScenarioFactory) -> None:
    built = scenario("clean")
    before = fingerprint(built.venv)
    proc = cudafix("remove", "nvidia-nvtx-cu12", "--venv", built.venv)
    assert_one_line_error(proc, 2, "--yes")
    assert diff_fingerprints(before, fingerprint(built.venv)) == []


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, scenario: ScenarioFactory) -> None:
    assert_one_line_error(cudafix("doctor", "--venv", tmp_path / "nope"), 2, "nope")
    (tmp_path / "plain").mkdir()
    assert_one_line_error(
        cudafix("doctor", "--venv", tmp_path / "plain"), 2, "not a Python environment"
    )
    built = scenario("clean")
    assert_one_line_error(
        cudafix("remove", "nvidia-nvtx-cu31", "--venv", built.venv, "--dry-run"),
        2,
        "nvidia-nvtx-cu12",
    )
    info = next((built.venv / "lib").glob("python3*/site-packages/nvidia_nvtx_cu12-*.dist-info"))
    (info / "RECORD").unlink()
    (info / "RECORD").mkdir()
    assert_one_line_error(cudafix("doctor", "--venv", built.venv), 2, "RECORD")


def test_pip_backend_applies_the_same_plan(scenario: ScenarioFactory) -> None:
    """The target has no pip of its own (uv venv), so cudafix's pip acts on it via --python."""
    built = scenario("incident")
    proc = cudafix(
        "remove", SELECT, "--venv", built.venv, *_repair_flags(built), "--backend", "pip", "--yes"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert try_import(built.python, "torch").returncode == 0
    assert cudafix("doctor", "--venv", built.venv).returncode == 0


def test_json_failure_is_one_object_for_a_controller(scenario: ScenarioFactory) -> None:
    built = scenario("incident")
    proc = cudafix("remove", SELECT, "--venv", built.venv, "--yes", "--json")
    assert proc.returncode == 3
    assert as_json(proc)["state"] == "refused"


def test_hostile_record_entries_are_never_acted_on(scenario: ScenarioFactory) -> None:
    """RECORD lines escaping the venv (lexically or through a symlink) name real files here,
    next to the venv; removing the distribution leaves every one of them alone."""
    built = scenario("hostile")
    escape = built.venv.parent / "etc" / "cudafix-hostile-escape"
    escape.parent.mkdir()
    escape.write_text("not cudafix's to delete\n")
    through_link = Path(f"{built.venv}.outside") / "libext.so.1"
    outside_before = through_link.read_text()
    proc = cudafix("remove", "hostile-pkg", "--venv", built.venv, "--yes")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "point outside the environment" in proc.stdout
    assert escape.read_text() == "not cudafix's to delete\n"
    assert through_link.read_text() == outside_before
    assert (built.venv / ".cudafix").is_dir()
    listed = cudafix("doctor", "--venv", built.venv, "--json")
    assert "hostile-pkg" not in {f.get("distribution") for f in as_json(listed)["findings"]}


def test_hostile_rollback_is_byte_identical(scenario: ScenarioFactory) -> None:
    """The FIFO, the dangling symlink and the edited RECORD all come back exactly."""
    built = scenario("hostile")
    before = fingerprint(built.venv)
    proc = cudafix(
        "remove", "hostile-pkg", "--venv", built.venv, "--yes", "--probe", "raise SystemExit(3)"
    )
    assert proc.returncode == 1 and "rolled back" in proc.stderr
    assert diff_fingerprints(before, fingerprint(built.venv)) == []


def test_offline_repair_without_the_wheel_is_refused(
    scenario: ScenarioFactory, tmp_path: Path
) -> None:
    """The reinstall is staged (empty cache, no index) while planning, and cannot be had."""
    built = scenario("incident")
    env = {"UV_CACHE_DIR": str(tmp_path / "empty-uv-cache")}
    proc = cudafix(
        "remove", SELECT, "--venv", built.venv, "--repair", "--offline", "--dry-run", env=env
    )
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert (
        "no wheel for nvidia-cudnn-cu12==9.10.2.21 can be had from uv's cache (offline)"
        in proc.stdout
    )
    assert "with --find-links DIR, --index-url URL or --extra-index-url URL" in proc.stdout
    found = cudafix(
        "remove", SELECT, "--venv", built.venv, *_repair_flags(built), "--dry-run", env=env
    )
    assert found.returncode == 0, found.stdout


def test_concurrent_runs_wait_or_fail_cleanly(scenario: ScenarioFactory) -> None:
    """A second run during a first one's transaction: with a short lock timeout it fails
    (exit 4); with a long one it waits for the lock, then either applies on the state the
    first run left or, if that state differs from what it planned on, refuses (exit 3).
    Either way nothing interleaves and the venv ends healthy."""
    built = scenario("incident")
    slow = [*_repair_flags(built), "--yes", "--probe", "import time; time.sleep(4)"]
    argv = [sys.executable, "-m", "cudafix", "remove", SELECT, "--venv", str(built.venv), *slow]
    first = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    journals = built.venv / ".cudafix" / "transactions"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(
        "probe-begin" in j.read_text() for j in journals.glob("*/journal.jsonl")
    ):
        time.sleep(0.1)
    other = ["torch", "--venv", built.venv, "--yes", "--no-probe"]
    impatient = cudafix("remove", *other, "--lock-timeout", "0.5")
    assert_one_line_error(impatient, 4, "another cudafix run")
    assert impatient.stderr.count("waiting for another cudafix run") == 1, impatient.stderr
    assert "will wait" not in impatient.stderr, impatient.stderr
    patient = cudafix("remove", *other, "--lock-timeout", "120")
    assert first.wait(timeout=120) == 0
    assert patient.returncode in (0, 3), patient.stdout + patient.stderr
    if patient.returncode == 3:
        assert "changed since this plan was made" in patient.stderr
    history = json.loads(cudafix("history", "--venv", built.venv, "--json").stdout)
    states = [e["state"] for e in history]
    assert states[0] == "committed" and "pending" not in states
    assert cudafix("doctor", "--venv", built.venv).returncode == 0


def _rebuilt_cudnn12(built: BuiltScenario, where: Path) -> Path:
    """A wheel of the installed nvidia-cudnn-cu12 name and version holding other bytes."""
    original = next(built.wheelhouse.glob("nvidia_cudnn_cu12-*.whl"))
    version = original.name.split("-")[1]
    with zipfile.ZipFile(original) as zf:
        files = {n: zf.read(n) for n in zf.namelist() if ".dist-info/" not in n}
    files["nvidia/cudnn/include/cudnn_version.h"] = b"#define CUDNN_CUDA 12 /* rebuilt */\n"
    make_wheel(where, "nvidia-cudnn-cu12", version, files)
    return where


def test_a_same_version_wheel_of_another_build_is_refused_at_plan_time(
    scenario: ScenarioFactory, tmp_path: Path
) -> None:
    built = scenario("incident")
    before = fingerprint(built.venv)
    other = _rebuilt_cudnn12(built, tmp_path / "rebuilt")
    for mode in ("--dry-run", "--yes"):
        proc = cudafix(
            "remove", SELECT, "--venv", built.venv, "--repair", "--offline",
            "--find-links", other, mode,
        )  # fmt: skip
        assert proc.returncode == 3, proc.stdout + proc.stderr
        assert "nvidia-cudnn-cu12==" in proc.stdout and "is another build" in proc.stdout
        assert str(other) in proc.stdout and "cudnn_version.h" in proc.stdout
    assert diff_fingerprints(before, fingerprint(built.venv)) == []
    unchecked = cudafix(
        "remove", SELECT, "--venv", built.venv, "--repair", "--offline", "--find-links", other,
        "--dry-run", "--no-fetch",
    )  # fmt: skip
    assert unchecked.returncode == 0, unchecked.stdout + unchecked.stderr
    assert "not fetched (--no-fetch)" in unchecked.stdout


def _site_state(built: BuiltScenario) -> dict[str, tuple[object, ...]]:
    """The site-packages part of a fingerprint, without installer-specific bin/ and config."""
    return {p: v for p, v in fingerprint(built.venv).items() if "/site-packages/" in p}


def test_the_post_state_does_not_depend_on_what_the_backend_deletes(
    scenario: ScenarioFactory,
) -> None:
    """uv and pip are handed RECORDs without the shared rows; the transaction deletes and
    keeps shared paths itself, so both backends commit the same bytes."""
    states = []
    for backend in ("uv", "pip"):
        built = scenario("incident")
        proc = cudafix(
            "remove", SELECT, "--venv", built.venv, "--keep-shared", "--no-probe",
            "--backend", backend, "--yes",
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout + proc.stderr
        kept = built.venv.glob("lib/python3*/site-packages/nvidia/cudnn/lib/libcudnn.so.9")
        assert list(kept), "a kept shared path must survive whatever the backend does"
        states.append(_site_state(built))
    assert diff_fingerprints(states[0], states[1]) == []


def test_a_reinstalled_co_owner_never_deletes_through_a_symlink_out(
    scenario: ScenarioFactory, tmp_path: Path
) -> None:
    """A co-owner's RECORD names a file behind a symlinked directory that leaves the venv;
    --repair reinstalls that co-owner, and its backend must not be shown the row."""
    built = scenario("incident")
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim"
    victim.write_text("not the venv's\n")
    [site] = built.venv.glob("lib/python3*/site-packages")
    (site / "nvidia" / "linkout").symlink_to(outside)
    [info] = site.glob("nvidia_cudnn_cu12-*.dist-info")
    with (info / "RECORD").open("a") as fh:
        fh.write("nvidia/linkout/victim,,\n")
    proc = cudafix(
        "remove", "nvidia-cudnn-cu13", "--venv", built.venv, *_repair_flags(built), "--yes"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "nvidia-cudnn-cu12" in proc.stdout
    assert victim.read_text() == "not the venv's\n"


def test_with_bytecode_a_rollback_is_byte_identical(scenario: ScenarioFactory) -> None:
    """A venv pip made and compiled (no uv lock file): uv deletes bytecode beside what it
    removes and creates its .lock; the rollback puts it all back as it was."""
    built = scenario("incident-pip")
    assert not (built.venv / ".lock").exists()
    before = fingerprint(built.venv)
    assert any("__pycache__" in p for p in before)
    proc = cudafix(
        "remove", SELECT, "--venv", built.venv, *_repair_flags(built), "--yes",
        "--probe", "raise SystemExit('no')",
    )  # fmt: skip
    assert proc.returncode == 1 and "rolled back" in proc.stderr, proc.stdout + proc.stderr
    assert diff_fingerprints(before, fingerprint(built.venv)) == []
