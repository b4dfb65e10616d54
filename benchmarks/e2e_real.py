"""``make e2e-real`` (opt-in, never in CI): the cuDNN incident with real wheels, and ldd.

1. Build (once; cached in ``$CUDAFIX_E2E_CACHE``, default ``~/.cache/cudafix-e2e``) a venv
   with the machine's pip: ``python3 -m venv``, ``pip install torch==2.14.1`` (the CUDA 13
   build and its ``nvidia-*`` wheels, from the local indexes pip is configured with), then
   ``pip install nvidia-cudnn-cu12 --no-deps`` from PyPI over it.
2. On a ``cp -a`` copy, plain ``uv pip uninstall nvidia-cudnn-cu12``: ``import torch`` breaks.
3. On another copy, ``cudafix remove nvidia-cudnn-cu12 --dry-run`` refuses (exit 3), then
   ``--repair --yes --find-links DIR`` (DIR: where pip's local index keeps the
   ``nvidia-cudnn-cu13`` wheel) commits, and ``import torch`` reports the cu13 cuDNN.
4. cudafix's resolver against ``ldd`` for every ELF object of the built venv.

Prints Markdown; writes ``bench-out/e2e-real-*.json``. Exit 0 only when every check holds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import uv

from benchmarks import machine
from benchmarks.ldd_compare import compare
from benchmarks.proc import Timed, timed
from benchmarks.sections import cudafix_argv
from benchmarks.stats import table

TORCH = "torch==2.14.1"
CU12 = "nvidia-cudnn-cu12"
CU13 = "nvidia-cudnn-cu13"
STAMP = ".e2e-ready"
VERSION_CODE = "import torch; print(torch.__version__, torch.backends.cudnn.version())"


class Run:
    """Steps, each timed and kept with its output, plus pass/fail checks."""

    def __init__(self) -> None:
        self.steps: list[dict[str, Any]] = []
        self.checks: list[tuple[str, bool, str]] = []

    def step(self, label: str, argv: list[str | Path], **kw: Any) -> Timed:
        print(f"... {label}", file=sys.stderr, flush=True)
        done = timed(argv, **kw)
        tail = (done.stdout + done.stderr).strip().splitlines()[-12:]
        self.steps.append(
            {
                "step": label,
                "argv": list(done.argv),
                "seconds": round(done.seconds, 2),
                "exit": done.returncode,
                "rss_mib": round(done.max_rss_mib),
                "tail": tail,
            }
        )
        return done

    def check(self, what: str, ok: bool, detail: str = "") -> None:
        self.checks.append((what, ok, detail))


def cache_dir() -> Path:
    configured = os.environ.get("CUDAFIX_E2E_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "cudafix-e2e"


def build_base(run: Run, base: Path, python3: str) -> None:
    """The incident venv, built with the machine's own pip (its config: local indexes)."""
    if (base / STAMP).exists():
        run.check("base venv reused from cache", True, str(base))
        return
    if not (base / "bin" / "python").exists():
        run.step("python3 -m venv", [python3, "-m", "venv", base])
    pip: list[str | Path] = [base / "bin" / "python", "-m", "pip"]
    done = run.step(f"pip install {TORCH}", [*pip, "install", TORCH])
    if done.returncode != 0:
        raise SystemExit(f"pip install {TORCH} failed:\n{done.stderr[-3000:]}")
    done = run.step(f"pip install {CU12} --no-deps", [*pip, "install", CU12, "--no-deps"])
    if done.returncode != 0:
        raise SystemExit(f"pip install {CU12} failed:\n{done.stderr[-3000:]}")
    (base / STAMP).write_text(time.strftime("%Y-%m-%dT%H:%M:%S\n"))


def site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def dist_version(venv: Path, name: str) -> str | None:
    infos = sorted(site_packages(venv).glob(f"{name.replace('-', '_')}-*.dist-info"))
    return infos[0].name[len(name) + 1 : -len(".dist-info")] if infos else None


def cudnn_code(version: str) -> int:
    """What ``torch.backends.cudnn.version()`` reports for cuDNN ``version`` (9.24.0.x -> 92400)."""
    major, minor, patch = (int(p) for p in version.split(".")[:3])
    return major * 10000 + minor * 100 + patch


def find_wheel_dir(python: Path, name: str) -> Path | None:
    """The directory pip's configured find-links/indexes keep ``name``'s wheel in."""
    argv = [str(python), "-m", "pip", "config", "list"]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    roots: list[Path] = []
    for line in done.stdout.splitlines():
        _key, _, value = line.partition("=")
        for item in value.strip("'\"").split():
            path = Path(item.removeprefix("file://"))
            roots += [path, path.parent] if path.name == "simple" else [path]
    pattern = f"{name.replace('-', '_')}-*.whl"
    for root in roots:
        for candidate in (root, root / "files"):
            if candidate.is_dir() and any(candidate.glob(pattern)):
                return candidate
    return None


def copy(src: Path, dest: Path) -> None:
    shutil.rmtree(dest, ignore_errors=True)
    subprocess.run(["cp", "-a", "--reflink=auto", str(src), str(dest)], check=True)
    shutil.rmtree(dest / ".cudafix", ignore_errors=True)


def plain_uninstall(run: Run, base: Path, work: Path) -> None:
    venv = work / "plain-uv"
    copy(base, venv)
    py = venv / "bin" / "python"
    run.step(
        f"uv pip uninstall {CU12} (plain)",
        [uv.find_uv_bin(), "pip", "uninstall", "--python", py, CU12],
    )
    done = run.step("import torch after plain uv", [py, "-c", VERSION_CODE])
    said = (done.stdout + done.stderr).strip().splitlines()
    run.check(
        "plain uv uninstall breaks `import torch` with libcudnn.so.9",
        done.returncode != 0 and "libcudnn.so.9" in done.stderr,
        said[-1] if said else "",
    )
    shutil.rmtree(venv, ignore_errors=True)


def cudafix_repair(run: Run, base: Path, work: Path, wheel_dir: Path | None) -> None:
    venv = work / "cudafix"
    copy(base, venv)
    py = venv / "bin" / "python"
    cu13 = dist_version(venv, CU13) or "?"
    done = run.step(
        f"cudafix remove {CU12} --dry-run",
        [*cudafix_argv(), "remove", CU12, "--venv", venv, "--dry-run"],
    )
    run.check(
        "cudafix refuses the plain removal (exit 3)",
        done.returncode == 3,
        f"exit {done.returncode}",
    )
    links = ["--find-links", str(wheel_dir)] if wheel_dir else []
    argv: list[str | Path] = [
        *cudafix_argv(),
        "remove",
        CU12,
        "--venv",
        venv,
        "--repair",
        "--yes",
        *links,
    ]
    done = run.step(f"cudafix remove {CU12} --repair --yes {' '.join(links)}", argv)
    run.check("cudafix --repair commits (exit 0)", done.returncode == 0, f"exit {done.returncode}")
    done = run.step("import torch after cudafix", [py, "-c", VERSION_CODE])
    got = (
        done.stdout.strip().split()[-1] if done.returncode == 0 and done.stdout.strip() else "error"
    )
    want = str(cudnn_code(cu13)) if cu13 != "?" else "?"
    run.check(
        f"import torch works; cudnn.version() == {want} ({CU13} {cu13})",
        done.returncode == 0 and got == want,
        f"got {got}",
    )
    after = run.step("cudafix doctor after", [*cudafix_argv(), "doctor", "--venv", venv])
    before = run.step(
        "cudafix doctor on the built venv", [*cudafix_argv(), "doctor", "--venv", base]
    )
    run.check(
        "doctor finds no more problems after the repair than on the built venv",
        problems(after) <= problems(before),
        f"after: {problems(after)} (exit {after.returncode}); before: {problems(before)}",
    )
    shutil.rmtree(venv, ignore_errors=True)


def problems(done: Timed) -> int:
    """N from doctor's last line ``N problem(s) found.`` (0 when healthy)."""
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    word = last.split(" ", 1)[0]
    return int(word) if "problem" in last and word.isdigit() else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.e2e_real", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--python3", default="python3", help="the machine's interpreter")
    parser.add_argument("--out", type=Path, default=Path("bench-out"))
    parser.add_argument("--skip-ldd", action="store_true")
    args = parser.parse_args(argv)
    root = cache_dir()
    base, work = root / "base", root / "work"
    work.mkdir(parents=True, exist_ok=True)
    run = Run()
    build_base(run, base, args.python3)
    versions = {n: dist_version(base, n) for n in ("torch", CU12, CU13)}
    run.step(
        "import torch in the built venv (cu12 cuDNN over cu13)",
        [base / "bin" / "python", "-c", VERSION_CODE],
    )
    wheel_dir = find_wheel_dir(base / "bin" / "python", CU13)
    run.check(f"{CU13} wheel found in pip's local index", wheel_dir is not None, str(wheel_dir))
    plain_uninstall(run, base, work)
    cudafix_repair(run, base, work, wheel_dir)
    ldd = None
    if not args.skip_ldd:
        start = time.perf_counter()
        ldd = compare(base)
        ldd_seconds = time.perf_counter() - start
        run.check(
            "resolver agrees with ldd on every object",
            not ldd.disagreements,
            f"{ldd.agree}/{ldd.objects} objects",
        )
    return report(args.out, run, versions, ldd, ldd_seconds if ldd else 0.0)


def report(
    out: Path, run: Run, versions: dict[str, str | None], ldd: Any, ldd_seconds: float
) -> int:
    facts = machine.describe()
    print(f"# cudafix e2e-real ({time.strftime('%Y-%m-%d %H:%M:%S')})\n")
    print(machine.as_markdown(facts) + "\n")
    print("Installed: " + ", ".join(f"{k}=={v}" for k, v in versions.items()) + "\n")
    rows = [
        [s["step"], f"{s['seconds']:.2f}", s["exit"], s["rss_mib"], (s["tail"] or [""])[-1][:120]]
        for s in run.steps
    ]
    print(table(["step", "wall s", "exit", "peak RSS MiB", "last line of output"], rows) + "\n")
    print(
        table(["check", "ok", "detail"], [[w, "yes" if ok else "NO", d] for w, ok, d in run.checks])
    )
    data: dict[str, Any] = {
        "machine": facts,
        "versions": versions,
        "steps": run.steps,
        "checks": run.checks,
    }
    if ldd is not None:
        print(f"\n## Resolver vs ldd ({ldd_seconds:.1f} s)\n")
        print(f"- objects compared: {ldd.objects}; agree on every need: {ldd.agree}")
        print(f"- needs compared: {ldd.needs}; agree: {ldd.needs_agree}")
        print(f"- not found by both: {ldd.both_not_found}")
        print(f"- skipped: {len(ldd.skipped)} " + "; ".join(ldd.skipped[:5]))
        for line in ldd.disagreements[:40]:
            print(f"- DISAGREE {line}")
        data["ldd"] = ldd.__dict__ | {"seconds": ldd_seconds}
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"e2e-real-{time.strftime('%Y%m%dT%H%M%S')}.json"
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")
    print(f"\nJSON: {path}")
    return 0 if all(ok for _w, ok, _d in run.checks) else 1


if __name__ == "__main__":
    sys.exit(main())
