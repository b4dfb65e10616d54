"""``make bench``: cudafix on the ``large`` synthetic scenario, against plain baselines.

Sections (each a Markdown table on stdout; everything also in ``bench-out/bench-*.json``):

1. ``doctor`` / ``remove --dry-run``: cold (no ``.cudafix/``, page cache dropped when
   permitted) and warm, as a CLI subprocess and in-process (gather+plan, imports excluded),
   against ``os.walk`` + a 4-byte magic sniff of the same tree measured in the same run.
2. Transaction overhead: ``cudafix remove X --yes --no-probe`` vs ``uv pip uninstall X`` on
   identical copies, in alternation; and ``snapshot.take`` per file and per GB.
3. Commit and rollback of a removal holding a 1 GiB (sparse) library; peak RSS.
4. Scaling: plan time at several file counts.
5. Scaling: time and peak RSS at 1x/2x/4x of ELF objects with many unresolved needs and long
   RUNPATHs, and of RECORD rows (``benchmarks.stress``).

Medians of ``--runs`` runs; no number here is asserted anywhere.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import fixtures, machine, sections, stress

DEFAULT_OUT = Path("bench-out")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=5, help="runs per measurement (median reported)")
    p.add_argument("--files", type=int, default=20000, help="files in the main scenario")
    p.add_argument("--elves", type=int, default=150)
    p.add_argument("--sparse-mib", type=int, default=1024, help="size of each grown library")
    p.add_argument("--sparse-libs", type=int, default=3, help="libtorch_cuda, cublasLt, cudnn")
    p.add_argument(
        "--scaling", default="1000,5000,20000,80000", help="file counts for section 4 ('' skips)"
    )
    p.add_argument("--tx-dist", default="jinja2", help="distribution removed in section 2")
    p.add_argument("--plan-dist", default="nvidia-cudnn-cu12", help="remove --dry-run target")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--no-drop-caches", action="store_true", help="never drop the page cache")
    p.add_argument("--only", default="1,2,3,4,5", help="sections to run, e.g. '1,4'")
    p.add_argument("--stress-objects", type=int, default=25, help="section 5's 1x ELF objects")
    p.add_argument("--stress-rows", type=int, default=100000, help="section 5's 1x RECORD rows")
    p.add_argument("--stress-needs", type=int, default=200, help="unresolved needs per object")
    return p


def _params(args: argparse.Namespace, files: int) -> dict[str, int]:
    return {
        "files": files,
        "elves": args.elves,
        "sparse_mib": args.sparse_mib,
        "sparse_libs": args.sparse_libs,
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = _parser().parse_args(argv)
    out: Path = args.out.absolute()
    out.mkdir(parents=True, exist_ok=True)
    only = {s.strip() for s in args.only.split(",")}
    env = sections.Env(
        work=out / "work",
        runs=args.runs,
        drop=not args.no_drop_caches and fixtures.drop_page_cache(),
    )
    fixtures.byte_compile(sections.REPO)
    facts = machine.describe()
    header = [
        f"# cudafix benchmarks ({time.strftime('%Y-%m-%d %H:%M:%S')})",
        machine.as_markdown(facts),
        f"Command: python -m benchmarks.run {' '.join(argv if argv is not None else sys.argv[1:])}",
        "Page cache dropped for cold runs: "
        + ("yes" if env.drop else "no (not permitted or disabled)"),
    ]
    print("\n\n".join(header), flush=True)
    results: dict[str, Any] = {"machine": facts, "args": vars(args) | {"out": str(out)}}
    results["page_cache_dropped"] = env.drop
    main_venv = fixtures.pristine(out / "venvs", _params(args, args.files))
    if "1" in only:
        results["plan"] = emit(sections.plan_cold_warm(env, main_venv, args.plan_dist))
    if "2" in only:
        results["transaction"] = emit(sections.transaction_overhead(env, main_venv, args.tx_dist))
        results["snapshot"] = emit(sections.snapshot_cost(env, args.sparse_mib))
    if "3" in only:
        results["commit_rollback"] = emit(sections.commit_rollback(env, main_venv))
    sizes = [int(s) for s in args.scaling.split(",") if s.strip()]
    if "4" in only and sizes:
        venvs = {n: fixtures.pristine(out / "venvs", _params(args, n)) for n in sizes}
        results["scaling"] = emit(sections.scaling(env, venvs))
    if "5" in only:
        results["metadata_scaling"] = emit(sections.metadata_scaling(env, _stress(args, out)))
    path = out / f"bench-{time.strftime('%Y%m%dT%H%M%S')}.json"
    text = json.dumps(results, indent=2, default=str)
    path.write_text(text + "\n")
    (out / "latest.json").write_text(text + "\n")
    print(f"\nJSON: {path}")
    return results


def _stress(args: argparse.Namespace, out: Path) -> dict[tuple[str, int], tuple[Path, str]]:
    venvs = {}
    for shape, base in (("elf", args.stress_objects), ("record", args.stress_rows)):
        for factor in (1, 2, 4):
            what = stress.SHAPES[shape][0].format(needs=args.stress_needs, runpath=60)
            venvs[(shape, base * factor)] = (
                stress.pristine(out / "venvs", shape, base * factor, args.stress_needs),
                what,
            )
    return venvs


def emit(section: sections.Section) -> dict[str, Any]:
    """Print one section as Markdown; its data for the JSON file."""
    print(f"\n## {section.title}\n\n{section.markdown}", flush=True)
    if section.notes:
        print("\n" + "\n".join(f"- {n}" for n in section.notes), flush=True)
    return {"title": section.title, "notes": section.notes, **section.data}


if __name__ == "__main__":
    main()
