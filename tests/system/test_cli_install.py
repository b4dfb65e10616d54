"""``cudafix install`` through the CLI on the seed scenario: how the incident began.

The ``seed`` venv is a cu12 torch with its cudnn-cu12; the wheelhouse also holds the cu13
cudnn (same paths, other bytes), a cu12 leaf nothing links and a newer cudnn-cu12.
"""

from __future__ import annotations

import json
import subprocess
import zipfile
from pathlib import Path

import pytest

from scenarios import BuiltScenario
from scenarios.build import uv_binary
from scenarios.fingerprint import diff_fingerprints, fingerprint
from tests.support.cli import as_json, assert_one_line_error, cudafix, offline
from tests.support.venvs import ScenarioFactory, below_site
from tests.support.wheels import make_wheel

pytestmark = pytest.mark.slow
"""Builds real venvs or runs the CLI through transactions: left out of ``make test-fast``."""

CLOBBERED = [
    "nvidia/cudnn/include/cudnn_version.h",
    "nvidia/cudnn/lib/libcudnn.so.9",
    "nvidia/cudnn/lib/libcudnn_adv.so.9",
    "nvidia/cudnn/lib/libcudnn_cnn.so.9",
    "nvidia/cudnn/lib/libcudnn_engines_precompiled.so.9",
    "nvidia/cudnn/lib/libcudnn_engines_runtime_compiled.so.9",
    "nvidia/cudnn/lib/libcudnn_graph.so.9",
    "nvidia/cudnn/lib/libcudnn_heuristic.so.9",
    "nvidia/cudnn/lib/libcudnn_ops.so.9",
]
SWITCH = "torch/lib/libtorch_cuda.so (torch) would switch builds of libcudnn.so.9"


def _install(built: BuiltScenario, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return cudafix("install", *args, "--venv", built.venv, *offline(built.wheelhouse))


def _versions(built: BuiltScenario) -> dict[str, str]:
    code = (
        "import importlib.metadata as m, json;"
        "print(json.dumps({d.name: d.version for d in m.distributions()}))"
    )
    done = subprocess.run([built.python, "-c", code], capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout))


def test_seed_install_is_refused_naming_the_clobbered_paths_and_the_switch(
    scenario: ScenarioFactory,
) -> None:
    built = scenario("seed")
    before = fingerprint(built.venv)
    for mode in ("--dry-run", "--yes"):
        proc = _install(built, "nvidia-cudnn-cu13", mode)
        assert proc.returncode == 3, proc.stdout + proc.stderr
        assert "Verdict: REFUSED" in proc.stdout
        assert "nvidia-cudnn-cu13 would overwrite 9 path(s) that nvidia-cudnn-cu12 claims" in (
            proc.stdout
        )
        for path in CLOBBERED:
            assert f"    {path}\n" in proc.stdout, path
        assert SWITCH in proc.stdout
        assert "nvidia-cudnn-cu13 (CUDA 13)'s bytes, not nvidia-cudnn-cu12 (CUDA 12)'s" in (
            proc.stdout
        )
        # the matching build is installed already: running that would change nothing
        assert "cudafix install nvidia-cudnn-cu12 " not in proc.stdout
        assert "already satisfied" not in proc.stdout
    assert diff_fingerprints(before, fingerprint(built.venv)) == []
    assert not (built.venv / ".cudafix" / "transactions").exists()


def test_seed_install_json_names_each_overwritten_path(scenario: ScenarioFactory) -> None:
    built = scenario("seed")
    plan = as_json(_install(built, "nvidia-cudnn-cu13", "--dry-run", "--json"))
    assert plan["verdict"] == "refused"
    assert [i["name"] for i in plan["install"]] == ["nvidia-cudnn-cu13"]
    other = sorted(below_site(p["path"]) for p in plan["overwritten"]
                   if not p["same_bytes"])  # fmt: skip
    assert other == CLOBBERED
    assert {p["by"] for p in plan["overwritten"]} == {"nvidia-cudnn-cu13"}
    switched = [s for s in plan["switches"] if s["consumer"].endswith("libtorch_cuda.so")]
    assert [(s["need"], s["before_owners"], s["after_owners"]) for s in switched] == [
        ("libcudnn.so.9", ["nvidia-cudnn-cu12"], ["nvidia-cudnn-cu13"])
    ]


def test_the_suggested_alternative_passes(scenario: ScenarioFactory) -> None:
    built = scenario("seed")
    proc = _install(built, "nvidia-cudnn-cu12")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "is satisfied" in proc.stdout


def test_a_passing_install_commits_and_undo_restores_byte_for_byte(
    scenario: ScenarioFactory,
) -> None:
    built = scenario("seed")
    before = fingerprint(built.venv)
    proc = _install(built, "nvidia-nvtx-cu12", "--yes")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Verdict: PASS" in proc.stdout and "installed 1" in proc.stdout
    assert _versions(built)["nvidia-nvtx-cu12"] == "12.8.90"
    txid = proc.stdout.split("Committed transaction ")[1].split(":")[0]
    history = cudafix("history", "--venv", built.venv)
    [line] = [ln for ln in history.stdout.splitlines() if ln.startswith(txid[-6:] + " ")]
    assert " install " in line and "+nvidia-nvtx-cu12 12.8.90" in line, history.stdout
    assert "install nvidia-nvtx-cu12" in history.stdout
    undo = cudafix("undo", txid, "--venv", built.venv, "--yes")
    assert undo.returncode == 0, undo.stderr
    assert diff_fingerprints(before, fingerprint(built.venv)) == []


def test_an_upgrade_is_planned_as_uv_does_it(scenario: ScenarioFactory) -> None:
    built = scenario("seed")
    dry = as_json(_install(built, "nvidia-cudnn-cu12==9.11.0.98", "--dry-run", "--json"))
    assert dry["verdict"] == "pass", dry["reasons"]
    assert [(r["name"], r["version"]) for r in dry["remove"]] == [
        ("nvidia-cudnn-cu12", "9.10.2.21")
    ]
    assert dry["lost"] == []  # the new version provides every soname the old one did
    proc = _install(built, "nvidia-cudnn-cu12==9.11.0.98", "--yes")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _versions(built)["nvidia-cudnn-cu12"] == "9.11.0.98"
    imported = subprocess.run([built.python, "-c", "import torch"], capture_output=True)
    assert imported.returncode == 0


def test_a_failing_probe_rolls_back_and_removes_the_new_files(scenario: ScenarioFactory) -> None:
    built = scenario("seed")
    before = fingerprint(built.venv)
    proc = _install(built, "nvidia-nvtx-cu12", "--yes", "--probe", "raise SystemExit('no')")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "rolled back" in proc.stderr
    assert diff_fingerprints(before, fingerprint(built.venv)) == []
    assert "nvidia-nvtx-cu12" not in _versions(built)


def test_saved_install_plan_applies_and_then_is_stale(
    scenario: ScenarioFactory, tmp_path: Path
) -> None:
    built = scenario("seed")
    out = tmp_path / "plan.json"
    made = _install(built, "nvidia-nvtx-cu12", "--dry-run", "--out", out)
    assert made.returncode == 0, made.stderr
    applied = cudafix("apply", out, "--venv", built.venv, "--yes", "--json")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert as_json(applied)["installed"] == ["nvidia-nvtx-cu12==12.8.90"]
    again = cudafix("apply", out, "--venv", built.venv, "--yes")
    assert again.returncode == 3, again.stdout + again.stderr


def test_an_install_that_lands_other_bytes_than_staged_rolls_back(
    scenario: ScenarioFactory, tmp_path: Path
) -> None:
    """The wheel is swapped for another build of the same version between plan and apply:
    the plan's sha256 of the staged file refuses it before anything changes; a plan without
    one (as staged from an index) is caught by the install step's check against the staged
    RECORD, and rolled back."""
    built = scenario("seed")
    links = tmp_path / "links"
    links.mkdir()
    original = next(built.wheelhouse.glob("nvidia_nvtx_cu12-*.whl"))
    (links / original.name).write_bytes(original.read_bytes())
    out = tmp_path / "plan.json"
    plan = ["install", "nvidia-nvtx-cu12", "--venv", built.venv, "--dry-run", "--out", out]
    made = cudafix(*plan, *offline(links))
    assert made.returncode == 0, made.stderr
    with zipfile.ZipFile(original) as zf:
        files = {n: zf.read(n) for n in zf.namelist() if ".dist-info/" not in n}
    files["nvidia/nvtx/include/nvToolsExt.h"] = b"/* rebuilt */\n"
    (links / original.name).unlink()
    make_wheel(links, "nvidia-nvtx-cu12", "12.8.90", files)
    before = fingerprint(built.venv)
    env = {"UV_CACHE_DIR": str(tmp_path / "uv-cache")}
    refused = cudafix("apply", out, "--venv", built.venv, "--yes", env=env)
    assert refused.returncode == 3, refused.stdout + refused.stderr
    assert "the plan was made" in refused.stderr  # the file is gone or has other bytes
    assert diff_fingerprints(before, fingerprint(built.venv)) == []
    saved = json.loads(out.read_text())
    for pin in saved["install"]:
        pin.update(wheel=None, wheel_sha256=None)
    out.write_text(json.dumps(saved))
    applied = cudafix("apply", out, "--venv", built.venv, "--yes", env=env)
    assert applied.returncode == 1, applied.stdout + applied.stderr
    assert "nvToolsExt.h: other bytes than the staged wheel" in applied.stderr
    assert diff_fingerprints(before, fingerprint(built.venv)) == []


def test_bad_specs_are_one_line_errors(scenario: ScenarioFactory) -> None:
    built = scenario("seed")
    assert_one_line_error(_install(built, "nvidia-cudnn-cu12<9.10"), 2, "uv cannot resolve")
    assert_one_line_error(_install(built, "no-such-dist-anywhere"), 2, "no-such-dist-anywhere")
    assert_one_line_error(cudafix("install", "--venv", built.venv), 2, "nothing to install")


UV = uv_binary()


def _uv_install(built: BuiltScenario, *names: str) -> list[str]:
    links = ["--offline", "--no-index", "--find-links", str(built.wheelhouse)]
    return [str(UV), "pip", "install", "--python", str(built.python), *links, *names]


def test_run_rolls_back_a_plain_uv_install_that_clobbers(scenario: ScenarioFactory) -> None:
    built = scenario("seed")
    before = fingerprint(built.venv)
    proc = cudafix("run", "--venv", built.venv, "--", *_uv_install(built, "nvidia-cudnn-cu13"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "new problems: [clobbered]" in proc.stderr and "rolled back" in proc.stderr
    assert diff_fingerprints(before, fingerprint(built.venv)) == []
    accepted = cudafix(
        "run", "--venv", built.venv, "--accept", "--", *_uv_install(built, "nvidia-cudnn-cu13")
    )
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    assert "accepted: [clobbered]" in accepted.stderr and "Committed transaction" in accepted.stdout
    txid = accepted.stdout.split("Committed transaction ")[1].split(":")[0]
    assert cudafix("undo", txid, "--venv", built.venv, "--yes").returncode == 0
    assert diff_fingerprints(before, fingerprint(built.venv)) == []


def test_run_commits_a_harmless_command_and_rolls_back_a_failing_probe(
    scenario: ScenarioFactory,
) -> None:
    built = scenario("seed")
    before = fingerprint(built.venv)
    failing = cudafix(
        "run", "--venv", built.venv, "--probe", "raise SystemExit('no')", "--",
        *_uv_install(built, "nvidia-nvtx-cu12"),
    )  # fmt: skip
    assert failing.returncode == 1 and "probe failed" in failing.stderr, failing.stderr
    assert diff_fingerprints(before, fingerprint(built.venv)) == []
    ok = cudafix("run", "--venv", built.venv, "--", *_uv_install(built, "nvidia-nvtx-cu12"))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "nvidia-nvtx-cu12" in _versions(built)


def test_run_names_files_a_command_rewrote_in_place(scenario: ScenarioFactory) -> None:
    """A writer that truncates and rewrites a file keeps its inode, so the hard-link snapshot
    changed with it: cudafix says which files it cannot bring back, never that all is well."""
    built = scenario("seed")
    [header] = built.venv.glob("lib/python3*/site-packages/nvidia/cudnn/include/cudnn_version.h")
    writer = (
        f"p = {str(header)!r}\n"
        "with open(p, 'r+') as f:\n    f.truncate(0); f.write('rewritten in place, longer\\n')\n"
        "raise SystemExit(1)\n"
    )
    proc = cudafix("run", "--venv", built.venv, "--", str(built.python), "-c", writer)
    assert proc.returncode == 1, proc.stderr
    assert "rewritten in place" in proc.stderr and "cudnn_version.h" in proc.stderr
    assert "rolled back" in proc.stderr and "Traceback" not in proc.stderr
    assert not cudafix("recover", "--venv", built.venv, "--dry-run").stdout.startswith("would")
    report = as_json(cudafix("doctor", "--json", "--venv", built.venv))
    assert "nvidia-cudnn-cu12" in report["repair"]  # the way back doctor offers
