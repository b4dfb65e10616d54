"""``make bench-real``: the plan-time and transaction sections of ``make bench`` on a real venv.

The synthetic scenario hides what a real torch venv costs (22k files in 2k directories,
120 ELF objects, 5 GB); this runs the same measurements on one, as the CLI a user waits
for, with the walk+sniff baseline process in the same run:

1. ``doctor`` and ``remove SELECTOR --dry-run``, cold and warm (``sections.plan_cold_warm``);
2. ``remove DIST --yes --no-probe`` against ``uv pip uninstall DIST`` on identical copies;
3. ``cudafix --help``.

The venv given by ``--venv`` is never changed: every measurement runs on a hard-linked
copy (``fixtures.link_copy``) under ``--work``, deleted afterwards.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import fixtures, goals, machine, sections
from benchmarks.proc import check, timed
from benchmarks.run import emit
from benchmarks.stats import median, spread, table

DEFAULT_VENV = Path.home() / ".cache/cudafix-e2e/pristine-cu130"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.real", description=__doc__.split("\n")[0]
    )
    p.add_argument("--venv", type=Path, default=DEFAULT_VENV, help="the real venv (read only)")
    p.add_argument("--work", type=Path, default=None, help="where copies go (default: beside it)")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--plan-dist", default="nvidia-cusparselt-cu13")
    p.add_argument("--tx-dist", default="pip", help="a distribution nothing needs")
    p.add_argument(
        "--change-dist", default="mpmath", help="goal 2's wheel: uninstalled, installed again"
    )
    p.add_argument("--only", default="goals,1,2,3", help="'goals' is the one-table summary")
    p.add_argument("--cache-pin", default="nvidia-nvtx-cu12==12.9.79", help="goal 1's wheel")
    p.add_argument("--cache-index", default="https://pypi.org/simple", help="goal 1's index")
    p.add_argument("--no-drop-caches", action="store_true")
    p.add_argument("--out", type=Path, default=Path("bench-out"))
    return p


def help_wall(runs: int) -> sections.Section:
    """``cudafix --help``: start-up and imports only."""
    walls = [check(timed([*sections.cudafix_argv(), "--help"])).seconds for _ in range(runs)]
    verdict = "met" if median(walls) <= 0.15 else "MISSED"
    md = table(
        ["command", "wall s", "target <= 0.15 s"], [["cudafix --help", spread(walls), verdict]]
    )
    return sections.Section("3. Start-up: cudafix --help", md, {"wall": walls})


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = _parser().parse_args(argv)
    venv: Path = args.venv.absolute()
    if not (venv / "pyvenv.cfg").is_file():
        raise SystemExit(f"{venv}: not a venv (build it as BENCHMARKS.md says, or pass --venv)")
    work = (args.work or venv.parent / f"work-bench-real-{time.strftime('%H%M%S')}").absolute()
    only = {s.strip() for s in args.only.split(",")}
    env = sections.Env(
        work=work, runs=args.runs, drop=not args.no_drop_caches and fixtures.drop_page_cache()
    )
    fixtures.byte_compile(sections.REPO)
    facts = machine.describe()
    print(
        "\n\n".join(
            [
                f"# cudafix on a real venv ({time.strftime('%Y-%m-%d %H:%M:%S')})",
                machine.as_markdown(facts),
                f"Command: python -m benchmarks.real {' '.join(argv or sys.argv[1:])}",
                f"Venv: {venv}",
                "Page cache dropped for cold runs: " + ("yes" if env.drop else "no"),
            ]
        ),
        flush=True,
    )
    results: dict[str, Any] = {"machine": facts, "venv": str(venv), "drop": env.drop}
    try:
        if "goals" in only:
            change = (args.change_dist, args.cache_index)
            m = goals.goal_runs(env, venv, args.plan_dist, args.tx_dist, change)
            wheel = goals.Wheel(args.cache_pin, args.cache_index)
            growth, install_seconds = goals.cache_growth(env, venv, wheel)
            results["goals"] = emit(goals.summary(m, growth, install_seconds))
        if "1" in only:
            plan = sections.plan_cold_warm(env, venv, args.plan_dist, fixtures.link_copy)
            results["plan"] = emit(plan)
        if "2" in only:
            tx = sections.transaction_overhead(env, venv, args.tx_dist, fixtures.link_copy)
            results["transaction"] = emit(tx)
        if "3" in only:
            results["help"] = emit(help_wall(args.runs))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out: Path = args.out.absolute()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"bench-real-{time.strftime('%Y%m%dT%H%M%S')}.json"
    path.write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(f"\nJSON: {path}")
    return results


if __name__ == "__main__":
    main()
