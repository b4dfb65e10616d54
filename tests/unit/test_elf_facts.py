"""ELF facts read from hand-made bytes (tests.support.rawelf) and gcc-built objects: odd
sonames and search paths, RPATH against RUNPATH, and the cached verdict's JSON form."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from cudafix.linker.elf import (
    ElfInfo,
    ElfProblem,
    is_elf,
    read_elf,
    verdict_from_json,
    verdict_to_json,
)
from cudafix.model.names import Soname
from tests.support.rawelf import raw_elf


def _read(tmp_path: Path, data: bytes, name: str = "libx.so") -> ElfInfo:
    path = tmp_path / name
    path.write_bytes(data)
    info = read_elf(path)
    assert isinstance(info, ElfInfo), info
    return info


@pytest.mark.parametrize(
    "soname",
    ["libx.so", "libcudnn.so.9", "libc++.so.1", "libfoo-1.2.so", "libé.so.1", "x", "lib x.so"],
)
def test_odd_sonames_read_as_written(tmp_path: Path, soname: str) -> None:
    assert _read(tmp_path, raw_elf(soname=soname)).soname == soname


@pytest.mark.parametrize(
    "needed",
    [
        (),
        ("libc.so.6",),
        ("liba.so", "liba.so"),  # a duplicate need is kept: ld.so asks twice
        tuple(f"libn{i}.so.{i}" for i in range(40)),
        ("libtorch_cuda-4f2a1b3c.so", "libcudart-9a8b7c6d.so.12"),
    ],
)
def test_needed_keeps_order_and_duplicates(tmp_path: Path, needed: tuple[str, ...]) -> None:
    info = _read(tmp_path, raw_elf(needed=needed))
    assert info.needed == needed
    assert info.soname is None


@pytest.mark.parametrize(
    ("runpath", "split"),
    [
        ("$ORIGIN", ("$ORIGIN",)),
        ("${ORIGIN}/../lib", ("${ORIGIN}/../lib",)),
        ("$ORIGIN/a:$ORIGIN/b", ("$ORIGIN/a", "$ORIGIN/b")),
        ("/opt/a::/opt/b", ("/opt/a", "", "/opt/b")),  # empty: the current directory
        (":", ("", "")),
        ("$LIB/x:$PLATFORM", ("$LIB/x", "$PLATFORM")),
        ("", ()),
    ],
)
def test_runpath_is_split_on_colons_and_left_unexpanded(
    tmp_path: Path, runpath: str, split: tuple[str, ...]
) -> None:
    info = _read(tmp_path, raw_elf(runpath=runpath))
    assert info.runpath == split
    assert info.rpath == ()
    assert info.effective_rpath == ()


@pytest.mark.parametrize(
    ("flags_1", "nodeflib"), [(0, False), (0x800, True), (0x801, True), (0x1, False)]
)
def test_nodeflib_is_one_bit_of_flags_1(tmp_path: Path, flags_1: int, nodeflib: bool) -> None:
    assert _read(tmp_path, raw_elf(flags_1=flags_1)).nodeflib is nodeflib


@pytest.mark.parametrize(
    "interp", [None, "/lib64/ld-linux-x86-64.so.2", "/lib/ld-musl-x86_64.so.1"]
)
def test_an_interpreter_makes_an_executable(tmp_path: Path, interp: str | None) -> None:
    info = _read(tmp_path, raw_elf(interp=interp))
    assert info.interpreter == interp
    assert info.is_executable is (interp is not None)


@pytest.mark.parametrize(
    ("name", "defined", "module"),
    [
        ("_C.so", ["PyInit__C"], "_C"),
        ("_C.cpython-311-x86_64-linux-gnu.so", ["PyInit__C"], "_C"),
        ("_C.abi3.so", ["PyInit__C"], "_C"),
        ("_C.so", ["PyInit_other"], None),
        ("_C.so", ["f"], None),
        ("libC.so.1", ["PyInit_libC"], None),  # only names ending in .so are asked
    ],
)
def test_an_extension_module_is_named_by_its_pyinit_for_its_file(
    tmp_path: Path, name: str, defined: list[str], module: str | None
) -> None:
    assert _read(tmp_path, raw_elf(defined=defined), name).python_module == module


# --- RPATH and RUNPATH, from gcc ------------------------------------------------------------


def _gcc(out: Path, *flags: str) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-o", str(out), "-x", "c", "-", *flags],
        input="int f(void){return 1;}\n",
        text=True,
        check=True,
    )
    return out


@pytest.mark.parametrize(
    ("flags", "rpath", "runpath", "effective"),
    [
        (
            ["-Wl,-rpath,$ORIGIN/lib", "-Wl,--disable-new-dtags"],
            ("$ORIGIN/lib",),
            (),
            ("$ORIGIN/lib",),
        ),
        (["-Wl,-rpath,$ORIGIN/lib", "-Wl,--enable-new-dtags"], (), ("$ORIGIN/lib",), ()),
        (["-Wl,-rpath,/a:/b", "-Wl,--disable-new-dtags"], ("/a", "/b"), (), ("/a", "/b")),
        ([], (), (), ()),
    ],
    ids=["rpath", "runpath", "rpath-two", "none"],
)
def test_rpath_counts_only_without_runpath(
    tmp_path: Path,
    flags: list[str],
    rpath: tuple[str, ...],
    runpath: tuple[str, ...],
    effective: tuple[str, ...],
) -> None:
    """glibc ignores DT_RPATH when DT_RUNPATH is present."""
    info = read_elf(_gcc(tmp_path / "libr.so", *flags))
    assert isinstance(info, ElfInfo)
    assert (info.rpath, info.runpath, info.effective_rpath) == (rpath, runpath, effective)


def test_effective_rpath_drops_rpath_when_both_are_set() -> None:
    both = ElfInfo(64, "EM_X86_64", None, (), rpath=("/r",), runpath=("/u",))
    assert both.effective_rpath == ()
    assert ElfInfo(64, "EM_X86_64", None, (), rpath=("/r",), runpath=()).effective_rpath == ("/r",)


# --- the cached verdict ----------------------------------------------------------------------

VERDICTS: list[ElfInfo | ElfProblem] = [
    ElfInfo(64, "EM_X86_64", Soname("libx.so.1"), (Soname("liba.so"),), ("$ORIGIN",), ()),
    ElfInfo(32, "EM_386", None, (), (), ("/u", ""), nodeflib=True, interpreter="/lib/ld.so"),
    ElfInfo(64, "48879", None, (), (), (), python_module="_x"),
    ElfProblem("truncated", "cut at 12 bytes"),
    ElfProblem("linker-script", "GROUP ( libc.so.6 )"),
]


@pytest.mark.parametrize("verdict", VERDICTS)
def test_verdict_json_round_trips_through_real_json(verdict: ElfInfo | ElfProblem) -> None:
    kind, body = json.loads(json.dumps(verdict_to_json(verdict)))
    assert verdict_from_json(kind, body) == verdict


@pytest.mark.parametrize(
    ("kind", "body"),
    [
        ("elf", {}),
        ("elf", None),
        ("elf", {"elf_class": "x", "machine": "m", "soname": None, "needed": [], "rpath": [],
                 "runpath": [], "nodeflib": False}),
        ("elf", {"elf_class": 64, "machine": "m", "soname": None, "needed": 5, "rpath": [],
                 "runpath": [], "nodeflib": False}),
        ("problem", []),
        ("problem", None),
        ("other", ["a", "b"]),
        (None, None),
    ],
)  # fmt: skip
def test_a_malformed_cached_verdict_is_none_so_it_is_read_again(kind: object, body: object) -> None:
    assert verdict_from_json(kind, body) is None


def test_an_old_cached_verdict_without_the_newer_fields_reads() -> None:
    kind, body = verdict_to_json(VERDICTS[0])
    del body["interpreter"], body["python_module"]
    assert verdict_from_json(kind, body) == VERDICTS[0]


@pytest.mark.parametrize(
    ("head", "elf"),
    [
        (b"\x7fELF\x02\x01", True),
        (b"\x7fELF", True),
        (b"\x7fEL", False),
        (b"/* GNU ld script", False),
        (b"", False),
    ],
)
def test_is_elf_sniffs_the_magic(head: bytes, elf: bool) -> None:
    assert is_elf(head) is elf


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"/* GNU ld script */\nGROUP ( libc.so.6 )\n", "linker-script"),
        (b"INPUT(-lfoo)\n", "linker-script"),
        (b"just some text\n", "not-elf"),
        (b"\x7fELF", "truncated"),
    ],
)
def test_a_file_that_is_no_shared_object_is_a_problem(
    tmp_path: Path, content: bytes, reason: str
) -> None:
    path = tmp_path / "libz.so"
    path.write_bytes(content)
    verdict = read_elf(path)
    assert isinstance(verdict, ElfProblem)
    assert verdict.reason == reason
