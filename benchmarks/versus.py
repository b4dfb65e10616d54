"""Goals of ``make bench-real`` for two cudafix checkouts side by side, in one run.

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

``--what doctor`` measures, per run and checkout in the same alternation, what a changed
environment costs ``doctor`` (its remembered answer deleted, so each computes): a first
``doctor`` on the fresh copy, a warm one, and one after a single shared library was
replaced (a new file renamed over it, as an installer writes), each beside the walk+sniff
baseline process of the same copy. ``--scenario`` runs on ``make bench``'s synthetic
``large`` venv (built once under ``--work``) where the real venv is not at hand:

    python -m benchmarks.versus --base CHECKOUT --what doctor --scenario --runs 5

``--what uv`` measures goals 2 and 5 as ``goals`` does, per run and checkout in the same
alternation, on the real venv: past a ``doctor`` and a remembered ``remove PLAN_DIST
--dry-run``, ``uv pip uninstall CHANGE_DIST`` then a timed ``doctor``; ``uv pip install`` of
it again then the timed dry run; then a timed ``remove TX_DIST --yes --no-probe``, over
``uv pip uninstall TX_DIST`` of an identical copy timed right before it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

from benchmarks import fixtures, sections
from benchmarks.goals import installed_version
from benchmarks.proc import Timed, check, timed, uv_argv
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


DOCTOR_STEPS = ("first", "warm", "changed")
"""``--what doctor``'s timed ``doctor`` runs, in order: first on the copy, warm (its answer
deleted), after one library was replaced."""


def _replace_one_library(venv: Path) -> None:
    """Rename a fresh copy of the largest shared library over it: a new inode, new mtime."""
    lib = max((p for p in venv.rglob("*.so*") if p.is_file() and not p.is_symlink()),
              key=lambda p: (p.stat().st_size, str(p)))  # fmt: skip
    tmp = lib.with_name(lib.name + ".new")
    shutil.copyfile(lib, tmp)
    tmp.rename(lib)


def _doctor_side_by_side(
    trees: dict[str, Path], venv: Path, work: Path, runs: int
) -> dict[str, dict[str, list[float]]]:
    """Per checkout and step of :data:`DOCTOR_STEPS`, seconds of ``doctor``; and the walk."""
    got: dict[str, dict[str, list[float]]] = {
        k: {s: [] for s in (*DOCTOR_STEPS, "walk")} for k in trees
    }
    for i in range(runs):
        for name in list(trees) if i % 2 == 0 else list(reversed(trees)):
            copy = fixtures.link_copy(venv, work / name)
            sections.settle()
            steps = got[name]
            steps["walk"].append(sections.inproc("walk", copy)[0].seconds)
            steps["first"].append(_cli(trees[name], "doctor", "--venv", copy, ok=(0, 1)).seconds)
            sections.settle()
            fixtures.forget_answers(copy)
            steps["warm"].append(_cli(trees[name], "doctor", "--venv", copy, ok=(0, 1)).seconds)
            _replace_one_library(copy)
            sections.settle()
            fixtures.forget_answers(copy)
            done = _cli(trees[name], "doctor", "--venv", copy, ok=(0, 1))
            steps["changed"].append(done.seconds)
    return got


UV_STEPS = ("uninstalled", "installed", "remove")
"""``--what uv``'s timed runs: ``doctor`` after uv's uninstall, the dry run after uv's
install, ``remove --yes`` over uv's uninstall."""


def _uv_side_by_side(
    trees: dict[str, Path], venv: Path, work: Path, runs: int, dists: tuple[str, str, str]
) -> dict[str, dict[str, list[float]]]:
    """Per checkout and step of :data:`UV_STEPS`, seconds (``remove``: over uv's); and the
    walk right after each change, as ``goals`` takes it."""
    plan_dist, change_dist, tx_dist = dists
    pin = f"{change_dist}=={installed_version(venv, change_dist)}"
    got: dict[str, dict[str, list[float]]] = {
        k: {s: [] for s in (*UV_STEPS, "walk")} for k in trees
    }
    for i in range(runs):
        for name in list(trees) if i % 2 == 0 else list(reversed(trees)):
            copy = fixtures.link_copy(venv, work / name)
            twin = fixtures.link_copy(venv, work / f"{name}-uv")
            py, tree, steps = copy / "bin" / "python", trees[name], got[name]
            dry: list[str | Path] = ["remove", plan_dist, "--dry-run", "--venv", copy]
            sections.settle()
            _cli(tree, "doctor", "--venv", copy, ok=(0, 1))
            sections.settle()
            _cli(tree, "doctor", "--venv", copy, ok=(0, 1))
            _cli(tree, *dry, ok=(0, 3))
            check(timed(uv_argv("pip", "uninstall", "--python", py, change_dist)))
            steps["uninstalled"].append(_cli(tree, "doctor", "--venv", copy, ok=(0, 1)).seconds)
            steps["walk"].append(sections.inproc("walk", copy)[0].seconds)
            check(timed(uv_argv("pip", "install", "--offline", "--python", py, pin)))
            steps["installed"].append(_cli(tree, *dry, ok=(0, 3)).seconds)
            theirs = uv_argv("pip", "uninstall", "--python", twin / "bin" / "python", tx_dist)
            bare = check(timed(theirs)).seconds
            ours = _cli(tree, "remove", tx_dist, "--yes", "--no-probe", "--venv", copy)
            steps["remove"].append(ours.seconds - bare)
            fixtures.remove_tree(twin)
    return got


def _print_steps(
    trees: dict[str, Path],
    got: dict[str, dict[str, list[float]]],
    labels: dict[str, str],
    over: frozenset[str] = frozenset(),
) -> None:
    """One row per step and checkout (its ratio to the walk, or for a step in ``over``, the
    seconds over the bare command), then this / base."""
    rows = []
    for step in labels:
        for name in trees:
            walk = median(got[name]["walk"])
            to_walk = "" if step in over else f", {median(got[name][step]) / walk:.2f}x the walk"
            rows.append(
                [labels[step], f"{name} ({trees[name]})", spread(got[name][step]) + to_walk]
            )
        ratio = median(got["this"][step]) / median(got["base"][step])
        rows.append([labels[step], "this / base", f"{ratio:.2f}x"])
    walks = [w for name in trees for w in got[name]["walk"]]
    print(table(["measure", "checkout", "seconds (median, min-max), ratio to the walk"], rows))
    print(f"\nwalk+sniff of the same copies: {spread(walks)}")


def _print_doctor(trees: dict[str, Path], got: dict[str, dict[str, list[float]]]) -> None:
    labels = {
        "first": "first doctor on a cp -al copy",
        "warm": "warm doctor computing its answer",
        "changed": "doctor after one library replaced",
    }
    _print_steps(trees, got, labels)


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.versus", description=__doc__)
    p.add_argument("--base", type=Path, required=True, help="the other checkout")
    p.add_argument("--venv", type=Path, default=DEFAULT_VENV, help="the real venv (read only)")
    p.add_argument("--work", type=Path, default=None, help="where copies go (default: beside it)")
    p.add_argument("--runs", type=int, default=6)
    p.add_argument("--kept", type=int, default=0, help="untimed runs committed first")
    p.add_argument(
        "--what", choices=("run", "doctor", "uv"), default="run", help="what is measured"
    )
    p.add_argument("--plan-dist", default="nvidia-cusparselt-cu13", help="--what uv: dry run's")
    p.add_argument("--change-dist", default="mpmath", help="--what uv: uninstalled, installed")
    p.add_argument("--tx-dist", default="pip", help="--what uv: removed with --yes")
    p.add_argument("--scenario", action="store_true", help="the synthetic large venv instead")
    p.add_argument("--files", type=int, default=20000, help="--scenario: files in the venv")
    args = p.parse_args()
    trees = {"base": args.base.resolve(), "this": REPO}
    work = args.work or args.venv.parent / "versus-work"
    if args.scenario:
        params = {"files": args.files, "elves": 150, "sparse_mib": 8, "sparse_libs": 3}
        args.venv = fixtures.pristine(work / "pristine", params)
    got: dict[str, list[float]] = {k: [] for k in trees}
    for tree in trees.values():
        fixtures.byte_compile(tree)
    if args.what == "doctor":
        try:
            _print_doctor(trees, _doctor_side_by_side(trees, args.venv, work, args.runs))
        finally:
            for name in trees:
                shutil.rmtree(work / name, ignore_errors=True)
        return 0
    if args.what == "uv":
        dists = (args.plan_dist, args.change_dist, args.tx_dist)
        labels = {
            "uninstalled": "doctor right after uv pip uninstall",
            "installed": "remove --dry-run right after uv pip install of it again",
            "remove": "remove --yes --no-probe, over uv pip uninstall",
        }
        try:
            got_uv = _uv_side_by_side(trees, args.venv, work, args.runs, dists)
            _print_steps(trees, got_uv, labels, over=frozenset({"remove"}))
        finally:
            for name in trees:
                shutil.rmtree(work / name, ignore_errors=True)
        return 0
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
        for name in trees:
            shutil.rmtree(work / name, ignore_errors=True)
    rows = [[f"{k} ({trees[k]})", spread(v)] for k, v in got.items()]
    ratio = median(got["this"]) / median(got["base"])
    print(table(["checkout", "run -- python -c pass, over the bare command (s)"], rows))
    kept = f", after {args.kept} committed runs" if args.kept else ""
    print(f"\nthis / base: {ratio:.2f}x (medians of {args.runs} runs each{kept})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
