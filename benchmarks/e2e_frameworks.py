"""``make e2e-real``, second part: frameworks that load their CUDA libraries at run time.

Official GPU installs from PyPI, built once with uv into ``$CUDAFIX_REAL_CACHE`` (default
``~/.cache/cudafix-real``): ``jax12`` (``jax[cuda12]``), ``jax13`` (``jax[cuda13]``), ``tf12``
(``tensorflow[and-cuda]``), ``cupy12`` (``cupy-cuda12x[ctk]``), ``cupy13``
(``cupy-cuda13x[ctk]``). For each: ``doctor`` on the pristine venv; ``cudafix remove LIB
--dry-run`` is refused naming the framework's object; then, on a hard-linked copy, a plain
``uv pip uninstall LIB`` breaks the framework's own loader (the oracle, run without a GPU),
``doctor`` exits 1 naming the library and the framework, ``cudafix repair --yes`` installs it
back, the oracle works again. ``scipy`` alone: pristine doctor exits 0. torch (cu130, pip's
local index) and ``jax[cuda12]`` in one venv, in both install orders (``torch-jax12``,
``jax12-torch``): both frameworks' loaders work, removing either cuDNN is refused, and doctor
warns of the cuDNN/NCCL/NVSHMEM wheels that share paths without offering to remove what a
framework requires. Last, the resolver against ``ldd`` on every object of every venv.

Prints Markdown; writes ``bench-out/e2e-frameworks-*.json``. Exit 0 only when every check holds.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import machine
from benchmarks.e2e_real import Run, user_env
from benchmarks.ldd_compare import compare
from benchmarks.proc import uv_argv
from benchmarks.sections import cudafix_argv
from benchmarks.stats import table

STAMP = ".e2e-ready"


@dataclass(frozen=True)
class Framework:
    """One official install and the library whose loss its GPU backend does not survive."""

    venv: str
    spec: str
    library: str
    """The nvidia wheel removed."""
    soname: str
    consumer: str
    """The framework object the refusal and doctor must name (site-packages relative)."""
    oracle: str
    """Python that exits 0 only when the framework's own loader finds the library (no GPU)."""
    gone_as: str = ""
    """What doctor may name instead of ``soname`` after the plain uninstall when nothing
    remembers the library: the wheel's directory an object searches (TensorFlow, no row)."""


FRAMEWORKS = (
    Framework(
        "jax12",
        "jax[cuda12]",
        "nvidia-cudnn-cu12",
        "libcudnn.so.9",
        "jax_cuda12_plugin/_versions.so",
        "from jax_cuda12_plugin import _versions as v; print('cudnn', v.cudnn_get_version())",
    ),
    Framework(
        "jax13",
        "jax[cuda13]",
        "nvidia-cudnn-cu13",
        "libcudnn.so.9",
        "jax_cuda13_plugin/_versions.so",
        "from jax_cuda13_plugin import _versions as v; print('cudnn', v.cudnn_get_version())",
    ),
    Framework(
        "tf12",
        "tensorflow[and-cuda]",
        "nvidia-cuda-runtime-cu12",
        "libcudart.so.12",
        "tensorflow/libtensorflow_framework.so.2",
        "import sys, tensorflow\n"
        "maps = [l.split()[-1] for l in open('/proc/self/maps')]\n"
        "hit = [m for m in maps if m.endswith('/libcudart.so.12')]\n"
        "print(hit[:1] or 'libcudart.so.12 not mapped'); sys.exit(0 if hit else 1)",
    ),
    Framework(
        "cupy12",
        "cupy-cuda12x[ctk]",
        "nvidia-cufft-cu12",
        "libcufft.so.11",
        "cupy/cuda/cufft",
        "import cupy.cuda; print(cupy.cuda.cufft.__file__)",
    ),
    Framework(
        "cupy13",
        "cupy-cuda13x[ctk]",
        "nvidia-cufft",
        "libcufft.so.12",
        "cupy/cuda/cufft",
        "import cupy.cuda; print(cupy.cuda.cufft.__file__)",
    ),
)

PRISTINE = (("scipy", "scipy"),)
"""Venvs judged on the pristine install alone (name, what ``uv pip install`` gets)."""

TORCH = "torch==2.14.1"
"""The cu130 build in pip's configured local index (as ``e2e_real``'s pristine-cu130)."""
TORCH_JAX = (("torch-jax12", (TORCH, "jax[cuda12]")), ("jax12-torch", ("jax[cuda12]", TORCH)))
"""torch and jax in one venv, each install order: pip installs the specs one after another."""
JAX_ORACLE = "from jax_cuda12_plugin import _versions as v; print('cudnn', v.cudnn_get_version())"
TORCH_ORACLE = "import torch; print(torch.__version__, torch.version.cuda)"


def cache_dir() -> Path:
    configured = os.environ.get("CUDAFIX_REAL_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "cudafix-real"


def build(run: Run, root: Path, name: str, spec: str, python3: str) -> Path:
    """``uv venv`` + ``uv pip install SPEC`` from PyPI, once (a stamp marks it done)."""
    venv = root / name
    if (venv / STAMP).exists():
        run.check(f"{name} reused from cache", True, str(venv))
        return venv
    if not (venv / "bin" / "python").exists():
        run.step(f"uv venv {name}", uv_argv("venv", "-q", "--python", python3, venv))
    done = run.step(
        f"{name}: uv pip install {spec}",
        uv_argv("pip", "install", "-q", "--python", venv / "bin" / "python", spec),
    )
    if done.returncode != 0:
        raise SystemExit(f"uv pip install {spec} failed:\n{done.stderr[-3000:]}")
    (venv / STAMP).write_text(time.strftime("%Y-%m-%dT%H:%M:%S\n"))
    return venv


def build_with_pip(run: Run, root: Path, name: str, specs: tuple[str, ...], python3: str) -> Path:
    """``python3 -m venv`` + one ``pip install`` per spec, in order, once: pip, because torch
    cu130 comes from the local index pip is configured with."""
    venv = root / name
    if (venv / STAMP).exists():
        run.check(f"{name} reused from cache", True, str(venv))
        return venv
    shutil.rmtree(venv, ignore_errors=True)
    run.step(f"python -m venv {name}", [python3, "-m", "venv", venv])
    for spec in specs:
        done = run.step(
            f"{name}: pip install {spec}",
            [venv / "bin" / "python", "-m", "pip", "install", "-q", spec],
        )
        if done.returncode != 0:
            raise SystemExit(f"pip install {spec} failed:\n{done.stderr[-3000:]}")
    (venv / STAMP).write_text(time.strftime("%Y-%m-%dT%H:%M:%S\n"))
    return venv


def link_copy(src: Path, dest: Path) -> None:
    """A hard-linked copy: uninstall unlinks and install writes new files, so the cached
    venv's files are never written through (cudafix's own snapshots hard-link too). Scripts
    in ``bin/`` keep naming the cached venv's interpreter, as ``e2e_real``'s copies do:
    rewriting them would make their bytes differ from RECORD."""
    shutil.rmtree(dest, ignore_errors=True)
    subprocess.run(["cp", "-al", str(src), str(dest)], check=True)
    shutil.rmtree(dest / ".cudafix", ignore_errors=True)


def cudafix(run: Run, label: str, *args: str | Path) -> Any:
    return run.step(label, [*cudafix_argv(), *args], env=user_env())


def oracle(run: Run, label: str, venv: Path, fw: Framework) -> bool:
    return run_python(run, label, venv, fw.oracle)


def run_python(run: Run, label: str, venv: Path, code: str) -> bool:
    done = run.step(label, [venv / "bin" / "python", "-c", code], cwd=Path("/"))
    return bool(done.returncode == 0)


def pristine_only(run: Run, root: Path, name: str, spec: str, python3: str) -> None:
    venv = build(run, root, name, spec, python3)
    done = cudafix(run, f"{name}: cudafix doctor (pristine)", "doctor", "--venv", venv)
    run.check(f"{name}: doctor exits 0 on the pristine install", done.returncode == 0,
              problems(done))  # fmt: skip


def torch_and_jax(run: Run, root: Path, name: str, specs: tuple[str, ...], python3: str) -> None:
    """Both frameworks load what they need; doctor's only problems are the wheel pairs that
    share paths (each wheel required by one framework), and it offers no removal of them."""
    venv = build_with_pip(run, root, name, specs, python3)
    run.check(f"{name}: jax's loader works", run_python(run, f"{name}: jax oracle", venv,
              JAX_ORACLE))  # fmt: skip
    run.check(f"{name}: import torch works", run_python(run, f"{name}: torch oracle", venv,
              TORCH_ORACLE))  # fmt: skip
    done = cudafix(run, f"{name}: cudafix doctor --json", "doctor", "--venv", venv, "--json")
    report = json.loads(done.stdout) if done.stdout.strip().startswith("{") else {}
    findings = report.get("findings", [])
    serious = [f for f in findings if f["severity"] != "info"]
    shared = [f for f in serious if f["kind"] == "clobbered"]
    mixed = [f for f in findings if f["kind"] == "mixed-cuda"]
    run.check(
        f"{name}: doctor's problems are only wheel pairs two frameworks each require",
        done.returncode in (0, 1)
        and len(shared) == len(serious)
        and not report["next_command"]
        and not any(f["command"] for f in shared),
        f"exit {done.returncode}; " + "; ".join(f["message"][:80] for f in serious),
    )
    run.check(
        f"{name}: doctor says which framework needs which CUDA major, offering to keep both",
        bool(mixed)
        and "jax-cuda12-plugin needs cu12" in mixed[0]["message"]
        and "torch needs cu13" in mixed[0]["message"]
        and any(c["action"] == "keep-all" for c in mixed[0]["choices"]),
        mixed[0]["message"] if mixed else "no mixed-cuda finding",
    )
    offered = [c for f in mixed for c in f["choices"] if c["action"] == "remove-framework"]
    for choice in offered:
        argv = [*cudafix_argv(), *shlex.split(choice["command"])[1:], "--no-fetch"]
        who = ", ".join(choice["frameworks"])
        done = run.step(f"{name}: offered removal of {who} --dry-run", argv, env=user_env())
        run.check(f"{name}: doctor's offered removal of {who} passes as printed",
                  done.returncode == 0, tail(done))  # fmt: skip
    for lib, who in (("nvidia-cudnn-cu12", "jax_cuda12_plugin/_versions.so"),
                     ("nvidia-cudnn-cu13", "torch requires nvidia-cudnn-cu13")):  # fmt: skip
        plan = cudafix(run, f"{name}: cudafix remove {lib} --dry-run", "remove", lib,
                       "--venv", venv, "--dry-run", "--no-fetch")  # fmt: skip
        refused = plan.returncode == 3 and who in plan.stdout
        run.check(f"{name}: removing {lib} is refused naming {who}", refused,
                  f"exit {plan.returncode}")  # fmt: skip


def framework(run: Run, root: Path, work: Path, fw: Framework, python3: str) -> None:
    base = build(run, root, fw.venv, fw.spec, python3)
    pristine = cudafix(run, f"{fw.venv}: cudafix doctor (pristine)", "doctor", "--venv", base)
    run.check(f"{fw.venv}: doctor exits 0 on the pristine install", pristine.returncode == 0,
              problems(pristine))  # fmt: skip
    plan = cudafix(
        run, f"{fw.venv}: cudafix remove {fw.library} --dry-run", "remove", fw.library,
        "--venv", base, "--dry-run", "--no-fetch",
    )  # fmt: skip
    run.check(
        f"{fw.venv}: removing {fw.library} is refused naming {fw.consumer}",
        plan.returncode == 3 and fw.consumer in plan.stdout and fw.soname in plan.stdout,
        f"exit {plan.returncode}",
    )
    venv = work / fw.venv
    link_copy(base, venv)
    run.check(
        f"{fw.venv}: the framework's loader works before",
        oracle(run, f"{fw.venv}: oracle", venv, fw),
    )
    python = venv / "bin" / "python"
    run.step(f"{fw.venv}: uv pip uninstall {fw.library}",
             uv_argv("pip", "uninstall", "--python", python, fw.library))  # fmt: skip
    run.check(f"{fw.venv}: the framework's loader fails after the plain uninstall",
              not oracle(run, f"{fw.venv}: oracle after uninstall", venv, fw))  # fmt: skip
    broken = cudafix(run, f"{fw.venv}: cudafix doctor (broken)", "doctor", "--venv", venv)
    names = [n for n in (fw.soname, fw.gone_as) if n]
    named = [
        ln for ln in broken.stdout.splitlines() if any(n in ln for n in names) and fw.consumer in ln
    ]
    run.check(
        f"{fw.venv}: doctor exits 1 naming {' or '.join(names)} and {fw.consumer}",
        broken.returncode == 1 and bool(named),
        named[0][:160] if named else problems(broken),
    )
    fixed = cudafix(run, f"{fw.venv}: cudafix repair --yes", "repair", "--venv", venv, "--yes")
    run.check(f"{fw.venv}: repair commits", fixed.returncode == 0, tail(fixed))
    run.check(f"{fw.venv}: the framework's loader works after repair",
              oracle(run, f"{fw.venv}: oracle after repair", venv, fw))  # fmt: skip
    after = cudafix(run, f"{fw.venv}: cudafix doctor (repaired)", "doctor", "--venv", venv)
    run.check(f"{fw.venv}: doctor after repair as on the pristine install",
              after.returncode == pristine.returncode, problems(after))  # fmt: skip


def problems(done: Any) -> str:
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith(("x ", "! "))]
    return f"{len(lines)} error/warning line(s)" + (f"; first: {lines[0][:140]}" if lines else "")


def tail(done: Any) -> str:
    lines = (done.stdout + done.stderr).strip().splitlines()
    return lines[-1][:160] if lines else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.e2e_frameworks", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--python3", default="python3.11", help="the interpreter for the venvs")
    parser.add_argument("--out", type=Path, default=Path("bench-out"))
    parser.add_argument("--only", action="append", help="venv names to run (default: all)")
    parser.add_argument("--skip-ldd", action="store_true")
    args = parser.parse_args(argv)
    root = cache_dir()
    work = root / "work"
    work.mkdir(parents=True, exist_ok=True)
    run = Run()
    chosen = [fw for fw in FRAMEWORKS if not args.only or fw.venv in args.only]
    for fw in chosen:
        framework(run, root, work, fw, args.python3)
    alone = [(n, spec) for n, spec in PRISTINE if not args.only or n in args.only]
    for name, spec in alone:
        pristine_only(run, root, name, spec, args.python3)
    pairs = [(n, specs) for n, specs in TORCH_JAX if not args.only or n in args.only]
    for name, specs in pairs:
        torch_and_jax(run, root, name, specs, args.python3)
    if not args.skip_ldd:
        for venv in [fw.venv for fw in chosen] + [n for n, _ in alone] + [n for n, _ in pairs]:
            result = compare(root / venv)
            run.check(
                f"{venv}: resolver agrees with ldd on every object",
                not result.disagreements,
                f"{result.agree}/{result.objects} objects, {result.needs_agree}/{result.needs} "
                "edges",
            )
    return report(args.out, run)


def report(out: Path, run: Run, title: str = "frameworks", stem: str = "e2e-frameworks") -> int:
    """Print the steps and checks as Markdown, write them as JSON under ``out``; 0 only
    when every check holds (the second and third parts of ``make e2e-real`` share it)."""
    facts = machine.describe()
    print(f"# cudafix e2e-real: {title} ({time.strftime('%Y-%m-%d %H:%M:%S')})\n")
    print(machine.as_markdown(facts) + "\n")
    rows = [[s["step"], f"{s['seconds']:.2f}", s["exit"], (s["tail"] or [""])[-1][:120]]
            for s in run.steps]  # fmt: skip
    print(table(["step", "wall s", "exit", "last line of output"], rows) + "\n")
    print(
        table(["check", "ok", "detail"], [[w, "yes" if ok else "NO", d] for w, ok, d in run.checks])
    )
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{stem}-{time.strftime('%Y%m%dT%H%M%S')}.json"
    data = {"machine": facts, "steps": run.steps, "checks": run.checks}
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")
    print(f"\nJSON: {path}")
    return 0 if all(ok for _w, ok, _d in run.checks) else 1


if __name__ == "__main__":
    sys.exit(main())
