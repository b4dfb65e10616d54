"""Doctor's linkage findings: needs nothing provides, and sonames with several copies.

Needs of objects and of frameworks' run-time loads, graded by what breaks; copies graded
by whether a search path puts them side by side.

Pure functions of :class:`~cudafix.plan.facts.Facts` and the resolved edges to typed
findings. Host libraries are looked up through the facts' host view (``facts.host``).
"""

from __future__ import annotations

import posixpath
from collections import defaultdict
from collections.abc import Iterable

from cudafix.env.inventory import Inventory, is_bytecode
from cudafix.env.lastseen import Seen
from cudafix.linker.bypath import partly_provided, stack_absent
from cudafix.linker.edge import Edge
from cudafix.linker.linkage import in_env, to_env_path
from cudafix.linker.loader import expand_entry
from cudafix.linker.runtime import RuntimeLoad
from cudafix.model.doctor import (
    Copy,
    DuplicateSoname,
    Finding,
    Provided,
    RunTimeUnresolved,
    Severity,
    Shadowed,
    Unresolved,
)
from cudafix.model.names import DistName, EnvPath
from cudafix.plan.doctor.common import (
    REPAIR,
    Commands,
    Copies,
    closure,
    owners_abs,
)
from cudafix.plan.doctor.requirements import alternative_found, unmet_specs, was_installed
from cudafix.plan.facts import Facts
from cudafix.plan.gone import gone_libraries, pin
from cudafix.plan.literals import named_after
from cudafix.plan.requirements import MissingRequirement
from cudafix.plan.wants import Wants


def unresolved(
    facts: Facts,
    edges: Iterable[Edge],
    cmd: Commands,
    wanted: tuple[MissingRequirement, ...],
    copies: Copies,
) -> Iterable[Finding]:
    """Needs nothing provides, graded by what breaks.

    Each need is judged on the chains that really load its object (``Edge.chains``): an
    error when every one of them fails it (an import, a tool or a run-time load fails), or
    when the file should be there (a RECORD claims it: ``repair`` reinstalls its claimants).
    Information when a driver or optional system stack provides it, or when nothing loads
    the object (plugins and optional transports are loaded on demand): then it was judged on
    its own tree. A framework's run-time load is judged by :func:`_run_time_unresolved`.
    When the consumer's distribution requires one that is not installed, installing that is
    the fix; with no command, the copies the venv holds off the search path are listed
    (``copies``: :func:`~cudafix.plan.doctor.common.copies_by_name`).
    """
    inv = facts.inventory
    system = facts.host.provided_by_system()
    elsewhere = copies
    searched = _Searched(str(inv.prefix))
    edges = sorted(edges, key=lambda e: (e.requester, e.need))
    wants = Wants(inv, facts.marker_env, facts.extras)
    broken = _gone_by_requirement(facts, edges, wants)
    absent = _stack_absent(facts, edges, wants)
    gone = gone_libraries(facts)
    for e in edges:
        if e.provider is not None:
            continue
        row = facts.runtime.row(e.requester, e.need)
        if row is not None:
            if not alternative_found(facts, edges, e):
                yield _run_time_unresolved(facts, e, row, cmd, gone.get(e.need))
            continue
        rel = searched.env_path(e.requester)
        owner = list(inv.owners.get(rel, ())) if rel else []
        claimants = _claimants(inv, e.need)
        severity: Severity = "error" if claimants or e.chains else "info"
        command = _install_argv(cmd, wanted, owner) if not claimants else cmd.argv(*REPAIR)
        optional = facts.runtime.optional.get(e.requester)
        seen = None if claimants else gone.get(e.need)
        host = system.get(e.need) if not claimants and seen is None else None
        optional_for = None
        partly = stack_absent = False
        if seen is not None:
            severity, command = "error", cmd.argv(*REPAIR)
        elif host is not None:
            severity, command = "info", []
        elif not claimants and optional is not None:
            severity, optional_for = "info", optional.framework
        elif not claimants and (e.requester, e.need) in absent:
            severity, stack_absent = "info", True
        elif severity == "info" and (e.requester, e.need) in broken:
            severity, partly = "error", True
        off_path = elsewhere.get(e.need, []) if host is None and not command else []
        first = searched.first(e)
        dirs = list(dict.fromkeys(e.searched))
        yield Finding(
            kind="unresolved",
            severity=severity,
            facts=Unresolved(
                requester=e.requester,
                requester_owners=owner,
                chains=e.chains,
                root=e.root,
                searched=[] if first else dirs,
                searched_as=first,
                searched_count=len(dirs),
                system=host,
                optional_for=optional_for,
                elsewhere=[
                    Copy(path=p, owners=list(inv.owners.get(p, ()))) for p in sorted(off_path)
                ],
                gone=None
                if seen is None
                else Provided(path=seen.path, distribution=seen.distribution, version=seen.version),
                partly_provided=partly,
                stack_absent=stack_absent,
            ),
            distribution=owner[0] if owner else None,
            consumer=rel or e.requester,
            need=e.need,
            owners=[seen.distribution] if seen is not None else claimants,
            command=command,
        )


def _gone_by_requirement(
    facts: Facts, edges: list[Edge], wants: Wants
) -> frozenset[tuple[str, str]]:
    """The needs nothing provides of objects no chain loads that are broken, not optional.

    Such an object some of whose needs the environment provides (:func:`partly_provided`)
    was built for a stack that is here. Which of its other needs are gone, rather than a
    stack never installed (onnxruntime's TensorRT provider beside its CUDA one; cuTENSOR's
    NCCL-based ``libcutensorMp``), its distribution's requirements say when it declares any:
    those named after a requirement they should bring and do not (:class:`Wants`; a plain
    uninstall took it). One that declares none leaves the rule alone to say: all of them.
    """
    inv = facts.inventory
    partly = partly_provided(edges, str(inv.prefix), lambda p: _owner(inv, p))
    out: set[tuple[str, str]] = set()
    for e in edges:
        if e.provider is not None or e.requester not in partly:
            continue
        dist = (
            inv.distributions.get(DistName(owner)) if (owner := _owner(inv, e.requester)) else None
        )
        if dist is None or not dist.requires or _taken(inv, wants, e):
            out.add((e.requester, e.need))
    return frozenset(out)


def _stack_absent(facts: Facts, edges: list[Edge], wants: Wants) -> frozenset[tuple[str, str]]:
    """The needs nothing provides of objects built for a stack that is not installed
    (:func:`stack_absent`) that nothing loads, or whose loads start at the object itself (an
    extension module binding an optional library: cupy's cuTENSOR module, imported inside a
    ``try``); unless a requirement their distribution should bring and does not is named
    after the need (a plain uninstall took it, as for a partly provided one). A library an
    extension module loads in turn fails that import: an error, as before.
    """
    inv = facts.inventory
    absent = stack_absent(edges, str(inv.prefix), lambda p: _owner(inv, p))
    out: set[tuple[str, str]] = set()
    for e in edges:
        if e.provider is not None or e.requester not in absent:
            continue
        if e.chains and e.root != e.requester:
            continue  # loaded through another object (an import that fails): not a binding
        if not _taken(inv, wants, e):
            out.add((e.requester, e.need))
    return frozenset(out)


def _owner(inv: Inventory, path: str) -> str | None:
    """The first distribution owning an absolute path (None: unowned)."""
    return next(iter(owners_abs(inv, path)), None)


def _taken(inv: Inventory, wants: Wants, e: Edge) -> bool:
    """Whether an unmet requirement the requester's distribution should bring (its walk, or
    a requirer's) is named after the need: a plain uninstall took it."""
    owner = _owner(inv, e.requester)
    if owner is None or owner not in inv.distributions:
        return False
    return any(named_after(req.name, e.need) for _, _, req in wants.brings(DistName(owner)).unmet)


def _install_argv(
    cmd: Commands, wanted: tuple[MissingRequirement, ...], owners: Iterable[str]
) -> list[str]:
    """Installing what the consumer's distribution requires and lacks, as required."""
    specs = sorted({m.spec for m in wanted if m.distribution in set(owners)})
    return cmd.argv("install", *specs, "--dry-run") if specs else []


def _run_time_unresolved(
    facts: Facts, e: Edge, row: RuntimeLoad, cmd: Commands, seen: Seen | None
) -> Finding:
    """A framework's run-time load that resolves nowhere: an error when its libraries were
    installed from wheels (the GPU backend fails when it loads them), else information;
    ``repair`` installs what provided it at the last reading (``seen``), else the unmet
    requirements of the framework's extra."""
    inv = facts.inventory
    owner = owners_abs(inv, e.requester)
    mine = (
        [pin(seen)] if seen is not None and was_installed(facts, row) else unmet_specs(facts, row)
    )
    installed = was_installed(facts, row)
    return Finding(
        kind="unresolved",
        severity="error" if installed else "info",
        facts=RunTimeUnresolved(
            requester=e.requester,
            requester_owners=owner,
            requested_as=row.requested_as,
            installed=installed,
            searched=list(dict.fromkeys(e.searched)),
            evidence=row.source,
            specs=mine,
        ),
        distribution=owner[0] if owner else None,
        consumer=in_env(str(inv.prefix), e.requester),
        need=e.need,
        owners=[row.framework],
        command=cmd.argv(*REPAIR) if mine else [],
    )


class _Searched:
    """Which earlier need of the same object was searched in the same directories.

    Every need of one object that nothing provides was searched in the same directories
    (its RPATH chain, RUNPATH, the defaults); listing them again for each need would make
    the report objects x needs x directories long, where the input is objects x (needs +
    directories). Later needs of the same object refer back to the first.
    """

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix
        self._first: dict[str, tuple[str, tuple[str, ...]]] = {}
        self._env: dict[str, EnvPath | None] = {}

    def first(self, e: Edge) -> str | None:
        """The earlier need searched in the same directories (None: this one lists them)."""
        first = self._first.setdefault(e.requester, (e.need, e.searched))
        need, dirs = first
        if need != e.need and (dirs is e.searched or dirs == e.searched):
            return need
        return None

    def env_path(self, path: str) -> EnvPath | None:
        """:func:`to_env_path`, memoised: the same objects recur per need."""
        if path not in self._env:
            self._env[path] = to_env_path(self._prefix, path)
        return self._env[path]


def _claimants(inv: Inventory, soname: str) -> list[str]:
    """Distributions whose RECORD lists a missing file named like ``soname``."""
    return sorted(
        {n for n, paths in inv.missing.items() for p in paths if p.rsplit("/", 1)[-1] == soname}
    )


def shadowed(
    facts: Facts, edges: Iterable[Edge], cmd: Commands, copies: Copies
) -> Iterable[Finding]:
    """Sonames with several copies in the venv, graded by whether any search competes.

    A warning only where one consumer's own search path (the directories ld.so walks for it)
    holds two copies and the one it gets is not from its requirement closure, or is of
    another CUDA major than that closure: a cu13 torch finding a leftover cu12
    ``libcusparseLt.so.0`` first; removing that copy's distribution is the fix. Copies no
    search path puts side by side (triton's ``cupti``, which triton loads by full path) are
    information. ``copies``: :func:`~cudafix.plan.doctor.common.copies_by_name`.
    """
    inv = facts.inventory
    prefix = str(inv.prefix)
    absolute = {name: {f"{prefix}/{p}" for p in paths} for name, paths in copies.items()}
    by_need: dict[str, list[tuple[Edge, list[str]]]] = defaultdict(list)
    for e in edges:
        if e.provider is None or len(absolute.get(e.need, ())) < 2:
            continue
        dirs = _search_dirs(facts, e)
        competing = sorted(c for c in absolute[e.need] if posixpath.dirname(c) in dirs)
        by_need[e.need].append((e, competing))
    for need, uses in sorted(by_need.items()):
        places = sorted(absolute[need])
        contested = [(e, c) for e, c in uses if len(c) > 1]
        listing = [Copy(path=p, owners=owners_abs(inv, p)) for p in places]
        if not contested:
            yield Finding(
                kind="duplicate-soname",
                severity="info",
                facts=DuplicateSoname(copies=listing),
                need=need,
                paths=[in_env(prefix, p) for p in places],
            )
            continue
        wrong = [(e, c) for e, c in contested if _wrong_pick(facts, e)]
        for e, competing in wrong or contested[:1]:
            provider = e.provider or ""
            unwanted = next(iter(owners_abs(inv, provider)), "NAME")
            # --repair when the copy's distribution shares paths: removing it bare is refused
            shares = any(unwanted in c.owners and not is_bytecode(c.path) for c in inv.shared)
            words = [unwanted, *(["--repair"] if shares else []), "--dry-run"]
            yield Finding(
                kind="shadowed",
                severity="warning" if wrong else "info",
                facts=Shadowed(
                    requester=e.requester,
                    found=provider,
                    found_owners=owners_abs(inv, provider),
                    competing=len(competing),
                    wrong=bool(wrong),
                    copies=listing,
                    searched=list(e.searched),
                    removes=unwanted,
                    repairs_shared=shares,
                ),
                distribution=next(iter(owners_abs(inv, e.requester)), None),
                consumer=in_env(prefix, e.requester),
                need=need,
                provider=in_env(prefix, e.provider or ""),
                paths=[in_env(prefix, p) for p in competing],
                owners=sorted({o for p in competing for o in owners_abs(inv, p)}),
                command=cmd.argv("remove", *words) if wrong else [],
            )


def _search_dirs(facts: Facts, e: Edge) -> set[str]:
    """The directories ld.so walks for ``e``'s requester: what it searched up to the hit,
    and the rest of the requester's own RPATH/RUNPATH (the hit may shadow a later copy)."""
    dirs = set(e.searched)
    rel = to_env_path(str(facts.inventory.prefix), e.requester)
    info = facts.elf.objects.get(rel) if rel else None
    if info is not None:
        origin = posixpath.dirname(e.requester)
        for entry in (*info.effective_rpath, *info.runpath):
            expanded = expand_entry(entry, origin, facts.search)
            if expanded is not None:
                dirs.add(posixpath.normpath(expanded))
    dirs.update(facts.search.ld_library_path)
    return dirs


def _wrong_pick(facts: Facts, e: Edge) -> bool:
    """The copy ``e`` gets is outside its requester's requirement closure or CUDA major."""
    inv = facts.inventory
    consumers = owners_abs(inv, e.requester)
    providers = owners_abs(inv, e.provider or "")
    if not consumers or not providers:
        return False
    held = closure(facts, consumers)
    known = facts.cuda_majors
    majors = {m for n in held if (m := known.get(n)) is not None}
    if not any(p in held for p in providers):
        return True
    return bool(majors) and any(
        (m := known.get(p)) is not None and m not in majors for p in providers
    )
