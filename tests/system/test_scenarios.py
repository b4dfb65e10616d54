"""Every scenario builds from real wheels with real uv and behaves as its TOML says.

The generic test replays each scenario's ``[expect.<stage>]`` imports, ``uv pip check``,
``uv pip list`` and loader expectations against the built venv; the specific tests pin the
properties each scenario exists for (the incident's broken import, the loader's choice in
``shadowing``, nothing written outside the venv in ``hostile``, sizes in ``large``).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import uv

from cudafix.model.errors import InputError
from scenarios import BuiltScenario, build_spec, load_scenario
from scenarios.build import builder_env, uv_binary
from scenarios.catalog import scenario_names
from scenarios.spec import Scenario
from scenarios.steps import Venv, confined
from scenarios.wheel import record_hash
from tests.support.venvs import ScenarioFactory, site_dir

UV = uv.find_uv_bin()
SMALL_SPECS = [n for n in scenario_names() if n != "large"]
STAGES = [
    (name, stage)
    for name in SMALL_SPECS
    for stage in ("ready", "broken")
    if stage == "ready" or any(s.tag == "break" for s in load_scenario(name).steps)
]
LARGE_SMALL = {"files": 600, "elves": 30, "sparse_mib": 8, "sparse_libs": 2}

_MAPPED = """
import ctypes, json, sys
ctypes.CDLL(sys.argv[1])
seen = {l.split()[-1] for l in open('/proc/self/maps') if l.rstrip().endswith('/' + sys.argv[2])}
print(json.dumps(sorted(seen)))
"""


def py(
    built: BuiltScenario, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    merged = {**os.environ, **(env or {})}
    return subprocess.run([str(built.python), *args], capture_output=True, text=True, env=merged)


def uv_pip(built: BuiltScenario, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [UV, "pip", *args, "--python", str(built.python)]
    return subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **builder_env()})


def installed(built: BuiltScenario) -> set[str]:
    out = uv_pip(built, "list", "--format", "json")
    assert out.returncode == 0, out.stderr
    return {row["name"] for row in json.loads(out.stdout)}


def shared_by_record(built: BuiltScenario) -> set[str]:
    """Paths two or more RECORDs claim: what ``doctor.shared`` must list."""
    owners: dict[str, set[str]] = {}
    for record in site_dir(built.venv).glob("*.dist-info/RECORD"):
        for row in record.read_text().splitlines():
            owners.setdefault(row.rsplit(",", 2)[0], set()).add(record.parent.name)
    return {path for path, who in owners.items() if len(who) > 1}


def mapped(built: BuiltScenario, consumer: str, soname: str) -> list[str]:
    """Files named ``soname`` the real loader maps once ``consumer`` is dlopen()ed."""
    out = py(built, "-c", _MAPPED, str(site_dir(built.venv) / consumer), soname)
    assert out.returncode == 0, out.stderr
    return [str(Path(p)) for p in json.loads(out.stdout)]


# ---- every scenario, every stage: the TOML's expectations hold ------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(("name", "stage"), STAGES)
def test_expectations_hold(scenario: ScenarioFactory, name: str, stage: str) -> None:
    built = scenario(name, stage)
    want = built.spec.expectations(stage)
    for module in want.imports_ok:
        out = py(built, "-c", f"import {module}")
        assert out.returncode == 0, out.stderr
    for module, message in want.imports_fail.items():
        out = py(built, "-c", f"import {module}")
        assert out.returncode != 0 and message in out.stderr, out.stderr
    if want.pip_check_clean is not None:
        assert (uv_pip(built, "check").returncode == 0) is want.pip_check_clean
    names = installed(built)
    assert set(want.installed) <= names
    assert not set(want.absent) & names
    assert shared_by_record(built) == set(want.doctor.shared)
    for key, expected in want.loader.items():
        consumer, soname = key.split(":")
        assert mapped(built, consumer, soname) == [str((site_dir(built.venv) / expected).resolve())]


# ---- 1. incident ------------------------------------------------------------------------------


@pytest.mark.slow
def test_incident_break_command_breaks_torch_while_pip_check_stays_clean(
    scenario: ScenarioFactory,
) -> None:
    built = scenario("incident")
    assert py(built, "-c", "import torch").returncode == 0
    assert built.break_command()[-3:] == ["--python", str(built.python), "nvidia-cudnn-cu13"]
    subprocess.run(built.break_command(), check=True, capture_output=True, env=builder_env())
    out = py(built, "-c", "import torch")
    assert out.returncode == 1
    assert "libcudnn.so.9: cannot open shared object file" in out.stderr
    assert uv_pip(built, "check").returncode == 0
    assert {"nvidia-cudnn-cu12", "torch"} <= installed(built)
    assert "nvidia-cudnn-cu13" not in installed(built)


@pytest.mark.slow
def test_incident_cu13_clobbered_cu12_bytes(scenario: ScenarioFactory) -> None:
    built = scenario("incident")
    lib = site_dir(built.venv) / "nvidia/cudnn/lib/libcudnn.so.9"
    assert b"nvidia-cudnn-cu13 9.13.0.50" in lib.read_bytes()
    (record,) = site_dir(built.venv).glob("nvidia_cudnn_cu12-*.dist-info/RECORD")
    row = next(
        r
        for r in record.read_text().splitlines()
        if r.startswith("nvidia/cudnn/lib/libcudnn.so.9,")
    )
    assert row.split(",")[1] != record_hash(lib.read_bytes())


@pytest.mark.slow
def test_incident_cudnn_really_dlopens_its_parts(scenario: ScenarioFactory) -> None:
    built = scenario("incident")
    out = py(built, "-c", "import torch", env={"LD_DEBUG": "libs"})
    assert out.returncode == 0
    for part in ("libcudnn_graph.so.9", "libcudnn_ops.so.9"):
        assert f"nvidia/cudnn/lib/{part}" in out.stderr


@pytest.mark.slow
def test_stage_broken_builds_the_broken_venv_directly(scenario: ScenarioFactory) -> None:
    built = scenario("incident", "broken")
    assert built.stage == "broken"
    assert not (site_dir(built.venv) / "nvidia/cudnn/lib/libcudnn.so.9").exists()
    assert (site_dir(built.venv) / "nvidia/nccl/lib/libnccl.so.2").exists()


# ---- 3. shadowing -----------------------------------------------------------------------------


@pytest.mark.slow
def test_shadowing_loader_picks_cu12_for_cu13_torch(scenario: ScenarioFactory) -> None:
    built = scenario("shadowing")
    consumer = site_dir(built.venv) / "torch/lib/libtorch_cuda.so"
    out = subprocess.run(["ldd", str(consumer)], capture_output=True, text=True, check=True)
    line = next(ln for ln in out.stdout.splitlines() if "libcusparseLt.so.0" in ln)
    assert "/nvidia/cusparselt/lib/libcusparseLt.so.0" in line
    assert (site_dir(built.venv) / "nvidia/cu13/lib/libcusparseLt.so.0").is_file()


# ---- 4. clean ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_clean_plain_uninstall_of_the_leaf_is_harmless(scenario: ScenarioFactory) -> None:
    built = scenario("clean")
    subprocess.run(built.break_command(), check=True, capture_output=True, env=builder_env())
    assert py(built, "-c", "import torch").returncode == 0
    assert uv_pip(built, "check").returncode == 0


# ---- 5. dlopen --------------------------------------------------------------------------------


@pytest.mark.slow
def test_dlopen_part_is_invisible_to_needed_and_requires(scenario: ScenarioFactory) -> None:
    built = scenario("dlopen")
    ldd = subprocess.run(
        ["ldd", str(site_dir(built.venv) / "vendorlib/lib/libfoo.so.1")],
        capture_output=True,
        text=True,
    )
    assert "libfoo_part" not in ldd.stdout
    assert built.spec.dlopen == {"libfoo.so.1": ("libfoo_part.so.1",)}
    assert uv_pip(built, "check").returncode == 0


# ---- 6. requires ------------------------------------------------------------------------------


@pytest.mark.slow
def test_requires_break_shows_in_pip_check_only(scenario: ScenarioFactory) -> None:
    built = scenario("requires", "broken")
    check = uv_pip(built, "check")
    assert check.returncode != 0 and "nvidia-cuda-nvrtc-cu12" in check.stdout + check.stderr
    assert py(built, "-c", "import torch").returncode == 0


# ---- 7. hostile -------------------------------------------------------------------------------


@pytest.mark.slow
def test_hostile_nothing_written_outside_the_venv(scenario: ScenarioFactory) -> None:
    built = scenario("hostile")
    outside = built.venv.parent / "venv.outside"
    assert sorted(p.name for p in built.venv.parent.iterdir()) == ["venv", "venv.outside"]
    assert [p.name for p in outside.iterdir()] == ["libext.so.1"]
    assert not Path("/etc/cudafix-hostile-escape").exists()
    assert not Path("/etc/cudafix-hostile-absolute").exists()
    link = site_dir(built.venv) / "hostile_ext"
    assert link.is_symlink() and link.resolve() == outside.resolve()


@pytest.mark.slow
def test_hostile_record_and_files(scenario: ScenarioFactory) -> None:
    built = scenario("hostile")
    sp = site_dir(built.venv)
    (record,) = sp.glob("hostile_pkg-1.0.dist-info/RECORD")
    rows = record.read_text().splitlines()
    for line in (
        "../../../../etc/cudafix-hostile-escape,,",
        "/etc/cudafix-hostile-absolute,,",
        "hostile_ext/libext.so.1,,",
        "hostile/lib/libfoo.so,,",
        "hostile/lib/libfifo.so.1,,",
    ):
        assert line in rows
    assert not list(sp.glob("no_record_pkg-2.0.dist-info/RECORD"))
    (installer,) = sp.glob("no_record_pkg-2.0.dist-info/INSTALLER")
    assert installer.read_text().strip() == "pip"
    assert (sp / "legacy_egg-0.1-py3.11.egg-info/PKG-INFO").is_file()
    lib = sp / "hostile/lib"
    assert stat.S_ISFIFO((lib / "libfifo.so.1").lstat().st_mode)
    assert (lib / "libgone.so.1").is_symlink() and not (lib / "libgone.so.1").exists()
    assert os.readlink(lib / "libfoo.so") == "libfoo.so.1"
    assert (lib / "libbar.so").read_text().startswith("/* GNU ld script */")
    assert (lib / "libtrunc.so.1").stat().st_size == 100
    head = (lib / "libarm.so.1").read_bytes()[:20]
    assert head[:4] == b"\x7fELF" and int.from_bytes(head[18:20], "little") == 183


@pytest.mark.parametrize(
    "path",
    [
        "../escape",
        "/etc/x",
        "{site}/../../../../x",
        "{site}/hostile_ext/evil",
        "{site}/hostile_ext/evil/deeper",
        "{outside}/../x",
    ],
)
@pytest.mark.slow
def test_hostile_steps_are_confined(scenario: ScenarioFactory, path: str) -> None:
    built = scenario("hostile")
    venv = Venv(built.venv, built.wheelhouse, uv_binary(), builder_env())
    with pytest.raises(InputError):
        confined(venv, path)
    assert [p.name for p in (built.venv.parent / "venv.outside").iterdir()] == ["libext.so.1"]


# ---- 8. large ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_large_small_variant_has_the_requested_shape(scenario: ScenarioFactory) -> None:
    built = scenario("large", params=LARGE_SMALL)
    sp = site_dir(built.venv)
    files = [p for p in sp.rglob("*") if p.is_file()]
    records = sum(len(r.read_text().splitlines()) for r in sp.glob("*.dist-info/RECORD"))
    assert abs(records - LARGE_SMALL["files"]) < 20
    elves = [p for p in files if p.read_bytes()[:4] == b"\x7fELF"]
    assert len(elves) == LARGE_SMALL["elves"]
    big = sp / "torch/lib/libtorch_cuda.so"
    assert big.stat().st_size == LARGE_SMALL["sparse_mib"] << 20
    assert big.stat().st_blocks * 512 < 1 << 20  # sparse: the size is not on disk
    (record,) = sp.glob("torch-*.dist-info/RECORD")
    row = next(
        r for r in record.read_text().splitlines() if r.startswith("torch/lib/libtorch_cuda.so,")
    )
    assert row.split(",")[1:] == [record_hash(big.read_bytes()), str(big.stat().st_size)]
    assert py(built, "-c", "import torch").returncode == 0


# ---- the builder: cache, concurrency, validation, CLI -----------------------------------------


@pytest.mark.slow
def test_second_build_reuses_the_cached_wheelhouse(scenario: ScenarioFactory) -> None:
    first, second = scenario("clean"), scenario("clean")
    assert first.wheelhouse == second.wheelhouse
    assert first.venv != second.venv
    assert sorted(p.name for p in first.wheelhouse.iterdir()) == [
        f"{n}.whl" for n in sorted(p.stem for p in second.wheelhouse.iterdir())
    ]


@pytest.mark.slow
def test_concurrent_builds_share_one_cache_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    env = {**os.environ, "CUDAFIX_SCENARIO_CACHE": str(cache)}
    cmd = [sys.executable, "-m", "scenarios", "build", "dlopen"]
    procs = [
        subprocess.Popen(
            [*cmd, str(tmp_path / f"v{i}")], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for i in range(3)
    ]
    for proc in procs:
        _, err = proc.communicate()
        assert proc.returncode == 0, err
    entries = [p for p in cache.iterdir() if p.is_dir() and p.name != "uv"]
    assert len(entries) == 1, entries
    for i in range(3):
        out = subprocess.run([str(tmp_path / f"v{i}/bin/python"), "-c", "import vendorlib"])
        assert out.returncode == 0


@pytest.mark.slow
@pytest.mark.parametrize("installer", ["pip", "uv"])
@pytest.mark.parametrize("compile_bytecode", [True, False])
def test_compile_leaves_bytecode_as_the_installer_does(
    tmp_path: Path, installer: str, compile_bytecode: bool
) -> None:
    """``compile = true``: pip writes .pyc and RECORDs it with an empty hash (as pip does by
    default), uv writes .pyc only; ``false``: neither writes bytecode."""
    spec = Scenario.model_validate(
        {
            "name": "bytecode",
            "description": "one package with a module",
            "compile": compile_bytecode,
            "dist": [{"name": "pkg", "version": "1.0", "files": {"pkg/__init__.py": "X = 1\n"}}],
            "steps": [{"action": "install", "installer": installer, "packages": ["pkg==1.0"]}],
        }
    )
    built = build_spec(spec, tmp_path / "venv")
    pycs = sorted(p.name for p in site_dir(built.venv).glob("pkg/__pycache__/*.pyc"))
    assert pycs == ([f"__init__.{sys.implementation.cache_tag}.pyc"] if compile_bytecode else [])
    (record,) = site_dir(built.venv).glob("pkg-1.0.dist-info/RECORD")
    rows = [r for r in record.read_text().splitlines() if ".pyc" in r]
    assert rows == (
        [f"pkg/__pycache__/{pycs[0]},,"] if compile_bytecode and installer == "pip" else []
    )


@pytest.mark.slow
def test_cli_list_and_build(tmp_path: Path) -> None:
    cli = [sys.executable, "-m", "scenarios"]
    listed = subprocess.run([*cli, "list"], capture_output=True, text=True, check=True)
    assert "incident" in listed.stdout and "large" in listed.stdout
    dest = tmp_path / "venv"
    out = subprocess.run(
        [*cli, "build", "incident", str(dest), "--stage", "broken"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert "uv pip uninstall" in out.stdout
    assert (
        "libcudnn.so.9"
        in subprocess.run(
            [str(dest / "bin/python"), "-c", "import torch"], capture_output=True, text=True
        ).stderr
    )
    bad = subprocess.run(
        [*cli, "build", "nope", str(tmp_path / "x")], capture_output=True, text=True
    )
    assert bad.returncode != 0 and "no scenario named" in bad.stderr
