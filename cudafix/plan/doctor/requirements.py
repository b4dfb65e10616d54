"""Doctor's requirement findings: unmet Requires-Dist, and what ``repair`` installs for them.

For them and for frameworks' run-time loads.

Pure functions of :class:`~cudafix.plan.facts.Facts` to typed findings.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from packaging.requirements import Requirement

from cudafix.linker.edge import Edge
from cudafix.linker.elfindex import EnvironmentView
from cudafix.linker.linkage import resolve_chains
from cudafix.linker.runtime import RuntimeLoad
from cudafix.model.doctor import Finding, InstallWhy, RequirementUnmet, RunTimeNeed
from cudafix.model.names import DistName, normalize_name
from cudafix.plan.doctor.common import REPAIR, Commands
from cudafix.plan.facts import Facts, load_roots
from cudafix.plan.requirements import (
    MissingRequirement,
    applicable,
    check_requirements,
    extra_requirements,
    unmet,
)
from cudafix.plan.versions import joint


def runtime_installs(facts: Facts, edges: Iterable[Edge] | None = None) -> dict[str, RunTimeNeed]:
    """Requirements to install so that every framework's run-time loads resolve again.

    For each run-time load (``cudafix/data/runtime.toml``) that resolves nowhere, whose
    framework asked for the library through an extra that was installed (some of its
    requirements still are): the unmet requirements of that extra, verbatim but for the
    marker (the exact specifier its metadata asks for). ``edges``: the environment's, if
    already resolved (else the run-time loading objects are resolved here).
    """
    inv = facts.inventory
    if edges is None:
        view = EnvironmentView(inv.prefix, facts.elf, inv.files, system=facts.host)
        roots = [r for r in load_roots(facts) if r.path in facts.runtime.objects]
        alone = sorted(facts.runtime.unrooted)
        edges = resolve_chains(roots, alone, view, facts.search, facts.dlopen).edges.values()
    out: dict[str, RunTimeNeed] = {}
    edges = sorted(edges, key=lambda e: (e.requester, e.need))
    for e in edges:
        row = facts.runtime.row(e.requester, e.need)
        if e.provider is not None or row is None or alternative_found(facts, edges, e):
            continue
        for spec in unmet_specs(facts, row):
            out.setdefault(
                spec, RunTimeNeed(requested_as=row.requested_as, requester=e.requester, need=e.need)
            )
    return out


def alternative_found(facts: Facts, edges: Iterable[Edge], e: Edge) -> bool:
    """Whether a run-time load's alternative (``libcufft.so.12`` for ``.so.11``) resolves."""
    found = {x.need for x in edges if x.requester == e.requester and x.provider is not None}
    return facts.runtime.satisfied_otherwise(e.requester, e.need, found.__contains__)


def unmet_specs(facts: Facts, row: RuntimeLoad) -> list[str]:
    """The unmet requirements of the row's extra (name and specifier, marker dropped), when
    its libraries were installed from wheels; else none."""
    if not was_installed(facts, row):
        return []
    inv = facts.inventory
    reqs = extra_requirements(inv.distributions[row.provider], row.extra, facts.marker_env)
    specs = (f"{r.name}{r.specifier}" for r in reqs if unmet(r, inv.distributions) is not None)
    return list(dict.fromkeys(joint(facts, spec) for spec in specs))


def was_installed(facts: Facts, row: RuntimeLoad) -> bool:
    """Whether the libraries a run-time load wants were installed from wheels: the row's
    extra is requested, or some of its requirements are still met (the rest were removed).
    An extra none of whose wheels is there means the framework uses a system CUDA."""
    inv = facts.inventory
    provider = inv.distributions.get(row.provider)
    if provider is None:
        return False
    if not row.extra or row.extra in facts.extras.get(row.provider, frozenset()):
        return True
    reqs = extra_requirements(provider, row.extra, facts.marker_env)
    return any(unmet(r, inv.distributions) is None for r in reqs)


def requirements(
    facts: Facts,
    cmd: Commands,
    wanted: tuple[MissingRequirement, ...],
    installs: Mapping[str, InstallWhy],
    leftovers: frozenset[DistName],
) -> Iterable[Finding]:
    """Broken Requires-Dist; one that names a distribution not installed at all is fixed by
    installing it as required (``cudafix install NAME==VERSION``, which ``repair`` also does),
    one that ``repair`` installs for a framework's extra (``installs``) by ``repair``. One of
    a CUDA leftover (:func:`cudafix.plan.doctor.cuda.cuda_leftovers`: a stray
    ``nvidia-cudnn-cu12`` in a torch cu13 venv asking for ``nvidia-cublas-cu12``) is mended
    by removing the leftover (with ``--repair`` putting back the files it shares), not by
    installing more of a CUDA major nothing loads. Else no command fixes it: a matching
    version is to be installed by hand, or the distribution removed (``removal``)."""
    missing = {(m.distribution, m.requirement): m for m in wanted}
    repairable = {normalize_name(Requirement(spec).name) for spec in installs}
    asked = _asked_for(facts)
    for p in check_requirements(facts.inventory.distributions, facts.marker_env):
        named = (p.distribution, p.extra)
        if p.extra and named not in asked and not _partly_installed(facts, *named):
            continue
        gone = missing.get((p.distribution, p.requirement))
        command: list[str] = []
        removal: list[str] = []
        if p.distribution in leftovers:
            command = cmd.argv("remove", p.distribution, "--repair", "--dry-run")
        elif gone is not None:
            command = cmd.argv("install", gone.spec, "--dry-run")
        elif normalize_name(Requirement(p.requirement).name) in repairable:
            command = cmd.argv(*REPAIR)
        else:
            removal = cmd.argv("remove", p.distribution, "--dry-run")
        yield Finding(
            kind="requirement",
            severity="error",
            facts=RequirementUnmet(
                requested_as=p.requested_as,
                requirement=p.requirement,
                problem=p.reason,
                removal=removal,
            ),
            distribution=p.distribution,
            command=command,
        )


def _asked_for(facts: Facts) -> set[tuple[DistName, str]]:
    """Extras an installed distribution's base requirements name, and what those extras'
    own requirements name in turn: requested for certain (torch's
    ``cuda-toolkit[cublas,...]``), unlike extras inferred from their requirements being met."""
    dists, env = facts.inventory.distributions, facts.marker_env
    asked: set[tuple[DistName, str]] = set()
    todo: list[tuple[DistName, str]] = [(n, "") for n in dists]
    while todo:
        name, extra = todo.pop()
        for req, which in applicable(dists[name], env, frozenset({extra} - {""})):
            dep = normalize_name(req.name)
            if which != extra or dep not in dists:
                continue
            for x in req.extras:
                key = (dep, normalize_name(x))
                if key not in asked:
                    asked.add(key)
                    todo.append(key)
    return asked


def _partly_installed(facts: Facts, name: DistName, extra: str) -> bool:
    """Whether some requirement of ``name[extra]`` is installed: an extra counted as
    requested only because an inferred one names it, none of whose wheels is there, was
    never installed. A pristine torch cu130 has ``cuda-bindings[all]`` (inferred: its
    requirements are met by version) ask for ``cuda-toolkit[nvvm]``, with no
    ``nvidia-nvvm``: no error."""
    dists = facts.inventory.distributions
    reqs = extra_requirements(dists[name], extra, facts.marker_env)
    return any(unmet(r, dists) is None for r in reqs)
