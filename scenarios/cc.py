"""Compile real shared objects with gcc, for scenarios and loader tests.

The objects are tiny but real: the system's dynamic loader maps them, so tests can use
``ldd`` and ``LD_DEBUG=libs`` as an oracle for cudafix's resolver.
"""

from __future__ import annotations

import shutil
import subprocess
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path


class CompileError(RuntimeError):
    """gcc failed; the message holds its output."""


@dataclass(frozen=True)
class SharedObject:
    """What to build: one ELF shared object.

    ``needed`` are paths of already-built objects to link against (their DT_SONAME
    becomes a DT_NEEDED entry) or bare ``-l`` names. ``rpath`` entries are written
    verbatim, so ``$ORIGIN`` and ``${ORIGIN}`` survive; ``runpath`` selects DT_RUNPATH
    (``--enable-new-dtags``) instead of DT_RPATH.
    """

    output: Path
    soname: str | None = None
    needed: Sequence[Path | str] = ()
    rpath: Sequence[str] = ()
    runpath: bool = False
    source: str = ""
    python_module: str | None = None
    """Build a CPython extension module with this name (``PyInit_<name>``)."""
    dlopen: Sequence[str] = field(default_factory=tuple)
    """Sonames dlopen()ed by a constructor: hidden dependencies no DT_NEEDED names."""
    extra_flags: Sequence[str] = ()


def _c_source(obj: SharedObject) -> str:
    symbol = obj.output.name.split(".")[0].replace("-", "_")
    lines = ["#include <dlfcn.h>", "#include <stdio.h>", obj.source]
    lines.append(f"int cudafix_marker_{symbol}(void) {{ return 1; }}")
    if obj.dlopen:
        calls = "\n".join(
            f'    if (!dlopen("{name}", RTLD_NOW | RTLD_GLOBAL)) '
            f'fprintf(stderr, "%s\\n", dlerror());'
            for name in obj.dlopen
        )
        lines.append(
            f"__attribute__((constructor)) static void cudafix_load_parts(void) {{\n{calls}\n}}"
        )
    if obj.python_module:
        mod = obj.python_module
        lines[0:0] = ["#define PY_SSIZE_T_CLEAN", "#include <Python.h>"]
        lines.append(
            "static struct PyModuleDef cudafix_def = "
            f'{{PyModuleDef_HEAD_INIT, "{mod}", NULL, -1, NULL}};\n'
            f"PyMODINIT_FUNC PyInit_{mod}(void) {{ return PyModule_Create(&cudafix_def); }}"
        )
    return "\n".join(lines) + "\n"


def compile_shared(obj: SharedObject, *, cc: str = "gcc") -> Path:
    """Build ``obj`` and return its path; raise :class:`CompileError` with gcc's output."""
    if shutil.which(cc) is None:
        raise CompileError(f"{cc} not found on PATH; install gcc to build scenarios")
    obj.output.parent.mkdir(parents=True, exist_ok=True)
    src = obj.output.with_name(obj.output.name + ".c")
    src.write_text(_c_source(obj))
    cmd = [cc, "-shared", "-fPIC", "-O0", "-o", str(obj.output), str(src)]
    if obj.soname:
        cmd.append(f"-Wl,-soname,{obj.soname}")
    if obj.python_module:
        cmd.append(f"-I{sysconfig.get_paths()['include']}")
    # Record every linked object as DT_NEEDED, even though nothing calls into it.
    cmd.append("-Wl,--no-as-needed")
    for dep in obj.needed:
        if isinstance(dep, Path):
            cmd.append(f"-Wl,{dep}")
        else:
            cmd.append(f"-l{dep}")
    if obj.rpath:
        cmd.append("-Wl,--enable-new-dtags" if obj.runpath else "-Wl,--disable-new-dtags")
        cmd.append("-Wl,-rpath," + ":".join(obj.rpath))
    if obj.dlopen:
        cmd.append("-ldl")
    cmd.extend(obj.extra_flags)
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    src.unlink()
    if proc.returncode != 0:
        raise CompileError(f"gcc failed for {obj.output.name}:\n{proc.stderr}")
    return obj.output
