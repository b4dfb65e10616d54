"""``make e2e-real`` (opt-in, never in CI): both incident directions with real wheels, and ldd.

Venvs are built once with the machine's pip and cached in ``$CUDAFIX_E2E_CACHE`` (default
``~/.cache/cudafix-e2e``); every check that changes a venv runs on a ``cp -a`` copy, so the
cached ones are never modified (doctor may refresh its own cache under ``<venv>/.cudafix``).

- ``pristine-cu130``: ``python3 -m venv`` + ``pip install torch==2.14.1`` (the CUDA 13 build
  and its ``nvidia-*`` wheels, from the local indexes pip is configured with).
- ``pristine-cu12``: ``python3 -m venv`` + ``pip install torch==2.9.0`` (PyPI's cu128 build,
  ``nvidia-*-cu12`` wheels).
- ``seed-cu130``: pristine-cu130 + ``pip install --no-deps nvidia-cudnn-cu12``.
- ``incident-cu12``: pristine-cu12 + ``pip install --no-deps`` of the cu13 cudnn, nccl,
  cusparselt and nvshmem wheels (pip compiles bytecode, as by default), then
  ``flashinfer-python`` and ``sglang`` with ``--no-deps`` where PyPI serves them.

Checks: ``doctor`` exits 0 on both pristine venvs. Seed direction: plain ``uv pip uninstall
nvidia-cudnn-cu12`` breaks ``import torch`` and ``doctor`` exits 1; ``cudafix remove`` refuses,
``--repair --yes`` commits, torch reports the cu13 cuDNN, ``doctor`` exits 0. Incident
direction: plain ``uv pip uninstall`` of the four cu13 breaks ``import torch``; ``doctor``
exits 1 naming the clobbered cu12 paths; its printed command, run verbatim (then without
``--dry-run``, with ``--yes``) exits 0; torch reports the cu12 cuDNN; ``doctor`` exits 0. And
``cudafix remove 'nvidia-*-cu13'`` refuses, ``--repair --yes`` (wheels from PyPI) commits,
torch reports the cu12 cuDNN, ``doctor`` exits 0. A file of torch itself deleted: ``repair
--yes`` reinstalls torch and commits, ``doctor`` exits 0. The opencv pair (``opencv``:
``opencv-python`` and ``opencv-contrib-python`` 4.14.0.94, both shipping ``cv2/``): removing
one is refused, ``--repair --yes`` commits, ``cv2.imread`` works, ``undo`` commits. Last,
cudafix's resolver against ``ldd`` on every ELF object of both built venvs.

Prints Markdown; writes ``bench-out/e2e-real-*.json``. Exit 0 only when every check holds.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uv

from benchmarks import machine
from benchmarks.follow import applying, as_argv, names_target, printed_next, with_target
from benchmarks.ldd_compare import Comparison, compare
from benchmarks.proc import Timed, timed
from benchmarks.sections import cudafix_argv
from benchmarks.stats import table

STAMP = ".e2e-ready"
VERSION_CODE = "import torch; print(torch.__version__, torch.backends.cudnn.version())"


@dataclass(frozen=True)
class Direction:
    """One incident direction: a pristine official torch venv, wheels pip put over it."""

    name: str
    pristine: str
    torch: str
    over: tuple[str, ...]
    """Installed with ``pip install --no-deps`` over the pristine venv."""
    extra: tuple[str, ...] = ()
    """Installed after ``over`` with ``--no-deps`` when reachable; skipped with a note if not."""


SEED = Direction("seed-cu130", "pristine-cu130", "torch==2.14.1", ("nvidia-cudnn-cu12",))
INCIDENT = Direction(
    "incident-cu12",
    "pristine-cu12",
    "torch==2.9.0",
    ("nvidia-cudnn-cu13", "nvidia-nccl-cu13", "nvidia-cusparselt-cu13", "nvidia-nvshmem-cu13"),
    ("flashinfer-python", "sglang"),
)


class Run:
    """Steps, each timed and kept with its output, plus pass/fail checks and notes."""

    def __init__(self) -> None:
        self.steps: list[dict[str, Any]] = []
        self.checks: list[tuple[str, bool, str]] = []
        self.notes: list[str] = []

    def step(self, label: str, argv: Sequence[str | Path], **kw: Any) -> Timed:
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

    def check(self, what: str, ok: bool, detail: str = "") -> bool:
        self.checks.append((what, ok, detail))
        return ok


def cache_dir() -> Path:
    configured = os.environ.get("CUDAFIX_E2E_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "cudafix-e2e"


def pip(venv: Path) -> list[str | Path]:
    return [venv / "bin" / "python", "-m", "pip"]


def build_pristine(run: Run, venv: Path, torch: str, python3: str) -> None:
    """An official torch install, nothing else: ``python3 -m venv`` + ``pip install TORCH``."""
    if (venv / STAMP).exists():
        run.check(f"{venv.name} reused from cache", True, str(venv))
        return
    if not (venv / "bin" / "python").exists():
        run.step(f"python3 -m venv {venv.name}", [python3, "-m", "venv", venv])
    done = run.step(f"{venv.name}: pip install {torch}", [*pip(venv), "install", torch])
    if done.returncode != 0:
        raise SystemExit(f"pip install {torch} failed:\n{done.stderr[-3000:]}")
    (venv / STAMP).write_text(time.strftime("%Y-%m-%dT%H:%M:%S\n"))


def build_direction(run: Run, root: Path, d: Direction) -> Path:
    """``cp -a`` of the pristine venv with ``d.over`` (and reachable ``d.extra``) on top."""
    venv = root / d.name
    if (venv / STAMP).exists():
        run.check(f"{d.name} reused from cache", True, (venv / STAMP).read_text().strip())
        return venv
    partial = root / f".{d.name}.partial"
    copy(root / d.pristine, partial)
    (partial / STAMP).unlink()
    label = f"{d.name}: pip install --no-deps {' '.join(d.over)}"
    done = run.step(label, [*pip(partial), "install", "--no-deps", *d.over])
    if done.returncode != 0:
        raise SystemExit(f"{label} failed:\n{done.stderr[-3000:]}")
    extras: list[str] = []
    for name in d.extra:
        done = run.step(
            f"{d.name}: pip install --no-deps {name}", [*pip(partial), "install", "--no-deps", name]
        )
        if done.returncode == 0:
            extras.append(name)
        else:
            last = (done.stderr.strip().splitlines() or ["?"])[-1]
            run.notes.append(f"{d.name}: {name} skipped, pip could not install it: {last}")
    stamp = {"built": time.strftime("%Y-%m-%dT%H:%M:%S"), "over": d.over, "extra": extras}
    (partial / STAMP).write_text(json.dumps(stamp) + "\n")
    partial.rename(venv)
    return venv


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


def user_env() -> dict[str, str]:
    """A shell with no venv activated: the printed command must name its target itself."""
    return {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}


def doctor(run: Run, label: str, venv: Path, *json_flag: str) -> Timed:
    return run.step(label, [*cudafix_argv(), "doctor", "--venv", venv, *json_flag], env=user_env())


def extras_of(base: Path) -> tuple[str, ...]:
    """The ``--no-deps`` extras the built venv got (its stamp records them)."""
    text = (base / STAMP).read_text()
    return tuple(json.loads(text).get("extra", ())) if text.startswith("{") else ()


def named_paths(run: Run, venv: Path) -> None:
    """``doctor --json`` names every cu12 file plain uv deleted (bytecode aside)."""
    gone = missing_cu12(venv)
    done = doctor(run, "incident: cudafix doctor --json after plain uv", venv, "--json")
    try:
        details = {d for f in json.loads(done.stdout)["findings"] for d in f["details"]}
    except (ValueError, KeyError):
        details = set()
    unnamed = [p for p in gone if not any(d == p or d.startswith(f"{p}:") for d in details)]
    run.check(
        f"incident: doctor names every cu12 file plain uv deleted ({len(gone)}, bytecode aside)",
        bool(gone) and not unnamed,
        f"unnamed: {unnamed[:5]}" if unnamed else f"e.g. {gone[:3]}",
    )


def judge_doctor(run: Run, what: str, label: str, venv: Path, extras: Sequence[str]) -> None:
    """Check that ``doctor`` finds no problem, setting aside only the ``[requirement]``
    findings of ``extras``: installed with ``--no-deps`` on purpose, their own requirements
    are really unmet, and no repair of the CUDA libraries can or should change that."""
    done = doctor(run, label, venv, "--json")
    try:
        findings = json.loads(done.stdout)["findings"]
    except (ValueError, KeyError):
        run.check(what, False, tail_line(done))
        return
    problems = [f for f in findings if f["severity"] != "info"]
    aside = [
        f
        for f in problems
        if f["kind"] == "requirement"
        and f["message"].startswith(
            (*(f"{e} requires " for e in extras), *(f"{e}[" for e in extras))
        )  # its own requirements, base or an extra's (``flashinfer-python[cu13] requires``)
    ]
    left = [f for f in problems if f not in aside]
    detail = f"exit {done.returncode}; {len(left)} problem(s)"
    detail += (
        f" ({len(aside)} unmet requirement(s) of {', '.join(extras)} set aside)" if aside else ""
    )
    kinds = Counter(f["kind"] for f in left)
    missing = [d for f in left if f["kind"] == "missing-files" for d in f["details"]]
    pyc = sum(d.endswith(".pyc") for d in missing)
    detail += f"; by kind {dict(kinds)}" if left else ""
    detail += f"; missing files {len(missing)}, of which .pyc {pyc}" if missing else ""
    shown = [f"{f['severity']} [{f['kind']}] {f['message'][:140]}" for f in left[:8]]
    detail += (
        ": " + "; ".join(shown) + (f"; ... {len(left) - 8} more" if len(left) > 8 else "")
        if left
        else ""
    )
    run.check(
        what,
        not left and done.returncode in (0, 1) and (done.returncode == 0) == (not problems),
        detail,
    )


def missing_cu12(venv: Path) -> list[str]:
    """Site-packages paths that ``*-cu12`` RECORDs list and the disk lacks (bytecode aside)."""
    site = site_packages(venv)
    gone: list[str] = []
    for record in sorted(site.glob("nvidia_*_cu12-*.dist-info/RECORD")):
        for row in csv.reader(record.read_text(encoding="utf-8").splitlines()):
            rel = row[0] if row else ""
            if not rel or rel.startswith("..") or rel.endswith(".pyc") or "__pycache__" in rel:
                continue
            if not (site / rel).exists() and not (site / rel).is_symlink():
                gone.append(rel)
    return gone


def problems(done: Timed) -> str:
    """Doctor's last line (``N problem(s) found.`` or ``Healthy: ...``) and its ``x``/``!``
    finding heads, for the report."""
    heads = [ln for ln in done.stdout.splitlines() if ln.startswith(("x [", "! ["))]
    shown = "; ".join(h[:110] for h in heads[:6]) + (
        f"; ... {len(heads) - 6} more" * (len(heads) > 6)
    )
    last = (
        done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr.strip()[-200:]
    )
    return f"exit {done.returncode}: {last}" + (f" [{shown}]" if shown else "")


def check_cudnn(run: Run, label: str, venv: Path, dist: str, want_version: str | None) -> None:
    done = run.step(label, [venv / "bin" / "python", "-c", VERSION_CODE])
    out = done.stdout.strip().split()
    got = (
        out[-1]
        if done.returncode == 0 and out
        else "error: " + (done.stderr.strip().splitlines() or [""])[-1]
    )
    want = str(cudnn_code(want_version)) if want_version else "?"
    run.check(
        f"{label}: import torch works, cudnn.version() == {want} ({dist} {want_version})",
        done.returncode == 0 and got == want,
        f"got {got}",
    )


def pristine_doctor(run: Run, root: Path) -> None:
    for name in (SEED.pristine, INCIDENT.pristine):
        judge_doctor(
            run, f"doctor exits 0 on {name}", f"cudafix doctor --json on {name}", root / name, ()
        )


def broken_import(run: Run, label: str, venv: Path, needle: str) -> None:
    done = run.step(label, [venv / "bin" / "python", "-c", VERSION_CODE])
    said = (done.stdout + done.stderr).strip().splitlines()
    run.check(
        f"{label}: `import torch` fails ({needle})",
        done.returncode != 0 and needle in done.stderr,
        said[-1] if said else "",
    )


def seed_direction(run: Run, base: Path, work: Path, wheel_dir: Path | None) -> None:
    cu12, cu13 = "nvidia-cudnn-cu12", "nvidia-cudnn-cu13"
    venv = work / "seed-plain-uv"
    copy(base, venv)
    run.step(
        f"seed: uv pip uninstall {cu12} (plain)",
        [uv.find_uv_bin(), "pip", "uninstall", "--python", venv / "bin" / "python", cu12],
    )
    broken_import(run, "seed: after plain uv", venv, "libcudnn.so.9")
    done = doctor(run, "seed: cudafix doctor after plain uv", venv)
    run.check("seed: doctor exits 1 after plain uv", done.returncode == 1, problems(done))
    shutil.rmtree(venv, ignore_errors=True)

    venv = work / "seed-cudafix"
    copy(base, venv)
    want = dist_version(venv, cu13)
    argv: list[str | Path] = [*cudafix_argv(), "remove", cu12, "--venv", venv]
    done = run.step(f"seed: cudafix remove {cu12} --dry-run", [*argv, "--dry-run"])
    run.check(
        "seed: cudafix refuses the plain removal (exit 3)",
        done.returncode == 3,
        f"exit {done.returncode}",
    )
    links = ["--find-links", str(wheel_dir)] if wheel_dir else []
    done = run.step(
        f"seed: cudafix remove {cu12} --repair --yes {' '.join(links)}",
        [*argv, "--repair", "--yes", *links],
    )
    run.check("seed: --repair commits (exit 0)", done.returncode == 0, tail_line(done))
    check_cudnn(run, "seed: after cudafix --repair", venv, cu13, want)
    judge_doctor(
        run,
        "seed: doctor exits 0 after --repair",
        "seed: cudafix doctor --json after --repair",
        venv,
        (),
    )
    shutil.rmtree(venv, ignore_errors=True)


def torch_repair(run: Run, base: Path, work: Path, wheel_dir: Path | None) -> None:
    """A file of torch itself goes: ``repair`` reinstalls torch and must commit (its probes
    never dlopen ``torch/bin/torch_shm_manager``, a PIE executable)."""
    venv = work / "torch-repair"
    copy(base, venv)
    (site_packages(venv) / "torch" / "lib" / "libtorch_global_deps.so").unlink()
    links = ["--find-links", str(wheel_dir)] if wheel_dir else []
    argv: list[str | Path] = [*cudafix_argv(), "repair", "--venv", venv, "--yes", *links]
    done = run.step(f"torch: cudafix repair --yes {' '.join(links)} (reinstalls torch)", argv)
    run.check(
        "torch: repair reinstalling torch commits (exit 0)", done.returncode == 0, tail_line(done)
    )
    judge_doctor(run, "torch: doctor exits 0 after repair", "torch: doctor after repair", venv, ())
    shutil.rmtree(venv, ignore_errors=True)


OPENCV = ("opencv-python==4.14.0.94", "opencv-contrib-python==4.14.0.94")
IMREAD = "import cv2; assert callable(cv2.imread); print(cv2.__version__)"


def opencv_pair(run: Run, root: Path, work: Path, python3: str) -> None:
    """Both ship ``cv2/``: removing one is refused, ``--repair`` commits with ``cv2`` probed
    and working, and ``undo`` restores the tree."""
    base = root / "opencv"
    if not (base / "bin" / "python").exists():
        run.step("opencv: python3 -m venv", [python3, "-m", "venv", base])
        run.step(f"opencv: pip install {' '.join(OPENCV)}", [*pip(base), "install", *OPENCV])
    venv = work / "opencv"
    copy(base, venv)
    argv: list[str | Path] = [*cudafix_argv(), "remove", "opencv-python", "--venv", venv]
    done = run.step("opencv: cudafix remove opencv-python --dry-run", [*argv, "--dry-run"])
    run.check(
        "opencv: the plain removal is refused (exit 3)", done.returncode == 3, tail_line(done)
    )
    done = run.step(
        "opencv: cudafix remove opencv-python --repair --yes", [*argv, "--repair", "--yes"]
    )
    run.check("opencv: --repair commits (exit 0)", done.returncode == 0, tail_line(done))
    done = run.step("opencv: cv2.imread after --repair", [venv / "bin" / "python", "-c", IMREAD])
    run.check("opencv: cv2.imread works after --repair", done.returncode == 0, tail_line(done))
    undo: list[str | Path] = [*cudafix_argv(), "undo", "last", "--venv", venv, "--yes"]
    done = run.step("opencv: cudafix undo last --yes", undo)
    run.check("opencv: undo commits (exit 0)", done.returncode == 0, tail_line(done))
    shutil.rmtree(venv, ignore_errors=True)


def tail_line(done: Timed) -> str:
    lines = [ln for ln in (done.stdout + "\n" + done.stderr).splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error: ")]
    return f"exit {done.returncode}: " + ((errors or lines or [""])[-1])[:400]


def incident_plain(run: Run, base: Path, work: Path) -> None:
    """Plain uv breaks it; doctor says so and prints a command; that command repairs it."""
    venv = work / "incident-plain-uv"
    copy(base, venv)
    want, extras = dist_version(venv, "nvidia-cudnn-cu12"), extras_of(base)
    run.step(
        "incident: uv pip uninstall the four cu13 (plain)",
        [uv.find_uv_bin(), "pip", "uninstall", "--python", venv / "bin" / "python", *INCIDENT.over],
    )
    broken_import(run, "incident: after plain uv", venv, ".so")
    done = doctor(run, "incident: cudafix doctor after plain uv", venv)
    run.check("incident: doctor exits 1 after plain uv", done.returncode == 1, problems(done))
    named_paths(run, venv)
    words = printed_next(done.stdout)
    if not run.check(
        "incident: doctor prints a `Next: cudafix ...` command", words is not None, problems(done)
    ):
        shutil.rmtree(venv, ignore_errors=True)
        return
    assert words is not None
    printed = " ".join(words)
    verbatim = run.step(
        f"incident: `{printed}` (verbatim)",
        as_argv(words, cudafix_argv()),
        cwd=work,
        env=user_env(),
    )
    done, named = verbatim, names_target(words, venv)
    run.check(f"incident: printed `{printed}` names the venv", named, f"venv {venv}")
    run.check(
        f"incident: printed `{printed}` exits 0 verbatim",
        verbatim.returncode == 0,
        tail_line(verbatim),
    )
    if not named:
        words = with_target(words, venv)
        run.notes.append(
            f"incident: the printed command names no venv; continued as `{' '.join(words)}`"
        )
        done = run.step(
            f"incident: `{' '.join(words)}` (--venv added)",
            as_argv(words, cudafix_argv()),
            cwd=work,
            env=user_env(),
        )
    if "--dry-run" in words:
        words = applying(words)
        done = run.step(
            f"incident: `{' '.join(words)}`",
            as_argv(words, cudafix_argv()),
            cwd=work,
            env=user_env(),
        )
    run.check(
        f"incident: `{' '.join(words)}` commits (exit 0)", done.returncode == 0, tail_line(done)
    )
    check_cudnn(run, "incident: after doctor's repair", venv, "nvidia-cudnn-cu12", want)
    judge_doctor(
        run,
        "incident: doctor clean (but the extras' own requirements) after doctor's repair",
        "incident: cudafix doctor --json after doctor's repair",
        venv,
        extras,
    )
    shutil.rmtree(venv, ignore_errors=True)


def incident_remove(run: Run, base: Path, work: Path) -> None:
    """``cudafix remove 'nvidia-*-cu13'``: refused plain, committed with ``--repair`` (PyPI)."""
    venv = work / "incident-cudafix"
    copy(base, venv)
    want = dist_version(venv, "nvidia-cudnn-cu12")
    argv: list[str | Path] = [*cudafix_argv(), "remove", "nvidia-*-cu13", "--venv", venv]
    done = run.step("incident: cudafix remove 'nvidia-*-cu13' --dry-run", [*argv, "--dry-run"])
    run.check(
        "incident: cudafix refuses the plain removal (exit 3)",
        done.returncode == 3,
        f"exit {done.returncode}",
    )
    done = run.step(
        "incident: cudafix remove 'nvidia-*-cu13' --repair --yes", [*argv, "--repair", "--yes"]
    )
    run.check("incident: --repair commits (exit 0)", done.returncode == 0, tail_line(done))
    check_cudnn(run, "incident: after cudafix --repair", venv, "nvidia-cudnn-cu12", want)
    judge_doctor(
        run,
        "incident: doctor clean (but the extras' own requirements) after --repair",
        "incident: cudafix doctor --json after --repair",
        venv,
        extras_of(base),
    )
    shutil.rmtree(venv, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.e2e_real", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--python3", default="python3", help="the machine's interpreter")
    parser.add_argument("--out", type=Path, default=Path("bench-out"))
    parser.add_argument("--skip-ldd", action="store_true")
    args = parser.parse_args(argv)
    root = cache_dir()
    work = root / "work"
    work.mkdir(parents=True, exist_ok=True)
    run = Run()
    for d in (SEED, INCIDENT):
        build_pristine(run, root / d.pristine, d.torch, args.python3)
    pristine_doctor(run, root)
    seed, incident = build_direction(run, root, SEED), build_direction(run, root, INCIDENT)
    names = ("torch", "nvidia-cudnn-cu12", "nvidia-cudnn-cu13", "flashinfer-python", "sglang")
    versions = {v.name: {n: dist_version(v, n) for n in names} for v in (seed, incident)}
    run.step("seed: import torch in the built venv", [seed / "bin" / "python", "-c", VERSION_CODE])
    run.step(
        "incident: import torch in the built venv",
        [incident / "bin" / "python", "-c", VERSION_CODE],
    )
    wheel_dir = find_wheel_dir(seed / "bin" / "python", "nvidia-cudnn-cu13")
    run.check(
        "nvidia-cudnn-cu13 wheel found in pip's local index", wheel_dir is not None, str(wheel_dir)
    )
    seed_direction(run, seed, work, wheel_dir)
    torch_repair(run, root / SEED.pristine, work, wheel_dir)
    opencv_pair(run, root, work, args.python3)
    incident_plain(run, incident, work)
    incident_remove(run, incident, work)
    ldd: dict[str, tuple[Comparison, float]] = {}
    if not args.skip_ldd:
        for venv in (seed, incident):
            start = time.perf_counter()
            result = compare(venv)
            ldd[venv.name] = (result, time.perf_counter() - start)
            run.check(
                f"{venv.name}: resolver agrees with ldd on every object",
                not result.disagreements,
                f"{result.agree}/{result.objects} objects, "
                f"{result.needs_agree}/{result.needs} edges",
            )
    return report(args.out, run, versions, ldd)


def report(
    out: Path,
    run: Run,
    versions: dict[str, dict[str, str | None]],
    ldd: dict[str, tuple[Comparison, float]],
) -> int:
    facts = machine.describe()
    print(f"# cudafix e2e-real ({time.strftime('%Y-%m-%d %H:%M:%S')})\n")
    print(machine.as_markdown(facts) + "\n")
    for venv, got in versions.items():
        print(f"Installed in {venv}: " + ", ".join(f"{k}=={v}" for k, v in got.items() if v) + "\n")
    rows = [
        [s["step"], f"{s['seconds']:.2f}", s["exit"], s["rss_mib"], (s["tail"] or [""])[-1][:120]]
        for s in run.steps
    ]
    print(table(["step", "wall s", "exit", "peak RSS MiB", "last line of output"], rows) + "\n")
    print(
        table(["check", "ok", "detail"], [[w, "yes" if ok else "NO", d] for w, ok, d in run.checks])
    )
    for note in run.notes:
        print(f"\n- note: {note}")
    data: dict[str, Any] = {
        "machine": facts,
        "versions": versions,
        "steps": run.steps,
        "checks": run.checks,
        "notes": run.notes,
    }
    for name, (result, seconds) in ldd.items():
        print(f"\n## Resolver vs ldd on {name} ({seconds:.1f} s)\n")
        print(f"- objects compared: {result.objects}; agree on every need: {result.agree}")
        print(f"- needs compared: {result.needs}; agree: {result.needs_agree}")
        print(f"- not found by both: {result.both_not_found}")
        print(f"- skipped: {len(result.skipped)} " + "; ".join(result.skipped[:5]))
        for line in result.disagreements[:40]:
            print(f"- DISAGREE {line}")
        data.setdefault("ldd", {})[name] = result.__dict__ | {"seconds": seconds}
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"e2e-real-{time.strftime('%Y%m%dT%H%M%S')}.json"
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")
    print(f"\nJSON: {path}")
    return 0 if all(ok for _w, ok, _d in run.checks) else 1


if __name__ == "__main__":
    sys.exit(main())
