"""Does cudafix's resolver agree with ``ldd`` on every ELF object of a real venv?"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from cudafix.env.target import locate_target
from cudafix.gather import gather
from cudafix.linker.elfindex import EnvironmentView
from cudafix.linker.loader import DlopenTable, LoadTree, resolve

_LINE = re.compile(r"^\s*(\S+)\s+=>\s+(not found|\S+)")
_INTERP = re.compile(r"^\s*(/\S+)\s+\(0x[0-9a-f]+\)$")
"""ld.so itself: ldd prints its path without ``=>``; cudafix reports it as already loaded."""
NOT_FOUND = "not found"


@dataclass
class Comparison:
    """Per-object agreement between ``ldd`` and ``cudafix.linker.loader.resolve``."""

    objects: int = 0
    agree: int = 0
    needs: int = 0
    needs_agree: int = 0
    both_not_found: dict[str, int] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    disagreements: list[str] = field(default_factory=list)


def ldd_map(path: Path) -> dict[str, str] | None:
    """soname -> realpath (or ``not found``) as ldd prints it; None when ldd refuses."""
    done = subprocess.run(["ldd", str(path)], capture_output=True, text=True, check=False)
    if done.returncode != 0 and "=>" not in done.stdout:
        return None
    out: dict[str, str] = {}
    for line in done.stdout.splitlines():
        interp = _INTERP.match(line)
        if interp:
            ldso = interp.group(1)
            out.setdefault(Path(ldso).name, os.path.realpath(ldso))
            continue
        m = _LINE.match(line)
        if m:
            name, where = m.groups()
            out.setdefault(name, where if where == NOT_FOUND else os.path.realpath(where))
    return out


def cudafix_map(tree: LoadTree) -> dict[str, str]:
    """soname -> realpath of its provider (or ``not found``), first resolution per soname."""
    out: dict[str, str] = {}
    for step in tree.steps:
        if step.how == "dlopen":
            continue
        where = os.path.realpath(step.provider) if step.provider else NOT_FOUND
        out.setdefault(step.need, where)
    return out


def compare(venv: Path) -> Comparison:
    """Resolve every ELF object of ``venv`` with an empty dlopen table (ldd sees DT_NEEDED only)."""
    facts = gather(locate_target(None, str(venv), os.environ, Path.cwd()))
    inv = facts.inventory
    view = EnvironmentView(inv.prefix, facts.elf, inv.files, system=facts.host)
    result = Comparison()
    for rel in sorted(facts.elf.objects):
        if rel in facts.elf.foreign:
            result.skipped.append(f"{rel}: foreign class/machine")
            continue
        root = Path(inv.prefix) / rel
        theirs = ldd_map(root)
        if theirs is None:
            result.skipped.append(f"{rel}: ldd refused (static or not dynamic)")
            continue
        ours = cudafix_map(resolve(str(root), view, facts.search, DlopenTable()))
        _tally(result, rel, ours, theirs)
    return result


def _tally(result: Comparison, rel: str, ours: dict[str, str], theirs: dict[str, str]) -> None:
    result.objects += 1
    names = set(ours) | set(theirs)
    bad = [n for n in sorted(names) if ours.get(n, "absent") != theirs.get(n, "absent")]
    result.needs += len(names)
    result.needs_agree += len(names) - len(bad)
    for n in names:
        if ours.get(n) == NOT_FOUND and theirs.get(n) == NOT_FOUND:
            result.both_not_found[n] = result.both_not_found.get(n, 0) + 1
    if bad:
        result.disagreements += [
            f"{rel}: {n}: cudafix={ours.get(n, 'absent')} ldd={theirs.get(n, 'absent')}"
            for n in bad
        ]
    else:
        result.agree += 1
