"""Every scenario's ``[expect]`` for ``doctor`` and ``remove --dry-run``, through the real CLI.

Each case builds the scenario venv with real uv, runs ``cudafix`` as a separate process and
compares its JSON with the expectations written in the scenario's TOML. Dry runs must leave
the environment byte-identical (the fingerprint covers paths, types, modes, sizes, hashes).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cudafix.env.target import locate_target
from cudafix.gather import gather
from cudafix.model.names import is_so_name
from scenarios import load_scenario
from scenarios.catalog import scenario_names
from scenarios.fingerprint import diff_fingerprints, fingerprint
from tests.support.cli import as_json, cudafix, dlopen_table
from tests.support.venvs import ScenarioFactory, settle

pytestmark = pytest.mark.slow
"""Builds real venvs or runs the CLI through transactions: left out of ``make test-fast``."""

CASES = [
    (name, stage)
    for name in scenario_names()
    if name != "large"
    for stage in ("ready", "broken")
    if stage == "ready" or any(s.tag == "break" for s in load_scenario(name).steps)
]
REMOVALS = [
    (name, stage, i)
    for name, stage in CASES
    for i, _ in enumerate(load_scenario(name).expectations(stage).remove)
]


@pytest.mark.parametrize(("name", "stage"), CASES)
def test_doctor_matches_expectations(
    scenario: ScenarioFactory, tmp_path: Path, name: str, stage: str
) -> None:
    built = scenario(name, stage)
    want = built.spec.expectations(stage).doctor
    proc = cudafix(
        "doctor", "--json", "--venv", built.venv, *dlopen_table(built, tmp_path / "t.toml")
    )
    report = as_json(proc)
    kinds: dict[str, list[str]] = {}
    for f in report["findings"]:
        kinds.setdefault(f["kind"], []).append(f["message"] + "\n" + "\n".join(f["details"]))
    unresolved = {_need(f["need"]) for f in report["findings"] if f["kind"] == "unresolved"}
    assert unresolved == set(want.unresolved), kinds.get("unresolved")
    shared_text = "\n".join(kinds.get("clobbered", []) + kinds.get("shared", []))
    for path in want.shared:
        assert f"{path}:" in shared_text, (path, shared_text)
    shadow_text = "\n".join(kinds.get("shadowed", []))
    assert all(s in shadow_text for s in want.shadowed), shadow_text
    assert all(any(u in t for t in kinds.get("unmanaged", [])) for u in want.unmanaged)
    assert all(any(repr(u) in t for t in kinds.get("unsafe-record", [])) for u in want.unsafe)
    assert all(any(p in t for t in kinds.get("bad-elf", [])) for p in want.problems), kinds.get(
        "bad-elf"
    )
    if want.ok is not None:
        assert (proc.returncode == 0) is want.ok, report
    assert proc.returncode in (0, 1), proc.stderr


@pytest.mark.parametrize(("name", "stage", "index"), REMOVALS)
def test_remove_dry_run_matches_expectations(
    scenario: ScenarioFactory, tmp_path: Path, name: str, stage: str, index: int
) -> None:
    built = scenario(name, stage)
    want = built.spec.expectations(stage).remove[index]
    flags = ["--repair"] * want.repair + ["--keep-shared"] * want.keep_shared
    flags += ["--offline", "--find-links", str(built.wheelhouse)] if want.repair else []
    before = fingerprint(built.venv)
    proc = cudafix(
        "remove",
        *want.selectors,
        "--venv",
        built.venv,
        "--dry-run",
        "--json",
        *flags,
        *dlopen_table(built, tmp_path / "t.toml"),
    )
    plan = as_json(proc)
    assert plan["verdict"] == want.verdict, plan["reasons"]
    assert proc.returncode == (0 if want.verdict == "pass" else 3)
    if want.removes is not None:
        assert {d["name"] for d in plan["remove"]} == set(want.removes)
    # a by-path run-time load's need is the library's EnvPath; the scenario names its file
    assert {_need(x["need"]) for x in plan["lost"]} == set(want.lost)
    assert {x["need"] for x in plan["switches"]} == set(want.switches)
    assert {x["distribution"] for x in plan["requirement_breaks"]} == set(want.requirement_breaks)
    assert {x["name"] for x in plan["reinstall"]} == set(want.reinstall)
    assert {x["entry"] for x in plan["refused_paths"]} == set(want.refused_paths)
    site = plan["target"]["site_packages"][0] + "/"
    for_good = {
        s["path"].removeprefix(site) for s in plan["shared_paths"] if s["fate"] == "deleted"
    }
    assert for_good >= set(want.deletes_shared)
    assert not for_good or plan["verdict"] == "refused", for_good  # a PASS deletes none
    assert not set(plan["deleted_paths"]) & set(plan["kept_paths"])  # a kept path stays
    prefix = str(built.venv)
    for path in plan["deleted_paths"] + plan["kept_paths"] + plan["rewritten_paths"]:
        assert not path.startswith(("/", "..")), path
        assert (Path(prefix) / path).resolve().is_relative_to(Path(prefix).resolve()), path
    assert diff_fingerprints(before, fingerprint(built.venv)) == []


def test_keep_shared_lists_a_kept_path_as_kept_never_as_deleted(
    scenario: ScenarioFactory, tmp_path: Path
) -> None:
    """``deleted_paths`` is what is gone once the plan commits: the shared paths
    ``--keep-shared`` keeps are in ``kept_paths`` alone, and the plan applied keeps them."""
    built = scenario("incident")
    table = dlopen_table(built, tmp_path / "t.toml")
    argv = ["remove", "nvidia-nvtx-cu13", "--venv", built.venv, "--keep-shared", *table]
    plan = as_json(cudafix(*argv, "--dry-run", "--json"))
    assert plan["verdict"] == "pass" and plan["kept_paths"], plan["reasons"]
    assert not set(plan["kept_paths"]) & set(plan["deleted_paths"])
    assert {s["path"] for s in plan["shared_paths"]} == set(plan["kept_paths"])
    kept = {p: (built.venv / p).read_bytes() for p in plan["kept_paths"]}
    done = cudafix(*argv, "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert {p: (built.venv / p).read_bytes() for p in plan["kept_paths"]} == kept
    assert not any((built.venv / p).exists() for p in plan["deleted_paths"])


def test_second_scan_parses_nothing_that_did_not_change(scenario: ScenarioFactory) -> None:
    built = scenario("incident")
    settle()  # facts of files written within the racy window are not kept
    assert cudafix("doctor", "--venv", built.venv).returncode in (0, 1)
    cache = built.venv / ".cudafix" / "cache"
    assert (cache / "index.sqlite").is_file()
    target = locate_target(None, str(built.venv), {}, Path.cwd())
    assert gather(target).elf.parsed == 0
    lib = next(built.venv.glob("lib/python3*/site-packages/torch/lib/libtorch_cuda.so"))
    lib.write_bytes(lib.read_bytes())  # same bytes, new mtime: re-parsed, nothing else
    assert gather(target).elf.parsed == 1
    assert gather(target).elf.parsed == 1  # written just now: not kept, read again


def _need(need: str) -> str:
    """A need as the expectations spell it: a library by its file name, a wheel's directory
    an object searches (``.../site-packages/nvidia/cuda_nvrtc/lib``) site-relative."""
    if is_so_name(need):
        return need.rsplit("/", 1)[-1]
    return need.split("site-packages/", 1)[-1]
