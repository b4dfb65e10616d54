"""Frameworks that load their CUDA libraries at run time (JAX's plugin, CuPy), through the CLI.

The ``runtime`` scenario has the real layouts: ``jax_cuda12_plugin/_versions.so`` reaches its
libraries only by dlopen() through its own RUNPATH, and cupy loads ``libcurand.so.10`` by full
path before importing the module that needs it. Neither is in DT_NEEDED, and pip check never
sees the requirements behind the extras. The oracle is the real loader: the plugin object's own
``cudafix_dlopen`` (dlopen called from inside it, so ld.so searches its RUNPATH), and
``import cupy`` (which loads by path as cupy does).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cudafix.model.doctor import RequirementUnmet, SharedPaths
from cudafix.model.probe import ProbeSpec
from cudafix.tx.probe import run_probes
from scenarios import BuiltScenario
from tests.support.cli import as_json, assert_one_line_error, cudafix, repair_offline, uv_uninstall
from tests.support.doctor import diagnosed, with_facts
from tests.support.venvs import ScenarioFactory, site_dir

pytestmark = pytest.mark.slow
"""Builds real venvs and runs the CLI on them: left out of ``make test-fast``."""

PLUGIN = "jax_cuda12_plugin/_versions.so"


def plugin_dlopen(built: BuiltScenario, soname: str) -> subprocess.CompletedProcess[str]:
    """dlopen ``soname`` from inside the plugin object, in the venv's interpreter."""
    code = (
        "import ctypes, sys\n"
        f"lib = ctypes.CDLL({str(site_dir(built.venv) / PLUGIN)!r})\n"
        f"sys.exit(0 if lib.cudafix_dlopen({soname.encode()!r}) == 1 else 1)\n"
    )
    return subprocess.run(
        [str(built.python), "-c", code], capture_output=True, text=True, check=False
    )


def test_removing_a_library_the_plugin_dlopens_is_refused_naming_it_and_the_extra(
    scenario: ScenarioFactory,
) -> None:
    built = scenario("runtime")
    assert plugin_dlopen(built, "libcudnn.so.9").returncode == 0
    proc = cudafix("remove", "nvidia-cudnn-cu12", "--venv", built.venv, "--dry-run", "--no-fetch")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    verdict = proc.stdout.split("Verdict: REFUSED", 1)[1]
    assert f"{PLUGIN} (jax-cuda12-plugin) loads libcudnn.so.9 at run time" in verdict
    assert "jax-cuda12-plugin[with-cuda] requires nvidia-cudnn-cu12" in verdict
    plan = as_json(
        cudafix("remove", "nvidia-cudnn-cu12", "--venv", built.venv, "--dry-run", "--json")
    )
    (lost,) = plan["lost"]
    assert (lost["consumer"].endswith(PLUGIN), lost["need"]) == (True, "libcudnn.so.9")
    assert lost["run_time_load"] == "jax-cuda12-plugin[with-cuda]"
    assert [(b["distribution"], b["extra"]) for b in plan["requirement_breaks"]] == [
        ("jax-cuda12-plugin", "with-cuda")
    ]


def test_doctor_names_the_lost_run_time_library_and_repair_installs_the_extras_pin(
    scenario: ScenarioFactory,
) -> None:
    built = scenario("runtime", "broken")
    assert plugin_dlopen(built, "libcudnn.so.9").returncode == 1  # the break is real
    proc = cudafix("doctor", "--venv", built.venv, "--json")
    assert proc.returncode == 1
    report = as_json(proc)
    runtime = [f for f in report["findings"] if f["need"] == "libcudnn.so.9"]
    assert [(f["severity"], f["consumer"].endswith(PLUGIN)) for f in runtime] == [("error", True)]
    assert runtime[0]["distribution"] == "jax-cuda12-plugin"
    assert list(report["install"]) == ["nvidia-cudnn-cu12<10.0,>=9.1"]
    # jax[cuda12] asked for jax-cuda12-plugin[with-cuda]: its requirement is reported too
    found = diagnosed(built.venv).findings
    assert "jax-cuda12-plugin[with-cuda]" in {
        u.requested_as for _, u in with_facts(found, RequirementUnmet)
    }
    done = repair_offline(built, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    result = as_json(done)
    assert result["installed"] == ["nvidia-cudnn-cu12==9.1.0.70"]  # uv's pick for the range
    # the probes loaded what the plugin loads at run time, through its RUNPATH
    (run_time,) = [p for p in result["probes"] if p.startswith("load at run time")]
    assert (
        f"libcudnn.so.9 by lib/{site_dir(built.venv).parent.name}/site-packages/{PLUGIN}"
        in run_time
    )
    assert plugin_dlopen(built, "libcudnn.so.9").returncode == 0
    assert cudafix("doctor", "--venv", built.venv).returncode == 0


def test_cupy_by_path_load_refused_diagnosed_and_repaired(scenario: ScenarioFactory) -> None:
    built = scenario("runtime")
    proc = cudafix("remove", "nvidia-curand-cu12", "--venv", built.venv, "--dry-run", "--no-fetch")
    assert proc.returncode == 3
    # cupy-cuda12x[ctk] asks for cuda-toolkit[curand], which lists the wheel
    assert "cuda-toolkit[curand] requires nvidia-curand-cu12" in proc.stdout
    assert "loads nvidia/curand/lib/libcurand.so.10 at run time" in proc.stdout
    uv_uninstall(built.python, "nvidia-curand-cu12")
    imported = subprocess.run([str(built.python), "-c", "import cupy"], capture_output=True)
    assert imported.returncode != 0  # cupy's own loader fails on the missing file
    report = as_json(cudafix("doctor", "--venv", built.venv, "--json"))
    errors = [f for f in report["findings"] if f["severity"] == "error"]
    assert any(
        f["kind"] == "unresolved"
        and f["need"].endswith("nvidia/curand/lib/libcurand.so.10")
        and f["distribution"] == "cupy-cuda12x"
        for f in errors
    ), errors
    assert list(report["install"]) == ["nvidia-curand-cu12==10.3.5.147"]
    done = repair_offline(built)
    assert done.returncode == 0, done.stdout + done.stderr
    ok = subprocess.run([str(built.python), "-c", "import cupy"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr


def test_a_by_path_load_whose_wheel_is_gone_finds_the_hosts_copy(
    scenario: ScenarioFactory, tmp_path: Path
) -> None:
    """cuda-pathfinder (and JAX's ``_load``) fall back to the library's name when the
    wheel's file is gone: a copy the host's loader finds serves. Seen on a GPU host with
    /usr/local/cuda in its ld.so cache, where jax, cupy and torch ran on after a plain
    uninstall of nvidia-cufft that cudafix called fatal. Here LD_LIBRARY_PATH is the host."""
    built = scenario("runtime")
    host = tmp_path / "host-lib"
    host.mkdir()
    shutil.copy2(site_dir(built.venv) / "nvidia/curand/lib/libcurand.so.10", host)
    with_host = {"LD_LIBRARY_PATH": str(host)}
    proc = cudafix(
        "remove", "nvidia-curand-cu12", "--venv", built.venv, "--dry-run", "--no-fetch",
        "--json", env=with_host,
    )  # fmt: skip
    plan = as_json(proc)
    assert not [x for x in plan["lost"] if x["need"].endswith("libcurand.so.10")], plan["lost"]
    # still refused: cuda-toolkit[curand] requires the wheel
    assert proc.returncode == 3 and plan["requirement_breaks"], proc.stdout
    switched = [s for s in plan["switches"] if s["after"] == str(host / "libcurand.so.10")]
    assert switched, plan["switches"]
    text = cudafix(
        "remove", "nvidia-curand-cu12", "--venv", built.venv, "--dry-run", "--no-fetch",
        env=with_host,
    ).stdout  # fmt: skip
    assert text.count(f"{host}/libcurand.so.10") == len(switched), text  # said once each

    # forced past the requirement: the probes load what cupy would, the host's copy
    forced = cudafix(
        "remove", "nvidia-curand-cu12", "--venv", built.venv, "--allow-broken-requirements",
        "--keep-shared", "--yes", env=with_host,
    )  # fmt: skip
    assert forced.returncode == 0 and "Committed" in forced.stdout, forced.stdout + forced.stderr
    cudafix("undo", "last", "--venv", built.venv, "--yes", env=with_host)

    uv_uninstall(built.python, "nvidia-curand-cu12")
    cupy = [str(built.python), "-c", "import cupy"]
    assert subprocess.run(cupy, capture_output=True).returncode != 0  # no host copy
    ran = subprocess.run(cupy, capture_output=True, text=True, env={**os.environ, **with_host})
    assert ran.returncode == 0, ran.stderr  # the oracle: the host's copy serves
    for env, broken in (({}, True), (with_host, False)):
        report = as_json(cudafix("doctor", "--venv", built.venv, "--json", env=env))
        unresolved = [
            f for f in report["findings"]
            if f["kind"] == "unresolved" and f["need"].endswith("libcurand.so.10")
        ]  # fmt: skip
        assert bool(unresolved) == broken, report["findings"]
        # the requirement is broken either way, and repair reinstalls the wheel
        assert list(report["install"]) == ["nvidia-curand-cu12==10.3.5.147"]


def test_user_run_time_rows_join_the_shipped_ones(
    scenario: ScenarioFactory, tmp_path: Path
) -> None:
    """``--dlopen-table`` takes ``[[load]]`` rows: a load only the user knows is protected."""
    built = scenario("runtime")
    table = tmp_path / "mine.toml"
    table.write_text(
        '[[load]]\nframework = "jax-cuda12-plugin"\nobjects = ["jax_cuda12_plugin/_versions.so"]\n'
        'paths = ["nvidia/curand/lib/libcurand.so.10"]\nsource = "our own trace"\n'
    )
    args = ("remove", "nvidia-curand-cu12", "--venv", built.venv, "--dry-run", "--json")
    plain = as_json(cudafix(*args))
    mine = as_json(cudafix(*args, "--dlopen-table", table))
    assert not any(x["consumer"].endswith(PLUGIN) for x in plain["lost"])
    assert [
        x["need"].rsplit("/", 1)[-1] for x in mine["lost"] if x["consumer"].endswith(PLUGIN)
    ] == ["libcurand.so.10"]
    bad = tmp_path / "bad.toml"
    bad.write_text('[[load]]\nframework = "jax"\nobjects = "not a list"\n')
    assert_one_line_error(
        cudafix("doctor", "--venv", built.venv, "--dlopen-table", bad), 2, "bad.toml", "objects"
    )


def test_a_run_time_load_probe_fails_where_the_objects_search_path_holds_nothing(
    tmp_path: Path,
) -> None:
    """The probe loads a soname from the object's own dirs, else as the system would: a
    library in neither fails the probe (the transaction then rolls back)."""
    here = tmp_path / "lib"
    here.mkdir()
    spec = ProbeSpec(
        run_time=(("libcudafix_absent.so.1 by x.so", "libcudafix_absent.so.1", (str(here),)),)
    )
    (result,) = run_probes(Path(sys.prefix), Path(sys.executable), spec, tmp_path)
    assert not result.ok
    assert "libcudafix_absent.so.1" in result.error


def test_a_run_time_load_probe_of_many_loads_is_not_cut_by_the_argument_limit(
    tmp_path: Path,
) -> None:
    """A venv with thousands of run-time loads (flashinfer's and sglang's Python sources):
    their list, 300 KB here, is more than one argument may hold (128 KiB); the probe reads
    it whole and loads every one."""
    here = tmp_path / "lib"
    here.mkdir()
    many = tuple(
        (f"libm.so.6 by site/{'pkg/' * 12}module_{i}.py", "libm.so.6", (str(here),))
        for i in range(3000)
    )
    (result,) = run_probes(
        Path(sys.prefix), Path(sys.executable), ProbeSpec(run_time=many), tmp_path
    )
    assert result.ok, result.error


def test_two_frameworks_sharing_cudnn_are_not_told_to_remove_what_one_requires(
    scenario: ScenarioFactory,
) -> None:
    """torch cu13 + jax[cuda12]: cudnn-cu12 and -cu13 clobber each other's files, and each is
    required by a framework; doctor warns but offers no removal, naming both requirements."""
    built = scenario("torch-jax")
    report = as_json(cudafix("doctor", "--venv", built.venv, "--json"))
    (clobber,) = [f for f in report["findings"] if f["kind"] == "clobbered"]
    assert clobber["owners"] == ["nvidia-cudnn-cu12", "nvidia-cudnn-cu13"]
    assert clobber["command"] == [] and report["next_command"] == []
    found = with_facts(diagnosed(built.venv).findings, SharedPaths)
    [shared] = [facts for f, facts in found if f.kind == "clobbered"]
    assert shared.required_by == {
        "nvidia-cudnn-cu12": ["jax-cuda12-plugin"],
        "nvidia-cudnn-cu13": ["torch"],
    }


def test_each_offered_framework_removal_passes_as_printed(scenario: ScenarioFactory) -> None:
    """Removing jax's CUDA plugin must take jax with it (jax[cuda12] asks for the plugin), and
    removing torch must take cuda-toolkit (whose extras torch asked for list the cu13 wheels
    removed with it), or the printed command is refused on the requirement it breaks."""
    built = scenario("torch-jax")
    report = as_json(cudafix("doctor", "--venv", built.venv, "--json"))
    (mixed,) = [f for f in report["findings"] if f["kind"] == "mixed-cuda"]
    offered = [c for c in mixed["choices"] if c["action"] == "remove-framework"]
    assert [c["frameworks"] for c in offered] == [
        ["jax-cuda12-plugin", "jax"],
        ["torch", "cuda-toolkit"],
    ]
    for choice in offered:
        argv = shlex.split(choice["command"])[1:]
        done = cudafix(*argv, "--no-fetch", "--offline", "--find-links", built.wheelhouse)
        assert done.returncode == 0, done.stdout + done.stderr


def test_a_leftover_wheels_missing_requirement_is_mended_by_removing_it(
    scenario: ScenarioFactory,
) -> None:
    """A stray cu12 cuDNN in a cu13 torch venv asks for ``nvidia-cublas-cu12``: doctor's
    next step removes the stray wheel, and running it mends the venv; installing the cu12
    cuBLAS would have deepened the mix."""
    built = scenario("leftover")
    report = as_json(cudafix("doctor", "--venv", built.venv, "--json"))
    (req,) = [f for f in report["findings"] if f["kind"] == "requirement"]
    assert req["distribution"] == "nvidia-cudnn-cu12"
    assert req["command"][:3] == ["cudafix", "remove", "nvidia-cudnn-cu12"]
    assert report["install"] == {}
    assert "install" not in report["next_command"]
    argv = [*report["next_command"][1:], "--offline", "--find-links", built.wheelhouse]
    planned = cudafix(*argv)
    assert planned.returncode == 0, planned.stdout + planned.stderr
    done = cudafix(*[a for a in argv if a != "--dry-run"], "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert cudafix("doctor", "--venv", built.venv).returncode == 0


def test_a_forced_removal_that_breaks_a_run_time_load_is_rolled_back_by_its_probe(
    scenario: ScenarioFactory,
) -> None:
    """``--force`` overrides the verdict, never the probes: the load the plan breaks is
    probed (and fails), so the transaction rolls back and the plugin still loads cuDNN."""
    built = scenario("runtime")
    plan = as_json(
        cudafix("remove", "nvidia-cudnn-cu12", "--venv", built.venv, "--dry-run", "--json")
    )
    probed = {
        (p["object"].rsplit("site-packages/", 1)[-1], p["need"]) for p in plan["probe_run_time"]
    }
    assert (PLUGIN, "libcudnn.so.9") in probed
    proc = cudafix(
        "remove", "nvidia-cudnn-cu12", "--venv", built.venv, "--yes", "--force", "--no-fetch"
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert plugin_dlopen(built, "libcudnn.so.9").returncode == 0
