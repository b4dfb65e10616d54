"""read_elf on real objects and on broken ones; the ld.so.cache parser against ldconfig -p."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from elftools.elf.enums import ENUM_E_MACHINE
from elftools.elf.hash import ELFHashTable, GNUHashTable

from cudafix.linker.elf import NO_MAGIC, ElfInfo, ElfProblem, read_elf
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
from tests.support.rawelf import raw_elf


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


def test_without_scripts_a_file_without_magic_is_not_elf_and_a_cut_one_still_truncated(
    tmp_path: Path,
) -> None:
    """``scripts=False`` (the index, for a file no linker looks for by name) skips only
    the search for a linker script."""
    script = tmp_path / "notes.txt"
    script.write_text("/* GNU ld script */\nGROUP ( /lib/libc.so.6 )\n")
    assert read_elf(script) == ElfProblem("linker-script", read_elf(script).detail)
    assert read_elf(script, scripts=False) == NO_MAGIC
    cut = tmp_path / "plugin"
    cut.write_bytes(b"\x7fEL")
    cut_short = read_elf(cut, scripts=False)
    assert isinstance(cut_short, ElfProblem) and cut_short.reason == "truncated"
    good = lib(tmp_path / "libgood.so.1")
    assert isinstance(read_elf(good, scripts=False), ElfInfo)


def test_every_cut_is_truncated(tmp_path: Path) -> None:
    """A file cut at any byte, as a full disk or an interrupted copy leaves it."""
    good = lib(tmp_path / "libgood.so.1").read_bytes()
    cut = tmp_path / "libcut.so.1"
    cut.write_bytes(good)
    for keep in range(len(good) - 1, 0, -1):
        os.truncate(cut, keep)
        result = read_elf(cut)
        assert isinstance(result, ElfProblem) and result.reason == "truncated", keep
        assert str(cut) in result.detail


def test_corrupt_headers_never_raise(tmp_path: Path) -> None:
    good = lib(tmp_path / "libgood.so.1").read_bytes()
    for offset in range(16, 64, 2):  # scribble over every ELF header field in turn
        data = bytearray(good)
        data[offset : offset + 2] = b"\xff\xff"
        bad = tmp_path / f"bad{offset}.so"
        bad.write_bytes(bytes(data))
        assert isinstance(read_elf(bad), ElfInfo | ElfProblem)


def test_random_damage_is_a_verdict(tmp_path: Path) -> None:
    """Bytes scribbled anywhere (headers, dynamic segment, strings, hash tables): a verdict."""
    good = compile_shared(SharedObject(output=tmp_path / "_m.so", python_module="_m"))
    data = good.read_bytes()
    rng = random.Random(0)
    for _ in range(1500):
        damaged = bytearray(data)
        for _ in range(rng.choice((1, 2, 8))):
            damaged[rng.randrange(rng.choice((4096, len(data))))] = rng.randrange(256)
        good.write_bytes(damaged)
        result = read_elf(good)
        assert isinstance(result, ElfInfo) or result.reason != "unreadable", result


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


def _split(value: str | None) -> tuple[str, ...]:
    return tuple(value.split(":")) if value else ()


def _pyelftools_facts(path: Path) -> ElfInfo:
    """The same facts through pyelftools, an independent reader (it takes strings from the
    section table's ``.dynstr`` when there is one, else from DT_STRTAB)."""
    with path.open("rb") as fh:
        elf = ELFFile(fh)
        dyn = next(elf.iter_segments("PT_DYNAMIC"))
        needed, strings, flags_1 = [], {}, 0
        for tag in dyn.iter_tags():
            kind = tag.entry.d_tag
            if kind == "DT_NEEDED":
                needed.append(tag.needed)
            elif kind in ("DT_SONAME", "DT_RPATH", "DT_RUNPATH"):
                strings[kind] = getattr(tag, kind[3:].lower())
            elif kind == "DT_FLAGS_1":
                flags_1 = tag.entry.d_val
        interp = next(elf.iter_segments("PT_INTERP"), None)
        module = path.name.split(".", 1)[0]
        _, gnu = dyn.get_table_offset("DT_GNU_HASH")
        _, sysv = dyn.get_table_offset("DT_HASH")
        table = (
            GNUHashTable(elf, gnu, dyn) if gnu is not None else ELFHashTable(elf, sysv, None, dyn)
        )
        symbol = table.get_symbol(f"PyInit_{module}") if path.name.endswith(".so") else None
        return ElfInfo(
            elf_class=elf.elfclass,
            machine=str(elf["e_machine"]),
            soname=strings.get("DT_SONAME"),
            needed=tuple(needed),
            rpath=_split(strings.get("DT_RPATH")),
            runpath=_split(strings.get("DT_RUNPATH")),
            nodeflib=bool(flags_1 & 0x800),
            interpreter=interp.get_interp_name() if interp is not None else None,
            python_module=module if symbol and symbol["st_shndx"] != "SHN_UNDEF" else None,
        )


_IMPORTS_PYINIT = "extern void *PyInit__u(void);\nvoid *cudafix_ref(void) { return PyInit__u; }"


def test_gcc_built_objects_read_as_pyelftools_reads_them(tmp_path: Path) -> None:
    dep = lib(tmp_path / "libdep.so.1")
    sysv = ["-Wl,--hash-style=sysv"]
    objects = [
        lib(tmp_path / "rp.so", needed=[dep], rpath=["$ORIGIN/a", "", "/b"]),
        lib(tmp_path / "libru.so.2", needed=[dep, "m"], rpath=["/x"], runpath=True),
        compile_shared(SharedObject(output=tmp_path / "_gnu.so", python_module="_gnu")),
        compile_shared(
            SharedObject(output=tmp_path / "_sysv.so", python_module="_sysv", extra_flags=sysv)
        ),
        compile_shared(
            SharedObject(output=tmp_path / "_n.so", extra_flags=["-Wl,-z,nodefaultlib", *sysv])
        ),
        compile_shared(SharedObject(output=tmp_path / "_u.so", source=_IMPORTS_PYINIT)),
        compile_shared(
            SharedObject(
                output=tmp_path / "sysv" / "_u.so", source=_IMPORTS_PYINIT, extra_flags=sysv
            )
        ),
        Path(sys.executable).resolve(),
    ]
    for path in objects:
        assert read_elf(path) == _pyelftools_facts(path), path
    modules = {p.name: read_elf(p).python_module for p in objects[2:4]}  # type: ignore[union-attr]
    assert modules == {"_gnu.so": "_gnu", "_sysv.so": "_sysv"}


def test_a_32_bit_object_reads_as_pyelftools_reads_it(tmp_path: Path) -> None:
    source = tmp_path / "t.c"
    source.write_text("int f(void) { return 1; }\n")
    obj, out = tmp_path / "t.o", tmp_path / "libt32.so"
    try:
        subprocess.run(["gcc", "-m32", "-fPIC", "-c", "-o", obj, source], check=True)
        subprocess.run(
            ["ld", "-m", "elf_i386", "-shared", "-soname", out.name, "-o", out, obj], check=True
        )
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("gcc -m32 or ld -m elf_i386 is not available")
    info = read_elf(out)
    assert info == _pyelftools_facts(out)
    assert isinstance(info, ElfInfo) and (info.elf_class, info.machine) == (32, "EM_386")


@pytest.mark.parametrize("gnu_hash", [True, False], ids=["gnu-hash", "sysv-hash"])
@pytest.mark.parametrize(
    ("elf_class", "big_endian", "machine"),
    [(64, False, 183), (64, True, 21), (32, False, 40), (32, True, 20)],
    ids=["aarch64", "ppc64", "arm", "ppc"],
)
def test_every_layout_reads_as_pyelftools_reads_it(
    tmp_path: Path, elf_class: int, big_endian: bool, machine: int, gnu_hash: bool
) -> None:
    """Both classes and byte orders, no section table: every address goes through PT_LOAD."""
    data = raw_elf(
        elf_class=elf_class,
        big_endian=big_endian,
        machine=machine,
        soname="libx.so.1",
        needed=["liba.so", "libb.so.2"],
        runpath="$ORIGIN:/opt",
        flags_1=0x800,
        interp="/lib/ld.so.1",
        defined=["PyInit__x", "f", "g"],
        undefined=["PyInit__y"],
        gnu_hash=gnu_hash,
    )
    found = []
    for name in ("_x.so", "_y.so", "_z.so"):  # PyInit_ defined, imported, absent
        (tmp_path / name).write_bytes(data)
        info = read_elf(tmp_path / name)
        assert info == _pyelftools_facts(tmp_path / name)
        assert isinstance(info, ElfInfo)
        found.append(info)
    assert [info.python_module for info in found] == ["_x", None, None]
    facts = (info.elf_class, info.soname, info.needed, info.runpath, info.nodeflib)
    assert facts == (elf_class, "libx.so.1", ("liba.so", "libb.so.2"), ("$ORIGIN", "/opt"), True)
    assert info.interpreter == "/lib/ld.so.1"


def test_machine_names_are_pyelftools_names(tmp_path: Path) -> None:
    """The names Linux machines have, and pyelftools' decimal string for an unknown one."""
    path = tmp_path / "libm.so"
    named = {}
    for value in sorted({v for v in ENUM_E_MACHINE.values() if isinstance(v, int)} | {0xBEEF}):
        path.write_bytes(raw_elf(machine=value))
        ours, theirs = read_elf(path).machine, _pyelftools_facts(path).machine  # type: ignore[union-attr]
        assert ours in (theirs, str(value)), value
        named[theirs] = ours
    common = ["EM_X86_64", "EM_386", "EM_AARCH64", "EM_ARM", "EM_PPC64", "EM_S390", "EM_RISCV"]
    assert [named[m] for m in common] == common
    assert named["48879"] == "48879"
