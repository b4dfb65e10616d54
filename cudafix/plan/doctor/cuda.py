"""Doctor's CUDA findings: more than one major installed, and two majors in one process.

Which framework needs which major, the leftovers and the choices; one process image
mapping two majors of one library.

Pure functions of :class:`~cudafix.plan.facts.Facts` and the load chains to typed findings.
"""

from __future__ import annotations

import fnmatch
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from cudafix.env.inventory import Inventory
from cudafix.linker.linkage import Chains
from cudafix.linker.loader import LoadTree, Lookup
from cudafix.model.commands import shell_join
from cudafix.model.doctor import Choice, Finding, Load, MixedMajors, MixedSonames
from cudafix.model.names import DistName
from cudafix.plan.doctor.common import Commands, Needs, closure, frameworks, owners_abs
from cudafix.plan.facts import Facts

_SONAME_MAJOR = re.compile(r"^(?P<stem>.+\.so)\.(?P<major>\d+)")


def framework_cuda_needs(facts: Facts, chains: Chains) -> dict[DistName, frozenset[DistName]]:
    """Per framework (owner of an extension module or run-time load), the CUDA libraries its
    requirement closure holds (``*-cuNN`` and ``nvidia-*``: cu13 wheels often carry no
    suffix); frameworks needing none are left out."""
    out: dict[DistName, frozenset[DistName]] = {}
    for framework in sorted(frameworks(facts.inventory, chains)):
        libs = frozenset(
            n
            for n in closure(facts, {framework})
            if n in facts.cuda_majors or n.startswith("nvidia-")
        )
        if libs:
            out[framework] = libs
    return out


def cuda_leftovers(facts: Facts, needs: Needs) -> frozenset[DistName]:
    """Distributions of a CUDA major (``*-cuNN``) that no framework's requirement closure
    needs, while some framework needs another: the leftovers mixed-cuda offers to remove.
    Empty without framework evidence (then nothing is called a leftover)."""
    majors = facts.cuda_majors
    used = {m for libs in needs.values() for n in libs if (m := majors.get(n)) is not None}
    if not used:
        return frozenset()
    return frozenset(n for n in facts.inventory.distributions if majors.get(n) not in (None, *used))


def needed_by(needs: Needs) -> dict[DistName, list[DistName]]:
    """Per CUDA library, the frameworks whose requirement closure holds it."""
    out: dict[DistName, list[DistName]] = defaultdict(list)
    for framework, libs in sorted(needs.items()):
        for lib in sorted(libs):
            out[lib].append(framework)
    return dict(out)


def mixed_cuda(facts: Facts, chains: Chains, needs: Needs, cmd: Commands) -> Iterable[Finding]:
    """More than one CUDA major installed, and the two-majors-in-one-process check."""
    majors: dict[int, list[str]] = defaultdict(list)
    for name, major in sorted(facts.cuda_majors.items()):
        majors[major].append(name)
    if len(majors) > 1:
        yield _majors_finding(facts, needs, majors, cmd)
    yield from _mixed_sonames(chains.trees.values())


def _majors_finding(
    facts: Facts, needs: Needs, majors: Mapping[int, list[str]], cmd: Commands
) -> Finding:
    """Which framework needs which major, and what to do: typed :class:`Choice` values.

    A framework is a distribution owning an extension module (or run-time load); the majors
    it needs are those in its requirement closure. A major no framework needs is a leftover
    (a warning; its removal is the choice). When frameworks need different majors each is
    healthy on its own (information): the choices are keeping both, or removing one
    framework with the libraries of its major that no other framework needs. Nothing a
    framework needs is ever offered for removal. Without any framework evidence the
    removal stays a pattern to adapt rather than guess.
    """
    by_major: dict[int, list[DistName]] = defaultdict(list)
    for framework, libs in sorted(needs.items()):
        for m in sorted({m for n in libs if (m := facts.cuda_majors.get(n)) is not None}):
            by_major[m].append(framework)
    leftover = sorted(set(majors) - set(by_major))
    choices = [_remove_leftovers(m, majors[m], cmd) for m in leftover]
    if len(by_major) > 1:
        choices = [Choice(action="keep-all", majors=sorted(by_major)), *choices]
        choices += [_remove_framework(facts, needs, by_major, m, cmd) for m in sorted(by_major)]
    one_used = len(by_major) == 1 and bool(leftover)
    return Finding(
        kind="mixed-cuda",
        severity="warning" if leftover or not by_major else "info",
        facts=MixedMajors(
            majors={k: sorted(v) for k, v in sorted(majors.items())},
            needed_by={m: list(fs) for m, fs in sorted(by_major.items())},
            pattern=[]
            if by_major
            else cmd.argv("remove", "nvidia-*-cuNN", "--repair", "--dry-run"),
        ),
        owners=sorted(n for v in majors.values() for n in v),
        choices=choices,
        command=cmd.argv(
            "remove",
            *_leftover_selectors(leftover[0], majors[leftover[0]]),
            "--repair",
            "--dry-run",
        )
        if one_used
        else [],
    )


FIX = ("--repair", "--dry-run")
"""How a leftover removal is offered: dry run first, co-owners' files put back."""


def _leftover_selectors(major: int, names: Sequence[str]) -> list[str]:
    """``nvidia-*-cuNN``, and by name the leftovers of that major the glob misses (CUDA 13
    wheels are mostly unsuffixed)."""
    glob = f"nvidia-*-cu{major}"
    rest = [n for n in sorted(names) if not fnmatch.fnmatchcase(n, glob)]
    return rest if len(rest) == len(names) else [glob, *rest]


def _remove_leftovers(major: int, names: Sequence[str], cmd: Commands) -> Choice:
    return Choice(
        action="remove-leftovers",
        majors=[major],
        command=shell_join(
            cmd.argv("remove", *_leftover_selectors(major, names), "--repair", "--dry-run")
        ),
    )


def _remove_framework(
    facts: Facts,
    needs: Needs,
    by_major: Mapping[int, list[DistName]],
    major: int,
    cmd: Commands,
) -> Choice:
    """Remove the frameworks needing ``major`` and that major's libraries, keeping every
    distribution a framework of another major needs (its closure, itself included)."""
    chosen = by_major[major]
    others = [f for f in needs if f not in chosen]
    kept = set(closure(facts, others))
    libs = sorted(
        {n for f in chosen for n in needs[f] if facts.cuda_majors.get(n) in (major, None)} - kept
    )
    removed = [f for f in chosen if f not in kept]
    removed += _dependents(facts, {*removed, *libs}, kept)
    names: list[str] = [*removed, *libs]
    return Choice(
        action="remove-framework",
        majors=[major],
        frameworks=list(removed),
        distributions=names,
        command=shell_join(cmd.argv("remove", *names, "--repair", "--dry-run")) if names else None,
    )


def _dependents(facts: Facts, removing: set[DistName], kept: set[DistName]) -> list[DistName]:
    """What must go with ``removing`` (frameworks and the libraries removed with them) for
    their removal to break nothing: the installed distributions that require them (``jax``,
    whose requested extra ``cuda12`` asks for ``jax-cuda12-plugin``; ``cuda-toolkit``, whose
    extras torch asked for list the cu13 wheels), and those owning objects whose run-time
    loads a removed framework's extra brings (``jax-cuda12-pjrt``); none that ``kept``
    needs."""
    inv: Inventory = facts.inventory
    out = {
        name
        for name in inv.distributions
        if name not in removing | kept and closure(facts, {name}) & removing
    }
    for (obj, _need), row in facts.runtime.rows.items():
        if row.provider in removing:
            out |= {o for o in owners_abs(inv, obj) if o not in removing | kept}
    return sorted(out)


def _mixed_sonames(trees: Iterable[LoadTree]) -> Iterable[Finding]:
    """One process loading two majors of one library (``libcudart.so.12`` and ``.so.13``).

    Each root's whole load tree is one process image: a cu13 consumer that pulls in a
    library built against CUDA 12 shows up here, even though no single object needs both.
    """
    seen: set[tuple[str, ...]] = set()
    for tree in trees:
        stems: dict[str, dict[str, Lookup]] = defaultdict(dict)
        for step in tree.steps:
            m = _SONAME_MAJOR.match(step.need)
            if m and step.provider:
                stems[m.group("stem")].setdefault(step.need, step)
        for needs in stems.values():
            key = tuple(sorted(needs))
            if len(needs) < 2 or key in seen:
                continue
            seen.add(key)
            loads = [
                Load(requester=needs[n].requester, need=n, provider=needs[n].provider or "")
                for n in key
            ]
            yield Finding(
                kind="mixed-cuda",
                severity="warning",
                facts=MixedSonames(root=tree.root, loads=loads),
            )
