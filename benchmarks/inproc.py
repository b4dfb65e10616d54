"""Worker: time one operation inside a fresh interpreter, imports excluded.

``python -m benchmarks.inproc OP VENV [SELECTOR]`` prints one JSON object. Each measurement
runs in its own process so module-level memos (ld.so.cache, system libraries) start cold,
exactly as in the CLI; only interpreter start-up and imports are left out.

OP is ``walk`` (the baseline: ``os.walk`` plus a 4-byte ELF-magic sniff of every file),
``doctor`` (gather + diagnose) or ``plan`` (gather + select + build_plan, as
``cudafix remove SELECTOR --dry-run`` does).

Two more ops measure the floor under a command, the part no reading of the venv can
remove: ``modules VENV OUT ARGS...`` runs ``cudafix ARGS...`` in this process and writes to
OUT the modules it imported, in the order it imported them; ``imports VENV OUT`` then
imports exactly those, and nothing else (timed as a process, beside the walk, this is what
the command costs before it reads a file).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ELF_MAGIC = b"\x7fELF"


def walk_and_sniff(prefix: Path) -> dict[str, Any]:
    """The cheapest possible look at the tree: list it and read 4 bytes of every file."""
    files = elves = 0
    for root, _dirs, names in os.walk(prefix):
        for name in names:
            path = os.path.join(root, name)  # noqa: PTH118 - the baseline is plain os calls
            if os.path.islink(path):  # noqa: PTH114
                continue
            files += 1
            with open(path, "rb") as fh:
                if fh.read(4) == ELF_MAGIC:
                    elves += 1
    return {"files": files, "elf_objects": elves}


def _gather(venv: Path) -> Any:
    from cudafix.env.target import locate_target
    from cudafix.gather import gather

    return gather(locate_target(None, str(venv), os.environ, Path.cwd()))


def _doctor(venv: Path) -> dict[str, Any]:
    from cudafix.plan.doctor import diagnose

    facts = _gather(venv)
    report = diagnose(facts)
    return _facts_summary(facts) | {"healthy": report.healthy}


def _plan(venv: Path, selector: str) -> dict[str, Any]:
    from cudafix.model.plan import Options
    from cudafix.plan.planner import Request, build_plan
    from cudafix.plan.select import select

    facts = _gather(venv)
    names = select(facts.inventory.distributions, [selector])
    plan = build_plan(facts, Request(names, (selector,), Options()))
    return _facts_summary(facts) | {"verdict": plan.verdict}


def _facts_summary(facts: Any) -> dict[str, Any]:
    return {
        "files": len(facts.inventory.files),
        "elf_objects": len(facts.elf.objects),
        "elf_parsed": facts.elf.parsed,
    }


def _import_cudafix() -> None:
    import cudafix.gather
    import cudafix.plan.doctor
    import cudafix.plan.facts
    import cudafix.plan.planner
    import cudafix.plan.select  # noqa: F401


def record_modules(out: Path, args: list[str]) -> dict[str, Any]:
    """Run ``cudafix ARGS`` here; write the modules it imported to ``out``, in order."""
    before = set(sys.modules)
    from cudafix.cli.main import main as cli

    try:
        cli(args)
    except SystemExit as exc:
        status = exc.code
    else:
        status = 0
    names = [n for n in sys.modules if n not in before and "__main__" not in n]
    out.write_text(json.dumps(names))
    return {"modules": len(names), "status": status}


def import_modules(listed: Path) -> dict[str, Any]:
    """Import the modules :func:`record_modules` wrote, in its order."""
    import importlib

    failed = 0
    for name in json.loads(listed.read_text()):
        try:
            importlib.import_module(name)
        except Exception:  # a module only its importer could make: not counted
            failed += 1
    return {"failed": failed}


def main(argv: list[str]) -> None:
    op, venv = argv[0], Path(argv[1])
    if op == "modules":
        print("\n" + json.dumps(record_modules(Path(argv[2]), argv[3:])))
        return
    if op == "imports":
        print(json.dumps(import_modules(Path(argv[2]))))
        return
    t0 = time.perf_counter()
    if op != "walk":
        _import_cudafix()
    t1 = time.perf_counter()
    if op == "walk":
        result = walk_and_sniff(venv)
    elif op == "doctor":
        result = _doctor(venv)
    elif op == "plan":
        result = _plan(venv, argv[2])
    else:
        raise SystemExit(f"unknown op {op!r}")
    t2 = time.perf_counter()
    print(json.dumps({"op": op, "import_seconds": t1 - t0, "seconds": t2 - t1, **result}))


if __name__ == "__main__":
    main(sys.argv[1:])
