"""``make demo``: the incident, first with plain uv, then with cudafix, on real venvs.

Builds the ``incident`` scenario twice under ``./demo-env`` (real gcc-compiled libraries,
real wheels, real uv): one copy is broken the way pip and uv break it, the other is
cleaned with cudafix. A third act goes back to how it began, an install: the ``seed``
scenario (a cu12 torch) gets the cu13 cudnn from plain uv, silently, and cudafix refuses it.
Every command is printed before it runs, as a user would type it.
"""

from __future__ import annotations

import shlex
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from cudafix.process import run
from scenarios import build_scenario

DEMO_DIR = Path("demo-env")


def _uv() -> str:
    import uv

    return uv.find_uv_bin()


def _show(title: str, argv: Sequence[str | Path], *, cwd: Path | None = None) -> int:
    print(f"\n### {title}\n$ {' '.join(shlex.quote(str(a)) for a in argv)}", flush=True)
    done = run(argv, cwd=cwd, timeout=600)
    text = (done.stdout + done.stderr).rstrip()
    print(text if text else "(no output)")
    print(f"[exit status {done.returncode}]", flush=True)
    return done.returncode


def _cudafix(*args: str | Path) -> list[str | Path]:
    return [sys.executable, "-m", "cudafix", *args]


def main() -> int:
    if DEMO_DIR.exists():
        shutil.rmtree(DEMO_DIR)
    print("Building the incident scenario twice (cu12 torch, cu13 cudnn/nccl/nvshmem over it)...")
    plain = build_scenario("incident", DEMO_DIR / "plain-uv")
    safe = build_scenario("incident", DEMO_DIR / "with-cudafix")
    links = str(safe.wheelhouse)

    print("\n================ 1. What plain uv does ================")
    _show("import torch works before", [plain.python, "-c", "import torch; print('torch imports')"])
    _show(
        "remove the cu13 cudnn with plain uv",
        [_uv(), "pip", "uninstall", "--python", plain.python, "nvidia-cudnn-cu13"],
    )
    _show("import torch is now broken", [plain.python, "-c", "import torch"])
    _show(
        "...yet uv pip check sees nothing wrong", [_uv(), "pip", "check", "--python", plain.python]
    )
    _show("cudafix doctor explains the damage", _cudafix("doctor", "--python", plain.python))

    print("\n================ 2. The same removal with cudafix ================")
    remove: list[str | Path] = ["remove", "nvidia-*-cu13", "--venv", safe.venv]
    repair: list[str | Path] = [*remove, "--repair", "--offline", "--find-links", links]
    _show("dry run: refused, naming the soname and its consumer", _cudafix(*remove, "--dry-run"))
    _show("dry run of the safe alternative", _cudafix(*repair, "--dry-run"))
    code = _show(
        "apply it as a transaction (snapshot, uv, import probe, commit)",
        _cudafix(*repair, "--yes"),
    )
    _show("import torch still works", [safe.python, "-c", "import torch; print('torch imports')"])
    _show("doctor after the cleanup", _cudafix("doctor", "--venv", safe.venv))
    _show("history", _cudafix("history", "--venv", safe.venv))

    print("\n================ 3. How it began: an install ================")
    seed_plain = build_scenario("seed", DEMO_DIR / "install-plain-uv")
    seed_safe = build_scenario("seed", DEMO_DIR / "install-with-cudafix")
    wheels = ["--offline", "--no-index", "--find-links", str(seed_plain.wheelhouse)]
    install = ["nvidia-cudnn-cu13==9.13.0.50"]
    _show(
        "plain uv installs the cu13 cudnn over the cu12 one, without a word",
        [_uv(), "pip", "install", "--python", seed_plain.python, *wheels, *install],
    )
    _show("...uv pip check is still clean", [_uv(), "pip", "check", "--python", seed_plain.python])
    _show(
        "doctor: torch now loads files cu13 overwrote",
        _cudafix("doctor", "--venv", seed_plain.venv),
    )
    _show(
        "cudafix install refuses it, naming the paths and the library that would switch",
        _cudafix(
            "install", *install, "--venv", seed_safe.venv, "--dry-run",
            "--offline", "--find-links", seed_safe.wheelhouse,
        ),
    )  # fmt: skip
    print(f"\nThe demo environments are in {DEMO_DIR.resolve()}; delete them when done.")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
