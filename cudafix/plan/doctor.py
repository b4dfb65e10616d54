"""Diagnose an environment that pip or uv may already have broken.

Pure: a function of the same :class:`~cudafix.plan.planner.Facts` the planner uses. Each finding
says what is wrong, where, and the next command.
"""

from __future__ import annotations

import functools
import re
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping
from importlib import resources
from typing import Literal

from pydantic import BaseModel, ConfigDict

from cudafix.env.inventory import Inventory, SharedPath
from cudafix.linker.elfindex import EnvironmentView
from cudafix.linker.linkage import Edge, edges_of, env_roots, resolve_trees, to_env_path
from cudafix.linker.loader import LoadTree, Step
from cudafix.model.names import DistName, EnvPath, normalize_name, site_relative
from cudafix.plan.facts import Facts
from cudafix.plan.requirements import check_requirements

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

DOCTOR_SCHEMA_VERSION = 1
_CUDA_SUFFIX = re.compile(r"-cu(\d+)$")
_SONAME_MAJOR = re.compile(r"^(?P<stem>.+\.so)\.(?P<major>\d+)")

Severity = Literal["error", "warning", "info"]


class Finding(BaseModel):
    """One problem, with where it is and what to do next."""

    model_config = ConfigDict(frozen=True)

    kind: str
    """``missing-files``, ``clobbered``, ``shared``, ``unresolved``, ``mixed-cuda``, ``shadowed``,
    ``requirement``, ``unsafe-record``, ``unmanaged``, ``bad-elf``."""
    severity: Severity
    message: str
    details: list[str] = []
    hint: str | None = None
    distribution: str | None = None


class DoctorReport(BaseModel):
    """Every finding for one environment (``cudafix doctor --json``)."""

    model_config = ConfigDict(frozen=True)

    schema_version: int = DOCTOR_SCHEMA_VERSION
    prefix: str
    distributions: int
    elf_objects: int
    findings: list[Finding]
    repair: dict[str, str]
    """Distributions ``cudafix repair`` would reinstall, with the reason."""

    @property
    def healthy(self) -> bool:
        return not any(f.severity != "info" for f in self.findings)


def diagnose(facts: Facts) -> DoctorReport:
    """Run every check; the order of findings is the order a person should fix them in."""
    inv = facts.inventory
    view = EnvironmentView(inv.prefix, facts.elf, inv.files)
    roots = env_roots(str(inv.prefix), facts.elf)
    trees = resolve_trees(roots, view, facts.search, facts.dlopen)
    edges = edges_of(trees.values())
    findings = [
        *_missing(inv),
        *_clobbered(inv),
        *_unresolved(inv, edges.values(), imported_objects(trees.values())),
        *_mixed_cuda(inv, trees.values()),
        *_shadowed(inv, edges.values()),
        *_requirements(facts),
        *_unsafe(inv),
        *_bad_elf(facts),
        *_unmanaged(inv),
    ]
    return DoctorReport(
        prefix=str(inv.prefix),
        distributions=len(inv.distributions),
        elf_objects=len(facts.elf.objects),
        findings=findings,
        repair={n: r for n, r in repair_candidates(inv).items()},
    )


def repair_candidates(inv: Inventory) -> dict[DistName, str]:
    """Distributions to reinstall so that every missing RECORD file comes back, fewest first.

    A missing path claimed by several distributions needs only one of them reinstalled;
    reinstalling every claimant would clobber them in turn. Clobbered co-owners whose files
    are all present are not candidates: the fix there is removing one of them
    (``cudafix remove X --repair``).
    """
    covered: set[str] = set()
    chosen: dict[DistName, str] = {}
    by_need = sorted(inv.missing.items(), key=lambda item: (-len(item[1]), item[0]))
    for name, paths in by_need:
        fresh = [p for p in paths if p not in covered]
        if fresh:
            chosen[name] = f"{len(paths)} file(s) from its RECORD are missing"
            covered.update(paths)
    return dict(sorted(chosen.items()))


def _missing(inv: Inventory) -> Iterable[Finding]:
    for name, paths in sorted(inv.missing.items()):
        if not paths:
            continue
        dist = inv.distributions[name]
        yield Finding(
            kind="missing-files",
            severity="error",
            distribution=name,
            message=f"{name} {dist.version} is installed but {len(paths)} of its files are missing",
            details=[_show(inv, p) for p in paths],
            hint=f"cudafix repair  (reinstalls {name}=={dist.version})",
        )


def _clobbered(inv: Inventory) -> Iterable[Finding]:
    """Shared paths, grouped by owners; a warning where the owners' bytes differ.

    Paths whose bytes every owner's RECORD matches (the empty ``nvidia/__init__.py`` of
    every nvidia wheel) are reported as info: uninstalling one owner still deletes them.
    """
    groups: dict[tuple[DistName, ...], list[SharedPath]] = defaultdict(list)
    for s in inv.shared:
        groups[s.owners].append(s)
    for owners, paths in sorted(groups.items()):
        differ = any(not s.missing and len(s.matching) < len(owners) for s in paths)
        yield Finding(
            kind="clobbered" if differ else "shared",
            severity="warning" if differ else "info",
            message=f"{len(paths)} path(s) are claimed by {' and '.join(owners)}",
            details=[f"{_show(inv, s.path)}: {_holds(s)}" for s in paths],
            hint=(
                "uninstalling any one of them with pip or uv deletes these files for all; "
                f"remove one with `cudafix remove {owners[-1]} --repair --dry-run`"
            ),
        )


def _holds(s: SharedPath) -> str:
    if s.missing:
        return "missing"
    if len(s.matching) > 1:
        return "identical bytes in " + ", ".join(s.matching)
    return f"holds {s.holder}'s bytes" if s.holder else "holds bytes no owner's RECORD matches"


def _unresolved(
    inv: Inventory, edges: Iterable[Edge], imported: frozenset[str]
) -> Iterable[Finding]:
    """Needs nothing provides, graded by what breaks.

    An error when the file should be there (a RECORD claims it) or when an extension
    module's load tree needs it (an import fails). Information when a driver or optional
    system stack provides it, or when no extension module loads the object that needs it
    (plugins and optional transports are only loaded on demand).
    """
    prefix = str(inv.prefix)
    system = provided_by_system()
    for e in sorted(edges, key=lambda e: (e.requester, e.need)):
        if e.provider is not None:
            continue
        rel = to_env_path(prefix, e.requester)
        owner = inv.owners.get(rel, ()) if rel else ()
        claimants = _claimants(inv, e.need)
        severity: Severity = "error" if claimants or e.requester in imported else "info"
        why = ""
        if not claimants and e.need in system:
            severity, why = "info", f"; {e.need} comes from {system[e.need]}, not from a wheel"
        elif severity == "info":
            why = "; no extension module loads it, so nothing fails until something does"
        yield Finding(
            kind="unresolved",
            severity=severity,
            distribution=owner[0] if owner else None,
            message=(
                f"{_show_abs(inv, e.requester)} ({', '.join(owner) or 'no distribution'}) "
                f"needs {e.need}, which is not found{why}"
            ),
            details=[f"searched {_show_abs(inv, d)}" for d in dict.fromkeys(e.searched)][:8]
            + [f"{e.need} is in the RECORD of {c}, but missing on disk" for c in claimants],
            hint="cudafix repair"
            if claimants
            else f"install the distribution that provides {e.need}",
        )


@functools.cache
def provided_by_system() -> Mapping[str, str]:
    """Shipped table (``cudafix/data/system.toml``): soname -> what provides it."""
    text = resources.files("cudafix").joinpath("data/system.toml").read_text()
    table = tomllib.loads(text).get("provided-by", {})
    return {str(k): str(v) for k, v in table.items()}


_EXTENSION = re.compile(r"\.(cpython-[^/]*|abi3)\.so$")


def imported_objects(trees: Iterable[LoadTree]) -> frozenset[str]:
    """Every object in the load tree of a Python extension module: what ``import`` maps."""
    return frozenset(obj for tree in trees if _EXTENSION.search(tree.root) for obj in tree.objects)


def _claimants(inv: Inventory, soname: str) -> list[str]:
    """Distributions whose RECORD lists a missing file named like ``soname``."""
    return sorted(
        {n for n, paths in inv.missing.items() for p in paths if p.rsplit("/", 1)[-1] == soname}
    )


def _mixed_cuda(inv: Inventory, trees: Iterable[LoadTree]) -> Iterable[Finding]:
    majors: dict[str, list[str]] = defaultdict(list)
    for name in inv.distributions:
        m = _CUDA_SUFFIX.search(name)
        if m:
            majors[m.group(1)].append(name)
    if len(majors) > 1:
        yield Finding(
            kind="mixed-cuda",
            severity="warning",
            message="distributions for more than one CUDA major are installed: "
            + "; ".join(f"cu{k}: {len(v)}" for k, v in sorted(majors.items())),
            details=[f"cu{k}: {', '.join(sorted(v))}" for k, v in sorted(majors.items())],
            hint="remove the leftovers of the major you do not use, e.g. "
            f"`cudafix remove 'nvidia-*-cu{min(majors)}' --dry-run`",
        )
    yield from _mixed_sonames(inv, trees)


def _mixed_sonames(inv: Inventory, trees: Iterable[LoadTree]) -> Iterable[Finding]:
    """One process loading two majors of one library (``libcudart.so.12`` and ``.so.13``).

    Each root's whole load tree is one process image: a cu13 consumer that pulls in a
    library built against CUDA 12 shows up here, even though no single object needs both.
    """
    seen: set[tuple[str, ...]] = set()
    for tree in trees:
        stems: dict[str, dict[str, Step]] = defaultdict(dict)
        for step in tree.steps:
            m = _SONAME_MAJOR.match(step.need)
            if m and step.provider:
                stems[m.group("stem")].setdefault(step.need, step)
        for needs in stems.values():
            key = tuple(sorted(needs))
            if len(needs) < 2 or key in seen:
                continue
            seen.add(key)
            yield Finding(
                kind="mixed-cuda",
                severity="warning",
                message=f"loading {_show_abs(inv, tree.root)} maps {' and '.join(key)}",
                details=[
                    f"{_show_abs(inv, needs[n].requester)} needs {n} "
                    f"({_show_abs(inv, needs[n].provider or '')})"
                    for n in key
                ],
                hint="two majors of one library in one process: one of them is a leftover build",
            )


def _shadowed(inv: Inventory, edges: Iterable[Edge]) -> Iterable[Finding]:
    providers: dict[str, set[str]] = defaultdict(set)
    for path in inv.files:
        name = path.rsplit("/", 1)[-1]
        if ".so" in name:
            providers[name].add(path)
    chosen: dict[str, dict[str, list[Edge]]] = defaultdict(lambda: defaultdict(list))
    for e in edges:
        if e.provider and len(providers.get(e.need, ())) > 1:
            chosen[e.need][e.provider].append(e)
    for need, picks in sorted(chosen.items()):
        places = sorted(providers[need])
        details = [
            f"{p} ({', '.join(inv.owners.get(EnvPath(p), ())) or 'unowned'})" for p in places
        ]
        for provider, uses in sorted(picks.items()):
            first = uses[0]
            details.append(
                f"{_show_abs(inv, first.requester)} gets {_show_abs(inv, provider)} via {first.how}"
                f" (searched first: {', '.join(first.searched[:3])})"
            )
        yield Finding(
            kind="shadowed",
            severity="warning",
            message=f"{need} is provided at {len(places)} places;"
            " each consumer gets the first on its search path",
            details=details,
            hint="remove the provider you do not want, e.g. with `cudafix remove NAME --dry-run`",
        )


def _requirements(facts: Facts) -> Iterable[Finding]:
    for p in check_requirements(facts.inventory.distributions, facts.marker_env):
        yield Finding(
            kind="requirement",
            severity="error",
            distribution=p.distribution,
            message=f"{p.distribution} requires {p.requirement}: {p.reason}",
            hint=f"install a matching version, or `cudafix remove {p.distribution} --dry-run`",
        )


def _unsafe(inv: Inventory) -> Iterable[Finding]:
    for u in inv.unsafe:
        yield Finding(
            kind="unsafe-record",
            severity="warning",
            distribution=u.distribution,
            message=f"{u.distribution}'s RECORD lists {u.raw!r}: {u.reason};"
            " cudafix will not act on it",
            hint="inspect that RECORD by hand; cudafix refuses to remove this distribution",
        )


def _bad_elf(facts: Facts) -> Iterable[Finding]:
    for path, problem in sorted(facts.elf.problems.items()):
        yield Finding(
            kind="bad-elf",
            severity="info",
            message=f"{_show(facts.inventory, path)}: {problem.reason} ({problem.detail})",
        )
    elf_class, machine = facts.elf.expected
    for path in sorted(facts.elf.foreign):
        info = facts.elf.objects[path]
        yield Finding(
            kind="bad-elf",
            severity="info",
            message=f"{_show(facts.inventory, path)}: built for {info.machine} "
            f"(ELF{info.elf_class}), this interpreter loads {machine} (ELF{elf_class})",
        )


def _unmanaged(inv: Inventory) -> Iterable[Finding]:
    for u in inv.unmanaged:
        yield Finding(
            kind="unmanaged",
            severity="info",
            message=f"{normalize_name(u.name)} at {u.path} is a {u.kind} install;"
            " cudafix does not plan for it",
        )


def _show(inv: Inventory, path: str) -> str:
    return site_relative(path, inv.site_packages)


def _show_abs(inv: Inventory, path: str) -> str:
    return site_relative(path, inv.site_packages, str(inv.prefix))
