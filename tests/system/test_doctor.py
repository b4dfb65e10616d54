"""doctor findings that no shipped scenario exercises, on venvs built by the real builder."""

from __future__ import annotations

import compileall
import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from cudafix.env.target import locate_target
from cudafix.gather import gather
from cudafix.model.doctor import MixedSonames, Unresolved
from cudafix.model.probe import ProbeSpec
from cudafix.model.reasons import ForeignOwnFiles
from cudafix.tx.probe import run_probes
from tests.support.cli import as_json, cudafix
from tests.support.doctor import diagnosed, with_facts
from tests.support.venvs import ScenarioFactory, build_toml, site_dir, venv_with
from tests.support.wheels import make_wheel

pytestmark = pytest.mark.slow
"""Builds real venvs or runs the CLI through transactions: left out of ``make test-fast``."""


# A cu13 extension that links libcudart.so.13 directly and, through a leftover cu12 cublas,
# libcudart.so.12 as well: no single object needs both, the process maps both.
MIXED = """
name = "mixed-majors"
description = "one load tree maps libcudart.so.12 and libcudart.so.13"

[[dist]]
name = "nvidia-cuda-runtime-cu12"
version = "12.8.90"
lib = [{ path = "nvidia/cuda_runtime/lib/libcudart.so.12" }]

[[dist]]
name = "nvidia-cublas-cu12"
version = "12.8.4.1"
[[dist.lib]]
path = "nvidia/cublas/lib/libcublas.so.12"
needed = ["libcudart.so.12"]
rpath = ["$ORIGIN/../../cuda_runtime/lib"]

[[dist]]
name = "nvidia-cuda-runtime"
version = "13.0.96"
lib = [{ path = "nvidia/cu13/lib/libcudart.so.13" }]

[[dist]]
name = "kernels"
version = "1.0"
files = { "kernels/__init__.py" = "from kernels import _ops\\n" }
[[dist.ext]]
path = "kernels/_ops"
needed = ["libcudart.so.13", "libcublas.so.12"]
rpath = ["$ORIGIN/../nvidia/cu13/lib", "$ORIGIN/../nvidia/cublas/lib"]

[[steps]]
action = "install"
packages = ["nvidia-cuda-runtime-cu12==12.8.90", "nvidia-cublas-cu12==12.8.4.1",
            "nvidia-cuda-runtime==13.0.96", "kernels==1.0"]
"""


def test_two_majors_in_one_load_tree_are_reported(tmp_path: Path) -> None:
    built = build_toml(MIXED, tmp_path / "venv")
    proc = cudafix("doctor", "--json", "--venv", built.venv)
    assert proc.returncode == 1
    majors, *mixed = [f for f in as_json(proc)["findings"] if f["kind"] == "mixed-cuda"]
    # the unsuffixed nvidia-cuda-runtime 13.0.96 is CUDA 13 (nvidia/cu13/lib)
    assert majors["details"] == [
        "cu12: nvidia-cublas-cu12, nvidia-cuda-runtime-cu12",
        "cu13: nvidia-cuda-runtime",
    ]
    assert len(mixed) == 1, mixed
    [(_, tree)] = with_facts(diagnosed(built.venv).findings, MixedSonames)
    assert [ld.need for ld in tree.loads] == ["libcudart.so.12", "libcudart.so.13"]
    assert "kernels/_ops" in tree.root
    assert tree.loads[0].requester.endswith("nvidia/cublas/lib/libcublas.so.12")


# What a healthy CUDA venv on a CPU box looks like: an extension whose tree needs the driver's
# libcuda.so.1, and an on-demand plugin needing an optional stack nobody installed.
CPU_BOX = """
name = "cpu-box"
description = "needs only a driver and optional stacks are missing"

[[dist]]
name = "gpukit"
version = "1.0"
files = { "gpukit/__init__.py" = "" }
[[dist.lib]]
path = "gpukit/lib/libkernels.so"
needed = ["libcuda.so.1"]
[[dist.lib]]
path = "gpukit/lib/plugins/libtransport_ucx.so"
needed = ["libucp.so.0", "libcudafix_nowhere.so.7"]
[[dist.ext]]
path = "gpukit/_core"
needed = ["libkernels.so"]
rpath = ["$ORIGIN/lib"]

# Built (the builder links needs against real objects) but never installed.
[[dist]]
name = "not-installed"
version = "0"
lib = [
    { path = "elsewhere/libcuda.so.1" },
    { path = "elsewhere/libucp.so.0" },
    { path = "elsewhere/libcudafix_nowhere.so.7" },
]

[[steps]]
action = "install"
packages = ["gpukit==1.0"]
"""


def test_driver_and_on_demand_gaps_are_information_not_problems(tmp_path: Path) -> None:
    built = build_toml(CPU_BOX, tmp_path / "venv")
    proc = cudafix("doctor", "--json", "--venv", built.venv)
    unresolved = {f["need"]: f for f in as_json(proc)["findings"] if f["kind"] == "unresolved"}
    assert set(unresolved) == {"libcuda.so.1", "libucp.so.0", "libcudafix_nowhere.so.7"}
    assert all(f["severity"] == "info" for f in unresolved.values()), unresolved
    assert unresolved["libcuda.so.1"]["command"] == []
    assert proc.returncode == 0, proc.stdout
    facts = {f.need: u for f, u in with_facts(diagnosed(built.venv).findings, Unresolved)}
    assert (
        facts["libcuda.so.1"].system is not None and "NVIDIA driver" in facts["libcuda.so.1"].system
    )
    nowhere = facts["libcudafix_nowhere.so.7"]
    assert (nowhere.chains, nowhere.system, nowhere.optional_for) == (0, None, None)


def test_an_objects_search_directories_are_listed_once_not_per_need(tmp_path: Path) -> None:
    """Each unresolved need was searched in the same directories; repeating them per need
    made the report (and doctor's memory) objects x needs x directories."""
    dirs = [f"$ORIGIN/../sub{k}/lib" for k in range(30)]
    spec = CPU_BOX.replace(
        'needed = ["libucp.so.0", "libcudafix_nowhere.so.7"]',
        f'needed = ["libucp.so.0", "libcudafix_nowhere.so.7"]\nrunpath = {dirs!r}'.replace(
            "'", '"'
        ),
    )
    built = build_toml(spec, tmp_path / "venv")
    report = as_json(cudafix("doctor", "--json", "--venv", built.venv))
    plugin = [
        f
        for f in _finding(report, "unresolved")
        if f["consumer"].endswith("plugins/libtransport_ucx.so")
    ]
    assert [f["need"] for f in plugin] == ["libcudafix_nowhere.so.7", "libucp.so.0"]
    assert len(plugin[0]["details"]) > 30 and len(plugin[1]["details"]) == 1
    first, second = (
        u
        for f, u in with_facts(diagnosed(built.venv).findings, Unresolved)
        if f.consumer is not None and f.consumer.endswith("plugins/libtransport_ucx.so")
    )
    assert len(first.searched) > 30 and first.searched_as is None
    assert "gpukit/lib/sub29/lib" in first.searched[29]
    assert (second.searched, second.searched_as) == ([], "libcudafix_nowhere.so.7")
    assert second.searched_count == len(first.searched)


def test_an_import_that_would_fail_is_an_error(tmp_path: Path) -> None:
    spec = CPU_BOX.replace('needed = ["libcuda.so.1"]', 'needed = ["libcudafix_nowhere.so.7"]')
    built = build_toml(spec, tmp_path / "venv")
    proc = cudafix("doctor", "--json", "--venv", built.venv)
    errors = [f for f in as_json(proc)["findings"] if f["severity"] == "error"]
    assert [f["kind"] for f in errors] == ["unresolved"]
    assert errors[0]["consumer"].endswith("gpukit/lib/libkernels.so")
    assert proc.returncode == 1


# The pristine-install shape: torch's cu13 libraries from nvidia/cu13/lib, and triton's own
# copy of libcupti in a directory no consumer searches (triton dlopens it by full path); three
# wheels ship the same empty nvidia/__init__.py and pip listed the bytecode it compiled for it
# with an empty hash.
PRISTINE = """
name = "pristine-shape"
description = "a healthy official install: duplicate copies nobody's search path compares"

[[dist]]
name = "torch"
version = "2.14.1"
requires = ["nvidia-cuda-cupti==13.0.85", "nvidia-cuda-runtime==13.0.96"]
files = { "torch/__init__.py" = "from torch import _C\\n" }
[[dist.lib]]
path = "torch/lib/libtorch_cuda.so"
needed = ["libcupti.so.13", "libcudart.so.13"]
rpath = ["$ORIGIN/../../nvidia/cu13/lib", "$ORIGIN"]
[[dist.ext]]
path = "torch/_C"
needed = ["libtorch_cuda.so"]
rpath = ["$ORIGIN/lib"]

[[dist]]
name = "nvidia-cuda-cupti"
version = "13.0.85"
files = { "nvidia/__init__.py" = "" }
lib = [{ path = "nvidia/cu13/lib/libcupti.so.13" }]

[[dist]]
name = "nvidia-cuda-runtime"
version = "13.0.96"
files = { "nvidia/__init__.py" = "" }
lib = [{ path = "nvidia/cu13/lib/libcudart.so.13" }]

[[dist]]
name = "triton"
version = "3.6.0"
files = { "nvidia/__init__.py" = "", "triton/__init__.py" = "" }
lib = [{ path = "triton/backends/nvidia/lib/cupti/libcupti.so.13" }]

[[steps]]
action = "install"
packages = ["torch==2.14.1", "nvidia-cuda-cupti==13.0.85", "nvidia-cuda-runtime==13.0.96",
            "triton==3.6.0"]
"""


def _with_pip_bytecode_rows(site: Path, dists: list[str]) -> None:
    """Compile nvidia/__init__.py and list the .pyc in each RECORD with an empty hash, as pip."""
    compileall.compile_file(str(site / "nvidia" / "__init__.py"), quiet=1)
    [pyc] = (site / "nvidia" / "__pycache__").glob("__init__.*.pyc")
    for info in site.glob("*.dist-info"):
        if info.name.split("-")[0] in dists:
            with (info / "RECORD").open("a") as fh:
                fh.write(f"nvidia/__pycache__/{pyc.name},,\n")


def _finding(report: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [f for f in report["findings"] if f["kind"] == kind]


def test_a_pristine_install_shape_is_healthy(tmp_path: Path) -> None:
    built = build_toml(PRISTINE, tmp_path / "venv")
    _with_pip_bytecode_rows(
        site_dir(built.venv), ["nvidia_cuda_cupti", "nvidia_cuda_runtime", "triton"]
    )
    proc = cudafix("doctor", "--json", "--venv", built.venv)
    report = as_json(proc)
    assert proc.returncode == 0, [f for f in report["findings"] if f["severity"] != "info"]
    [dup] = _finding(report, "duplicate-soname")
    assert dup["need"] == "libcupti.so.13" and len(dup["paths"]) == 2
    assert dup["severity"] == "info"  # no consumer's search path holds two copies
    [shared] = _finding(report, "shared")
    assert any("__pycache__" in p for p in shared["paths"])
    assert shared["command"] == []  # no removal offered for identical bytes
    assert _finding(report, "clobbered") == []


def test_a_copy_on_the_consumers_own_path_from_another_build_warns(tmp_path: Path) -> None:
    """The same shape, but triton's copy sits where torch's RPATH looks first."""
    spec = PRISTINE.replace(
        'rpath = ["$ORIGIN/../../nvidia/cu13/lib", "$ORIGIN"]',
        'rpath = ["$ORIGIN/../../triton/backends/nvidia/lib/cupti", '
        '"$ORIGIN/../../nvidia/cu13/lib"]',
    )
    built = build_toml(spec, tmp_path / "venv")
    proc = cudafix("doctor", "--json", "--venv", built.venv)
    report = as_json(proc)
    [shadowed] = _finding(report, "shadowed")
    assert shadowed["severity"] == "warning" and proc.returncode == 1
    assert shadowed["need"] == "libcupti.so.13"
    assert shadowed["consumer"].endswith("torch/lib/libtorch_cuda.so")
    assert shadowed["provider"].endswith("triton/backends/nvidia/lib/cupti/libcupti.so.13")
    # triton ships the nvidia/__init__.py the nvidia wheels claim too: --repair, not bare
    assert shadowed["command"] == [
        *("cudafix", "remove", "triton", "--repair", "--dry-run", "--venv", str(built.venv))
    ]


def test_own_files_holding_another_builds_bytes_are_found_and_repair_fixes_them(
    tmp_path: Path,
) -> None:
    built = build_toml(PRISTINE, tmp_path / "venv")
    lib = site_dir(built.venv) / "nvidia" / "cu13" / "lib" / "libcupti.so.13"
    data = bytearray(lib.read_bytes())
    data[-1] ^= 0xFF  # same size, other bytes: only a hash can tell
    lib.write_bytes(bytes(data))
    proc = cudafix("doctor", "--json", "--venv", built.venv)
    report = as_json(proc)
    assert proc.returncode == 1
    [foreign] = _finding(report, "foreign-bytes")
    assert foreign["distribution"] == "nvidia-cuda-cupti"
    assert foreign["paths"] == [str(lib.relative_to(built.venv))]
    assert list(report["repair"]) == ["nvidia-cuda-cupti"]
    assert diagnosed(built.venv).repair == {
        "nvidia-cuda-cupti": ForeignOwnFiles(subject="nvidia-cuda-cupti", count=1)
    }
    text = cudafix("doctor", "--venv", built.venv).stdout
    [next_line] = [ln for ln in text.splitlines() if ln.startswith("Next: ")]
    command = next_line[len("Next: ") :].split("   #")[0].split()
    assert command[:3] == ["cudafix", "repair", "--dry-run"] and str(built.venv) in command
    wheels = ["--offline", "--find-links", str(built.wheelhouse)]
    assert cudafix(*command[1:], *wheels).returncode == 0
    fixed = cudafix("repair", "--yes", *command[3:], *wheels)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert cudafix("doctor", "--venv", built.venv).returncode == 0


def test_overwritten_files_are_found_after_the_venv_was_copied(tmp_path: Path) -> None:
    """A copy (``cp -a``) sets every ctime anew, RECORD's possibly last; the overwrite's
    later mtime still marks the file to hash."""
    built = build_toml(PRISTINE, tmp_path / "venv")
    site = site_dir(built.venv)
    lib = site / "nvidia" / "cu13" / "lib" / "libcupti.so.13"
    [record] = site.glob("nvidia_cuda_cupti-*.dist-info/RECORD")
    old = record.stat()
    os.utime(record, ns=(old.st_atime_ns, old.st_mtime_ns - 10**9))
    data = bytearray(lib.read_bytes())
    data[-1] ^= 0xFF
    lib.write_bytes(bytes(data))
    record.chmod(record.stat().st_mode)  # RECORD's inode now changed after the overwrite
    assert record.stat().st_ctime_ns >= lib.stat().st_ctime_ns
    proc = cudafix("doctor", "--json", "--venv", built.venv)
    [foreign] = _finding(as_json(proc), "foreign-bytes")
    assert foreign["paths"] == [str(lib.relative_to(built.venv))] and proc.returncode == 1


@pytest.mark.parametrize("how", ["cp -a", "hard links"])
def test_the_first_doctor_on_a_copy_hashes_nothing(tmp_path: Path, how: str) -> None:
    """A copy or a hard link gives every file a new ctime, later than its RECORD's; that
    alone must not make doctor read the files whole (only mtime and size mark an overwrite)."""
    built = build_toml(PRISTINE, tmp_path / "venv")
    copy = tmp_path / "copy"
    if how == "cp -a":
        subprocess.run(["cp", "-a", str(built.venv), str(copy)], check=True)
    else:
        shutil.copytree(built.venv, copy, symlinks=True, copy_function=os.link)
    for path in sorted(copy.rglob("*"), key=lambda p: p.name == "RECORD"):
        if path.is_file() and not path.is_symlink() and path.name != "RECORD":
            path.chmod(path.stat().st_mode)  # every ctime after its RECORD's, as a copy may
    assert not (copy / ".cudafix").exists()
    facts = gather(locate_target(None, str(copy), os.environ, tmp_path))
    assert facts.hashed_files == 0
    proc = cudafix("doctor", "--json", "--venv", copy)
    assert proc.returncode == 0 and _finding(as_json(proc), "foreign-bytes") == []


def test_the_mixed_cuda_hint_names_the_major_nothing_loaded_needs(
    scenario: ScenarioFactory,
) -> None:
    for name, leftover in (("incident", "cu13"), ("shadowing", "cu12")):
        built = scenario(name)
        report = as_json(cudafix("doctor", "--json", "--venv", built.venv))
        [mixed] = [f for f in _finding(report, "mixed-cuda") if f["owners"]]  # the majors'
        remove = ["cudafix", "remove", f"nvidia-*-{leftover}", "--repair", "--dry-run"]
        assert mixed["command"] == [*remove, "--venv", str(built.venv)]
        assert [c["command"] for c in mixed["choices"]] == [shlex.join(mixed["command"])]


def test_a_load_probe_failing_only_on_the_driver_passes_with_a_note(tmp_path: Path) -> None:
    """The transaction's dlopen probe grades like doctor: no driver is a CPU box, not a break."""
    built = build_toml(CPU_BOX, tmp_path / "venv")
    lib = site_dir(built.venv) / "gpukit" / "lib"
    driver_only = ProbeSpec(libraries=(str(lib / "libkernels.so"),))
    [result] = run_probes(built.venv, built.python, driver_only, tmp_path)
    assert result.ok, result
    assert "needs libcuda.so.1 (the NVIDIA driver)" in result.note
    spec = CPU_BOX.replace('needed = ["libucp.so.0", ', "needed = [")
    built = build_toml(spec, tmp_path / "other")
    broken = ProbeSpec(
        libraries=(str(site_dir(built.venv) / "gpukit/lib/plugins/libtransport_ucx.so"),)
    )
    [result] = run_probes(built.venv, built.python, broken, tmp_path)
    assert not result.ok and "libcudafix_nowhere.so.7" in result.error


def test_the_shadowing_scenario_warns_and_names_the_copy_to_remove(
    scenario: ScenarioFactory,
) -> None:
    """A cu12 cusparseLt found ahead of a cu13 torch's own copy: a warning, exit 1."""
    built = scenario("shadowing")
    proc = cudafix("doctor", "--json", "--venv", built.venv)
    report = as_json(proc)
    [shadowed] = [f for f in _finding(report, "shadowed") if f["severity"] == "warning"]
    assert shadowed["need"] == "libcusparseLt.so.0" and proc.returncode == 1
    assert shadowed["provider"].endswith("nvidia/cusparselt/lib/libcusparseLt.so.0")
    # it shares nvidia/__init__.py with the cu13 wheel: the bare removal is refused
    remove = ["cudafix", "remove", "nvidia-cusparselt-cu12", "--repair", "--dry-run"]
    assert shadowed["command"] == [*remove, "--venv", str(built.venv)]


# vendorlib's DT_RPATH lists foo-fast's directory first; foo-fast is required only by
# vendorlib's extra `fast`, which its installed set shows was requested.
EXTRA_PICK = """
name = "extra-pick"
description = "the copy a consumer finds first is required by its requested extra"

[[dist]]
name = "vendorlib"
version = "1.0"
requires = ["foo-base==1.0", 'foo-fast==1.0; extra == "fast"']
files = { "vendorlib/__init__.py" = "from vendorlib import _core\\n" }
[[dist.ext]]
path = "vendorlib/_core"
needed = ["libfoo.so.1"]
rpath = ["$ORIGIN/../foo_fast/lib", "$ORIGIN/../foo_base/lib"]

[[dist]]
name = "foo-base"
version = "1.0"
lib = [{ path = "foo_base/lib/libfoo.so.1" }]

[[dist]]
name = "foo-fast"
version = "1.0"
lib = [{ path = "foo_fast/lib/libfoo.so.1" }]

[[steps]]
action = "install"
packages = ["vendorlib==1.0", "foo-base==1.0", "foo-fast==1.0"]
"""


def test_a_copy_a_requested_extra_requires_is_not_a_wrong_pick(tmp_path: Path) -> None:
    """doctor and the planner judge requirements alike: the copy ``vendorlib[fast]`` requires
    is not one to remove (the planner refuses that removal), so finding it first is
    information, with no removal hint."""
    built = build_toml(EXTRA_PICK, tmp_path / "venv")
    proc = cudafix("doctor", "--json", "--venv", built.venv)
    report = as_json(proc)
    [shadowed] = _finding(report, "shadowed")
    assert shadowed["provider"].endswith("foo_fast/lib/libfoo.so.1"), shadowed
    assert (shadowed["severity"], shadowed["command"], proc.returncode) == ("info", [], 0)
    planned = cudafix("remove", "foo-fast", "--dry-run", "--json", "--venv", built.venv)
    plan = as_json(planned)
    assert plan["verdict"] == "refused" and planned.returncode == 3
    assert [(b["distribution"], b["extra"]) for b in plan["requirement_breaks"]] == [
        ("vendorlib", "fast")
    ]


def test_the_clobbered_hint_removes_the_build_import_does_not_need_and_runs_as_printed(
    scenario: ScenarioFactory,
) -> None:
    """On a cu12 torch with cu13 wheels installed over its cu12 ones, the hint removes the
    cu13 owner, and the printed command plans a removal that passes."""
    built = scenario("incident")
    report = as_json(cudafix("doctor", "--json", "--venv", built.venv))
    clobbered = [f for f in _finding(report, "clobbered") if "nvidia-cudnn-cu12" in f["owners"]]
    assert clobbered, report["findings"]
    [words] = [f["command"] for f in clobbered if "nvidia-cudnn-cu13" in f["command"]]
    assert words[:3] == ["cudafix", "remove", "nvidia-cudnn-cu13"]
    assert words[-2:] == ["--venv", str(built.venv)]
    wheels = ["--offline", "--find-links", str(built.wheelhouse)]
    planned = cudafix(*words[1:], *wheels)
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert "Verdict: PASS" in planned.stdout


@pytest.mark.parametrize("forget", ["nothing", "answers.json"])
def test_a_warm_doctor_sees_a_write_in_place_of_the_same_size(tmp_path: Path, forget: str) -> None:
    """``torch/__init__.py`` overwritten in place at its size (its directory's times kept):
    the remembered answer is not given again, nor one computed from the cached tree once
    ``answers.json`` is deleted; both say what a cold doctor says."""
    built = build_toml(PRISTINE, tmp_path / "venv")
    for _ in range(2):
        time.sleep(2.1)  # past the racy window: the answer and the tree are remembered
        assert cudafix("doctor", "--venv", built.venv).returncode == 0
    init = site_dir(built.venv) / "torch" / "__init__.py"
    data = bytearray(init.read_bytes())
    data[0:4] = b"#ro "  # same size, other bytes
    with init.open("r+b") as fh:
        fh.write(bytes(data))
    if forget == "answers.json":
        (built.venv / ".cudafix" / "cache" / "answers.json").unlink()
    proc = cudafix("doctor", "--json", "--venv", built.venv)
    [foreign] = _finding(as_json(proc), "foreign-bytes")
    assert foreign["paths"] == [str(init.relative_to(built.venv))] and proc.returncode == 1


def test_the_text_names_the_first_missing_files_and_counts_the_rest(tmp_path: Path) -> None:
    """The text shows eight of a finding's paths and how many more (only those are worded),
    with or without ``-v``; ``--json`` names every one, in details and in paths."""
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "many", "1.0", {f"many/m{i:02d}.py": b"X = 1\n" for i in range(12)})
    prefix = venv_with(tmp_path / "venv", wheels, "many==1.0")
    gone = [f"many/m{i:02d}.py" for i in range(1, 12)]
    for rel in gone:
        (site_dir(prefix) / rel).unlink()
    for flags in ((), ("-v",)):
        proc = cudafix("doctor", *flags, "--venv", prefix)
        assert proc.returncode == 1, proc.stderr
        lines = proc.stdout.splitlines()
        at = lines.index("x [missing-files] many 1.0 is installed but 11 of its files are missing")
        assert lines[at + 1 : at + 10] == [*(f"    {p}" for p in gone[:8]), "    ... and 3 more"]
        assert lines[at + 10].startswith("    -> cudafix repair --dry-run"), proc.stdout
    [missing] = [
        f
        for f in as_json(cudafix("doctor", "--json", "--venv", prefix))["findings"]
        if f["kind"] == "missing-files"
    ]
    assert missing["details"] == gone
    assert [p.rsplit("site-packages/", 1)[1] for p in missing["paths"]] == gone
