"""Goal 4 of ``make bench-real`` for two cudafix checkouts side by side, in one run.

``run -- python -c pass`` over the bare command is an absolute target, so a change to it is
only seen against the code before it measured on the same machine at the same moment. Per
run, for each checkout in alternating order: a fresh hard-linked copy of the real venv
(``fixtures.link_copy``), ``doctor`` twice past the racy window as ``goals`` does, a
``sync`` so neither side pays for the other's copy being written back, then the bare
command and ``cudafix run`` on it. Both checkouts are byte-compiled first
(``fixtures.byte_compile``). Each checkout runs as ``python -m cudafix`` from outside
either tree, with its own directory first on ``PYTHONPATH``. ``--kept 5`` first commits
five untimed runs on each copy, so the timed one is a commit past the five snapshots kept
(it deletes the oldest): the steady state of a user who runs often.

    python -m benchmarks.versus --base /path/to/other/checkout --runs 6 [--kept 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

from benchmarks import fixtures, sections
from benchmarks.proc import Timed, check, timed
from benchmarks.real import DEFAULT_VENV
from benchmarks.stats import median, spread, table

REPO = Path(__file__).resolve().parent.parent


def _cli(tree: Path, *args: str | Path, ok: tuple[int, ...] = (0,)) -> Timed:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    argv = [sys.executable, "-m", "cudafix", *args]
    return check(timed(argv, env=env, cwd=Path("/")), ok)  # not cwd: it would come first


def _overhead(tree: Path, venv: Path) -> float:
    """Seconds ``cudafix run -- python -c pass`` takes over the bare command."""
    py = venv / "bin" / "python"
    bare = check(timed([py, "-c", "pass"])).seconds
    return _cli(tree, "run", "--venv", venv, "--", py, "-c", "pass").seconds - bare


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.versus", description=__doc__)
    p.add_argument("--base", type=Path, required=True, help="the other checkout")
    p.add_argument("--venv", type=Path, default=DEFAULT_VENV, help="the real venv (read only)")
    p.add_argument("--work", type=Path, default=None, help="where copies go (default: beside it)")
    p.add_argument("--runs", type=int, default=6)
    p.add_argument("--kept", type=int, default=0, help="untimed runs committed first")
    args = p.parse_args()
    trees = {"base": args.base.resolve(), "this": REPO}
    work = args.work or args.venv.parent / "versus-work"
    got: dict[str, list[float]] = {k: [] for k in trees}
    for tree in trees.values():
        fixtures.byte_compile(tree)
    try:
        for i in range(args.runs):
            order = list(trees) if i % 2 == 0 else list(reversed(trees))
            for name in order:
                copy = fixtures.link_copy(args.venv, work / name)
                py = copy / "bin" / "python"
                for _ in range(args.kept):
                    _cli(trees[name], "run", "--venv", copy, "--", py, "-c", "pass")
                sections.settle()
                _cli(trees[name], "doctor", "--venv", copy, ok=(0, 1))
                sections.settle()
                _cli(trees[name], "doctor", "--venv", copy, ok=(0, 1))
                subprocess.run(["sync"], check=True)
                got[name].append(_overhead(trees[name], copy))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = [[f"{k} ({trees[k]})", spread(v)] for k, v in got.items()]
    ratio = median(got["this"]) / median(got["base"])
    print(table(["checkout", "run -- python -c pass, over the bare command (s)"], rows))
    kept = f", after {args.kept} committed runs" if args.kept else ""
    print(f"\nthis / base: {ratio:.2f}x (medians of {args.runs} runs each{kept})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
