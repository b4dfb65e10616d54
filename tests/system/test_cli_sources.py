"""Where wheels come from: uv's source options by uv's names, uv's variables, and a refusal
that says which sources were tried and how to add the right one.

``clean``: a torch and a leaf, ``nvidia-nvtx-cu12``, installed here straight from its wheel
file (so its ``direct_url.json`` records where it came from), then one of its files deleted:
``repair`` must reinstall it, and an empty uv cache offline cannot.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest

from scenarios import BuiltScenario
from scenarios.build import uv_binary
from tests.support.cli import as_json, cudafix
from tests.support.venvs import ScenarioFactory

pytestmark = pytest.mark.slow
"""Runs the CLI on real venvs: left out of ``make test-fast``."""

LIB = "nvidia/nvtx/lib/libnvToolsExt.so.1"


def _from_wheel_file(scenario: ScenarioFactory) -> tuple[BuiltScenario, Path]:
    built = scenario("clean")
    [wheel] = built.wheelhouse.glob("nvidia_nvtx_cu12-*.whl")
    uv = [uv_binary(), "pip"]
    python = ["--python", str(built.python)]
    subprocess.run([*uv, "uninstall", *python, "nvidia-nvtx-cu12"], check=True, capture_output=True)
    subprocess.run(
        [*uv, "install", *python, "--offline", "--no-deps", str(wheel)],
        check=True,
        capture_output=True,
    )
    next(built.venv.glob(f"lib/python3*/site-packages/{LIB}")).unlink()
    return built, wheel


def test_a_wheel_that_cannot_be_had_names_the_sources_and_the_way_to_add_one(
    scenario: ScenarioFactory, tmp_path: Path
) -> None:
    built, wheel = _from_wheel_file(scenario)
    env = {"UV_CACHE_DIR": str(tmp_path / "empty-uv-cache")}
    refused = cudafix("repair", "--venv", built.venv, "--offline", "--dry-run", env=env)
    assert refused.returncode == 3, refused.stdout + refused.stderr
    [reason] = [ln for ln in refused.stdout.splitlines() if "no wheel for nvidia-nvtx-cu12" in ln]
    assert "can be had from uv's cache (offline)" in reason
    assert f"it was installed from file://{wheel}" in reason
    flag = reason.split("add ", 1)[1].split()
    assert flag[0] == "--find-links" and Path(shlex.split(" ".join(flag[1:]))[0]) == wheel.parent
    found = cudafix("repair", "--venv", built.venv, "--offline", *flag[:2], "--dry-run", env=env)
    assert found.returncode == 0, found.stdout + found.stderr


def test_uv_source_options_and_variables_are_taken_and_kept_in_a_saved_plan(
    scenario: ScenarioFactory, tmp_path: Path
) -> None:
    built, _ = _from_wheel_file(scenario)
    empty = tmp_path / "empty-index"
    empty.mkdir()
    env = {
        "UV_CACHE_DIR": str(tmp_path / "empty-uv-cache"),
        "UV_INDEX_URL": empty.as_uri(),
        "UV_EXTRA_INDEX_URL": (tmp_path / "other").as_uri(),
    }
    tried = cudafix("repair", "--venv", built.venv, "--dry-run", env=env)
    assert tried.returncode == 3, tried.stdout + tried.stderr
    assert f"the index {empty.as_uri()}" in tried.stdout
    assert f"the extra index {(tmp_path / 'other').as_uri()}" in tried.stdout

    plan = tmp_path / "plan.json"
    saved = cudafix(
        "repair", "--venv", built.venv, "-f", built.wheelhouse, "-i", empty.as_uri(),
        "--offline", "--dry-run", "--out", plan, env=env,
    )  # fmt: skip
    assert saved.returncode == 0, saved.stdout + saved.stderr
    options = json.loads(plan.read_text())["options"]
    assert options["index_url"] == empty.as_uri()
    assert options["find_links"] == [str(built.wheelhouse)] and options["offline"]
    assert options["extra_index_urls"] == [(tmp_path / "other").as_uri()]
    applied = cudafix("apply", plan, "--yes", "--json", env=env)
    assert as_json(applied)["state"] == "committed", applied.stdout + applied.stderr
    assert next(built.venv.glob(f"lib/python3*/site-packages/{LIB}")).is_file()


def test_an_alternative_simulated_without_its_wheels_is_not_called_safe(
    scenario: ScenarioFactory,
) -> None:
    """From an index, the ``--repair`` alternative's wheels are not fetched just to suggest
    it: it is printed as passing *if* the wheels match, with the sources its own dry run
    will use, and its argv says so in JSON; from local wheels it is staged and called safe."""
    built = scenario("incident")
    index = ["--index-url", "http://127.0.0.1:9/simple"]
    remote = ["remove", "nvidia-*-cu13", "--venv", built.venv, "--dry-run", *index]
    said = cudafix(*remote).stdout
    # doctor's fix (--repair) first, though only the --keep-shared one is called safe
    verdict = said.partition("Verdict")[2]
    _, _, unsure = verdict.partition("Alternatives that pass if the wheels match")
    unsure, _, safe = unsure.partition("Safe alternatives (re-simulated, they pass):")
    assert "--repair" in unsure and "--keep-shared" not in unsure, said
    assert "--keep-shared" in safe and "--repair" not in safe, said
    assert "http://127.0.0.1:9/simple" in said.partition("if the wheels match")[2]
    [repair] = [a for a in as_json(cudafix(*remote, "--json"))["alternatives"] if a["unstaged"]]
    assert "--repair" in repair["argv"] and repair["argv"][:2] == ["cudafix", "remove"]
    assert set(repair["unstaged"]) == {
        "nvidia-cudnn-cu12==9.10.2.21", "nvidia-nccl-cu12==2.27.3", "nvidia-nvshmem-cu12==3.3.20",
    }  # fmt: skip
    local = ["--offline", "--find-links", str(built.wheelhouse)]
    plan = as_json(cudafix(*remote[:4], "--dry-run", "--json", *local))
    assert {"--repair", "--keep-shared"} <= {w for a in plan["alternatives"] for w in a["argv"]}
    assert all(not a["unstaged"] for a in plan["alternatives"])
    run = cudafix(
        *[w for a in plan["alternatives"] if "--repair" in a["argv"] for w in a["argv"]][1:]
    )
    assert run.returncode == 0, run.stderr  # the printed command passes as printed
