"""read_elf on real objects and on broken ones; the ld.so.cache parser against ldconfig -p."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from cudafix.linker.elf import ElfInfo, ElfProblem, read_elf
from cudafix.linker.ldcache import (
    DEBIAN_X86_64,
    entries_for,
    hwcap_subdirs,
    parse_ld_cache,
    parse_ldso_help,
    read_ld_cache,
)
from scenarios.cc import SharedObject, compile_shared
from tests.support.loadertree import lib


def test_reads_soname_needed_rpath_runpath(tmp_path: Path) -> None:
    dep = lib(tmp_path / "libdep.so.1")
    rp = lib(tmp_path / "rp.so", needed=[dep], rpath=["$ORIGIN/a", "${ORIGIN}/b"])
    ru = lib(tmp_path / "ru.so", soname="libru.so.2", needed=[dep], rpath=["/x"], runpath=True)
    info, other = read_elf(rp), read_elf(ru)
    assert isinstance(info, ElfInfo) and isinstance(other, ElfInfo)
    assert (info.elf_class, info.machine) == (64, "EM_X86_64")
    assert info.soname == "rp.so" and info.needed[0] == "libdep.so.1"
    assert info.rpath == ("$ORIGIN/a", "${ORIGIN}/b") and info.runpath == ()
    assert other.soname == "libru.so.2" and other.runpath == ("/x",) and other.rpath == ()
    assert not info.nodeflib


def test_nodeflib_flag(tmp_path: Path) -> None:
    path = tmp_path / "nd.so"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-o", str(path), "-x", "c", "-", "-Wl,-z,nodefaultlib"],
        input="int f(void){return 1;}\n",
        text=True,
        check=True,
    )
    info = read_elf(path)
    assert isinstance(info, ElfInfo) and info.nodeflib


def test_interpreter_of_python() -> None:
    info = read_elf(Path(sys.executable))
    assert isinstance(info, ElfInfo) and info.interpreter and "ld-linux" in info.interpreter


def test_linker_script_and_plain_text(tmp_path: Path) -> None:
    script = tmp_path / "libc.so"
    script.write_text("/* GNU ld script */\nGROUP ( /lib/libc.so.6 )\n")
    text = tmp_path / "x.py"
    text.write_text("print('hi')\n")
    assert read_elf(script) == ElfProblem("linker-script", read_elf(script).detail)
    result = read_elf(text)
    assert isinstance(result, ElfProblem) and result.reason == "not-elf"


@pytest.mark.parametrize("keep", [2, 40, 100, 1000, 3000, 6000])
def test_truncated_never_raises(tmp_path: Path, keep: int) -> None:
    good = lib(tmp_path / "libgood.so.1")
    cut = tmp_path / "libcut.so.1"
    cut.write_bytes(good.read_bytes()[:keep])
    result = read_elf(cut)
    assert isinstance(result, ElfProblem) and result.reason == "truncated"
    assert str(cut) in result.detail


def test_corrupt_headers_never_raise(tmp_path: Path) -> None:
    good = lib(tmp_path / "libgood.so.1").read_bytes()
    for offset in range(16, 64, 2):  # scribble over every ELF header field in turn
        data = bytearray(good)
        data[offset : offset + 2] = b"\xff\xff"
        bad = tmp_path / f"bad{offset}.so"
        bad.write_bytes(bytes(data))
        assert isinstance(read_elf(bad), ElfInfo | ElfProblem)


def test_unreadable_and_not_dynamic(tmp_path: Path) -> None:
    result = read_elf(tmp_path)  # a directory: open works, read fails
    assert isinstance(result, ElfProblem) and result.reason == "unreadable"
    assert read_elf(tmp_path / "missing.so").reason == "unreadable"  # type: ignore[union-attr]
    obj = tmp_path / "x.o"
    subprocess.run(
        ["gcc", "-c", "-o", str(obj), "-x", "c", "-"], input="int f;\n", text=True, check=True
    )
    result = read_elf(obj)
    assert isinstance(result, ElfProblem) and result.reason == "not-dynamic"


def test_symlink_refused_without_follow(tmp_path: Path) -> None:
    good = lib(tmp_path / "libgood.so.1")
    link = tmp_path / "link.so"
    link.symlink_to(good)
    assert isinstance(read_elf(link), ElfInfo)
    result = read_elf(link, follow_symlinks=False)
    assert isinstance(result, ElfProblem) and result.reason == "unreadable"


_LDCONFIG = re.compile(r"^\s+(\S+) \(([^)]*)\) => (\S+)$")


def test_ld_cache_matches_ldconfig_p() -> None:
    proc = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=True)
    listed = [m.groups() for m in map(_LDCONFIG.match, proc.stdout.splitlines()) if m]
    x86_64 = [(key, path) for key, kind, path in listed if kind.startswith("libc6,x86-64")]
    assert x86_64, "ldconfig -p listed no x86-64 libraries"
    ours = [(e.key, e.path) for e in entries_for(read_ld_cache(), 64, "EM_X86_64")]
    assert ours == x86_64  # same entries, same order (ld.so takes the first per key)


def test_ld_cache_after_old_format_block() -> None:
    new = Path("/etc/ld.so.cache").read_bytes()
    old = b"ld.so-1.7.0\0" + (1).to_bytes(4, "little") + bytes(12)
    padded = old + bytes(-len(old) % 8)
    assert parse_ld_cache(padded + new) == parse_ld_cache(new)


def test_ld_cache_garbage_is_empty(tmp_path: Path) -> None:
    junk = tmp_path / "cache"
    junk.write_bytes(b"glibc-ld.so.cache1.1" + b"\xff" * 40)
    assert read_ld_cache(junk) == ()
    assert read_ld_cache(tmp_path / "absent") == ()


def test_ldso_help_gives_the_debug_search_order(tmp_path: Path) -> None:
    """The subdirectories we derive are exactly the ones LD_DEBUG=libs shows ld.so trying."""
    help_text = subprocess.run(
        ["/lib64/ld-linux-x86-64.so.2", "--help"], capture_output=True, text=True, check=True
    ).stdout
    host = parse_ldso_help(help_text)
    assert host is not None and host.default_dirs[:2] == DEBIAN_X86_64.default_dirs[:2]
    gone = lib(tmp_path / "libgone.so.1")
    root = lib(tmp_path / "root.so", needed=[gone], rpath=["/nowhere"])
    gone.unlink()
    debug = subprocess.run(
        ["/lib64/ld-linux-x86-64.so.2", "--list", str(root)],
        env={"LD_DEBUG": "libs"},
        capture_output=True,
        text=True,
        check=False,
    ).stderr
    tried = re.findall(r"trying file=/nowhere/(.*)libgone\.so\.1", debug)
    assert [t.rstrip("/") for t in tried] == list(hwcap_subdirs(host))


_HASWELL_HELP = """\
Shared library search path:
  (libraries located via /etc/ld.so.cache)
  /lib/x86_64-linux-gnu (system search path)

Subdirectories of glibc-hwcaps directories, in priority order:
  x86-64-v3 (supported, searched)

Legacy HWCAP subdirectories under library search path directories:
  haswell (AT_PLATFORM; supported, searched)
  tls (supported, searched)
  avx512_1 (supported, searched)
  x86_64 (supported, searched)
"""


def test_the_platform_component_follows_tls_as_on_a_haswell_host() -> None:
    """The order an LD_DEBUG=libs trace showed on a haswell/avx512_1 host (glibc 2.36)."""
    host = parse_ldso_help(_HASWELL_HELP)
    assert host is not None and host.platform == "haswell"
    subdirs = hwcap_subdirs(host)
    assert subdirs[:4] == (
        "glibc-hwcaps/x86-64-v3",
        "tls/haswell/avx512_1/x86_64",
        "tls/haswell/avx512_1",
        "tls/haswell/x86_64",
    )
    assert subdirs[-3:] == ("avx512_1", "x86_64", "")


def test_an_extension_module_is_known_by_its_pyinit_export(tmp_path: Path) -> None:
    """``PyInit_<name>`` for the file's own name, whatever the suffix; a library is not one."""
    untagged = compile_shared(SharedObject(output=tmp_path / "_jax.so", python_module="_jax"))
    tagged = tmp_path / "_C.cpython-311-x86_64-linux-gnu.so"
    compile_shared(SharedObject(output=tagged, python_module="_C"))
    other = compile_shared(SharedObject(output=tmp_path / "_other.so", python_module="_jax2"))
    plain = lib(tmp_path / "libtorch_cuda.so")
    versioned = compile_shared(SharedObject(output=tmp_path / "_v.so.1", python_module="_v"))
    found = {p.name: read_elf(p) for p in (untagged, tagged, other, plain, versioned)}
    modules = {n: v.python_module for n, v in found.items() if isinstance(v, ElfInfo)}
    assert modules == {
        "_jax.so": "_jax",
        "_C.cpython-311-x86_64-linux-gnu.so": "_C",
        "_other.so": None,
        "libtorch_cuda.so": None,
        "_v.so.1": None,
    }
