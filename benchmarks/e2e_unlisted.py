"""``make e2e-real``, third part: GPU stacks that no row of ``cudafix/data/runtime.toml`` names.

What protects them is the loader's graph alone: needs met by path, soname literals, the
requirements that bring each library. Built once with uv into ``$CUDAFIX_REAL_CACHE`` (as
``e2e_frameworks``): ``onnx`` (``onnxruntime-gpu[cuda,cudnn]``: its CUDA execution provider's
DT_NEEDED resolve only to the nvidia wheels' files ``onnxruntime.preload_dlls()`` loads by full
path), ``nvmath`` (``nvmath-python[cu12]``: every CUDA math library loaded by name at first use
through cuda-pathfinder), ``cudapy`` (``cuda-python[all]``: NVRTC, nvJitLink and nvFatbin the
same way; not NVVM, which pathfinder also finds in a system CUDA). First, that no row names a
distribution of the venv. Then, per stack: ``doctor`` exits 0 on the pristine install; ``cudafix
remove LIB --dry-run`` of every library the stack loads is refused naming the object that loads
it; and per library, on a hard-linked copy, a plain ``uv pip uninstall LIB`` after a ``doctor``
reading (a user's: what the next reading remembers) breaks the framework's own loader,
``doctor`` exits 1 naming the library and that object, ``cudafix repair --yes`` commits and the
loader works again.

The oracle is each framework's own loader, run without a GPU: a stub ``libcuda.so.1`` built
with gcc (every driver entry point the stacks resolve, each failing as with no device) is
loaded by full path with ``RTLD_GLOBAL`` first, which gets providers past loading.

``--empty-table``: ``e2e_frameworks``' framework runs (jax, TensorFlow, CuPy) once more with
``CUDAFIX_RUNTIME_TABLE`` naming an empty file, so that literals alone must protect them.

Prints Markdown; writes ``bench-out/e2e-unlisted-*.json``. Exit 0 only when every check holds.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from benchmarks import e2e_frameworks as fw
from benchmarks.e2e_real import Run, user_env
from benchmarks.proc import uv_argv
from cudafix.linker.runtime import RUNTIME_TABLE_VARIABLE, RuntimeTable
from cudafix.model.names import normalize_name

STUB_C = """\
/* A stand-in for the NVIDIA driver on a host without one: every call fails as with no device. */
#define NO_DEVICE 100
int cuInit(unsigned int f) { (void)f; return NO_DEVICE; }
int cuDriverGetVersion(int *v) { if (v) *v = 13000; return 0; }
int cuGetProcAddress(const char *s, void **p, int v, unsigned long long f)
{ (void)s; (void)v; (void)f; if (p) *p = 0; return NO_DEVICE; }
int cuGetProcAddress_v2(const char *s, void **p, int v, unsigned long long f, void *st)
{ (void)s; (void)v; (void)f; (void)st; if (p) *p = 0; return NO_DEVICE; }
int cuGetExportTable(const void **t, const void *id) { (void)id; if (t) *t = 0; return NO_DEVICE; }
int cuTensorMapEncodeTiled(void) { return NO_DEVICE; }
"""
"""``cuTensorMapEncodeTiled``: onnxruntime's CUDA provider links it directly (BIND_NOW)."""

PRELUDE = (
    "import ctypes, os, sys\n"
    "ctypes.CDLL(os.environ['E2E_STUB_LIBCUDA'], mode=ctypes.RTLD_GLOBAL)\n"
    "def mapped(*names):\n"
    "    maps = {l.split()[-1].rsplit('/', 1)[-1] for l in open('/proc/self/maps') if '/' in l}\n"
    "    lost = [n for n in names if n not in maps]\n"
    "    print('mapped' if not lost else f'not mapped: {lost}'); sys.exit(1 if lost else 0)\n"
)
"""Loads the stub driver by full path first; ``mapped`` says which libraries the process holds."""


@dataclass(frozen=True)
class Library:
    """One wheel the stack loads, a soname of it, and the object doctor must name."""

    dist: str
    soname: str
    consumer: str
    """Site-packages relative: the object (or Python module) whose load of ``soname`` the
    refusal and doctor name."""


@dataclass(frozen=True)
class Stack:
    venv: str
    spec: str
    libraries: tuple[Library, ...]
    oracle: str
    """Python (after :data:`PRELUDE`) exiting 0 only when the stack's own loader gets every
    library."""


ORT_PROVIDER = "onnxruntime/capi/libonnxruntime_providers_cuda.so"
PATHFINDER = "cuda/pathfinder/"

STACKS = (
    Stack(
        "onnx",
        "onnxruntime-gpu[cuda,cudnn]",
        (
            Library("nvidia-cublas", "libcublasLt.so.13", ORT_PROVIDER),
            Library("nvidia-curand", "libcurand.so.10", ORT_PROVIDER),
            Library("nvidia-cuda-nvrtc", "libnvrtc.so.13", ORT_PROVIDER),
            Library("nvidia-cufft", "libcufft.so.12", "onnxruntime"),
            Library("nvidia-cudnn-cu13", "libcudnn.so.9", "onnxruntime"),
        ),
        "import onnxruntime as ort\n"
        "ort.preload_dlls()\n"
        f"ctypes.CDLL(os.path.join(os.path.dirname(ort.__file__), '..', '{ORT_PROVIDER}'))\n"
        "mapped('libcublasLt.so.13', 'libcublas.so.13', 'libcurand.so.10', 'libcudart.so.13',"
        " 'libnvrtc.so.13', 'libcufft.so.12', 'libcudnn.so.9')\n",
    ),
    Stack(
        "nvmath",
        "nvmath-python[cu12]",
        (
            Library("nvidia-cublas-cu12", "libcublas.so.12", PATHFINDER),
            Library("nvidia-cufft-cu12", "libcufft.so.11", PATHFINDER),
            Library("nvidia-cusolver-cu12", "libcusolver.so.11", PATHFINDER),
            Library("nvidia-cusparse-cu12", "libcusparse.so.12", PATHFINDER),
            Library("nvidia-curand-cu12", "libcurand.so.10", PATHFINDER),
        ),
        "from nvmath.bindings import cublas, cufft, curand, cusolver, cusparse\n"
        "print(cublas.get_property(0), cufft.get_version(), cusolver.get_property(0),"
        " cusparse.get_property(0), curand.get_version())\n",
    ),
    Stack(
        "cudapy",
        "cuda-python[all]",
        (
            Library("nvidia-cuda-nvrtc", "libnvrtc.so.13", PATHFINDER),
            Library("nvidia-nvjitlink", "libnvJitLink.so.13", PATHFINDER),
            Library("nvidia-nvfatbin", "libnvfatbin.so.13", PATHFINDER),
        ),
        "from cuda.bindings import nvfatbin, nvjitlink, nvrtc\n"
        "print(nvrtc.nvrtcVersion(), nvjitlink.version(), nvfatbin.version())\n",
    ),
)


NO_TABLE_CONSUMER = {
    "jax12": "jax_",
    "jax13": "jax_",
    "tf12": "tensorflow",
    "cupy12": "cupy",
    "cupy13": "cupy",
}
"""With no row, what the refusal and doctor must name: the object a row names need not be the
one a literal names (``jax_plugins/xla_cuda12/__init__.py`` for ``_versions.so``), so the
framework's packages (``jax_cuda12_plugin``, ``jax_plugins``) or its distribution."""
NO_TABLE_GONE_AS = {"tf12": "nvidia/cuda_runtime/lib"}
"""With no row and no earlier reading of the copy (the pristine reading was of the cached
venv), TensorFlow's loss is seen as the wheel's directory its objects search: it builds the
soname at run time, so no name of it is written anywhere cudafix reads."""


def build_stub(root: Path) -> Path:
    """``libcuda.so.1`` from :data:`STUB_C` with gcc, in the cache (rebuilt each run)."""
    work = root / "stub"
    work.mkdir(parents=True, exist_ok=True)
    (work / "stub.c").write_text(STUB_C)
    out = work / "libcuda.so.1"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", out, work / "stub.c"],
        check=True,
    )
    return out


def installed(venv: Path) -> set[str]:
    site = next((venv / "lib").glob("python3*/site-packages"))
    return {normalize_name(p.name.split("-")[0]) for p in site.glob("*.dist-info")}


def oracle(run: Run, label: str, venv: Path, stack: Stack, stub: Path) -> bool:
    env = {**user_env(), "E2E_STUB_LIBCUDA": str(stub)}
    argv: list[str | Path] = [venv / "bin" / "python", "-c", PRELUDE + stack.oracle]
    return run.step(label, argv, cwd=Path("/"), env=env).returncode == 0


def unlisted(run: Run, root: Path, work: Path, stack: Stack, python3: str, stub: Path) -> None:
    base = fw.build(run, root, stack.venv, stack.spec, python3)
    rows = {r.framework for r in RuntimeTable.default().rows}
    named = sorted(rows & installed(base))
    run.check(f"{stack.venv}: no run-time table row names a distribution of it", not named,
              ", ".join(named) or f"{len(installed(base))} distributions")  # fmt: skip
    run.check(f"{stack.venv}: the loader works on the pristine install",
              oracle(run, f"{stack.venv}: oracle (pristine)", base, stack, stub))  # fmt: skip
    pristine = fw.cudafix(run, f"{stack.venv}: cudafix doctor (pristine)", "doctor", "--venv", base)
    run.check(f"{stack.venv}: doctor exits 0 on the pristine install", pristine.returncode == 0,
              fw.problems(pristine))  # fmt: skip
    for lib in stack.libraries:
        plan = fw.cudafix(run, f"{stack.venv}: cudafix remove {lib.dist} --dry-run", "remove",
                          lib.dist, "--venv", base, "--dry-run", "--no-fetch")  # fmt: skip
        run.check(
            f"{stack.venv}: removing {lib.dist} is refused naming {lib.consumer}",
            plan.returncode == 3 and lib.consumer in plan.stdout,
            f"exit {plan.returncode}",
        )
    for lib in stack.libraries:
        broken(run, work, base, stack, lib, stub)


def broken(run: Run, work: Path, base: Path, stack: Stack, lib: Library, stub: Path) -> None:
    name = f"{stack.venv}-{lib.dist}"
    venv = work / name
    fw.link_copy(base, venv)
    python = venv / "bin" / "python"
    before = fw.cudafix(run, f"{name}: cudafix doctor (before)", "doctor", "--venv", venv)
    run.check(f"{name}: doctor exits 0 before", before.returncode == 0, fw.problems(before))
    run.step(f"{name}: uv pip uninstall {lib.dist}",
             uv_argv("pip", "uninstall", "--python", python, lib.dist))  # fmt: skip
    run.check(f"{name}: the loader fails after the plain uninstall",
              not oracle(run, f"{name}: oracle after uninstall", venv, stack, stub))  # fmt: skip
    doctor = fw.cudafix(run, f"{name}: cudafix doctor (broken)", "doctor", "--venv", venv)
    # by its stem: a by-name loader's alternatives (``libcufft.so.12 or libcufft.so.11``)
    stem = lib.soname.split(".so", 1)[0] + ".so"
    hits = [ln for ln in doctor.stdout.splitlines() if stem in ln and lib.consumer in ln]
    run.check(
        f"{name}: doctor exits 1 naming {stem} and {lib.consumer}",
        doctor.returncode == 1 and bool(hits),
        hits[0][:160] if hits else fw.problems(doctor),
    )
    fixed = fw.cudafix(run, f"{name}: cudafix repair --yes", "repair", "--venv", venv, "--yes")
    run.check(f"{name}: repair commits", fixed.returncode == 0, fw.tail(fixed))
    run.check(f"{name}: the loader works after repair",
              oracle(run, f"{name}: oracle after repair", venv, stack, stub))  # fmt: skip
    subprocess.run(["rm", "-rf", str(venv)], check=False)


def empty_table(run: Run, root: Path, work: Path, only: list[str] | None, python3: str) -> None:
    """``e2e_frameworks``' framework runs with no row: ``$CUDAFIX_RUNTIME_TABLE`` empty."""
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as empty:
        empty.write("version = 1\n")
    os.environ[RUNTIME_TABLE_VARIABLE] = empty.name
    try:
        before = len(run.checks)
        for framework in fw.FRAMEWORKS:
            if not only or framework.venv in only:
                loader = replace(
                    framework,
                    consumer=NO_TABLE_CONSUMER[framework.venv],
                    gone_as=NO_TABLE_GONE_AS.get(framework.venv, ""),
                )
                fw.framework(run, root, work, loader, python3)
        run.checks[before:] = [(f"[no table] {w}", ok, d) for w, ok, d in run.checks[before:]]
    finally:
        del os.environ[RUNTIME_TABLE_VARIABLE]
        Path(empty.name).unlink()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.e2e_unlisted", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--python3", default="python3.11", help="the interpreter for the venvs")
    parser.add_argument("--out", type=Path, default=Path("bench-out"))
    parser.add_argument("--only", action="append", help="venv names to run (default: all)")
    parser.add_argument("--empty-table", action="append", default=None, metavar="VENV",
                        help="also run e2e_frameworks' VENV with an empty run-time table "
                        "('all': every one)")  # fmt: skip
    args = parser.parse_args(argv)
    root = fw.cache_dir()
    work = root / "work"
    work.mkdir(parents=True, exist_ok=True)
    run = Run()
    stub = build_stub(root)
    for stack in STACKS:
        if not args.only or stack.venv in args.only:
            unlisted(run, root, work, stack, args.python3, stub)
    if args.empty_table:
        only = None if "all" in args.empty_table else args.empty_table
        empty_table(run, root, work, only, args.python3)
    return fw.report(args.out, run, "stacks with no table row", "e2e-unlisted")


if __name__ == "__main__":
    sys.exit(main())
