"""Diagnose an environment that pip or uv may already have broken: typed findings.

Pure: a function of the same :class:`~cudafix.plan.facts.Facts` the planner uses. One module
per family of findings (:mod:`.files`, :mod:`.scripts`, :mod:`.linkage`, :mod:`.cuda`,
:mod:`.requirements`, :mod:`.records`, :mod:`.transactions`), each a function from facts to
:class:`~cudafix.model.doctor.Finding` values that carry what they were found from; the
command line words them (:mod:`cudafix.cli.doctor_words`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from cudafix.env.inventory import Inventory
from cudafix.linker.elfindex import EnvironmentView
from cudafix.linker.linkage import Chains, env_objects, in_env, resolve_chains, to_env_path
from cudafix.model.commands import TargetFlags, shell_join
from cudafix.model.doctor import DoctorReport, Finding, InstallWhy, RequiredBy
from cudafix.model.names import EnvPath
from cudafix.plan.doctor import cuda, files, linkage, records, requirements, scripts, transactions
from cudafix.plan.doctor.common import (
    IMPORT_KINDS,
    REPAIR,
    Commands,
    copies_by_name,
    import_roots,
    loaded_closure,
)
from cudafix.plan.doctor.cuda import cuda_leftovers, framework_cuda_needs
from cudafix.plan.doctor.files import foreign_files, repair_candidates
from cudafix.plan.doctor.requirements import runtime_installs
from cudafix.plan.doctor.scripts import script_problems
from cudafix.plan.facts import Facts, load_roots
from cudafix.plan.gone import exactly_returning, returning_installs, without_returning
from cudafix.plan.requirements import MissingRequirement, missing_requirements
from cudafix.plan.versions import jointly

__all__ = [
    "IMPORT_KINDS",
    "cuda_leftovers",
    "diagnose",
    "foreign_files",
    "framework_cuda_needs",
    "loaded_closure",
    "repair_candidates",
    "runtime_installs",
    "script_problems",
]


def diagnose(facts: Facts, target_flags: TargetFlags = ()) -> DoctorReport:
    """Run every check; the order of findings is the order a person should fix them in.

    ``target_flags`` (``--venv DIR``) is carried into every command a finding offers, so each
    one runs as printed from wherever the user is.
    """
    inv = facts.inventory
    view = EnvironmentView(inv.prefix, facts.elf, inv.files, system=facts.host)
    objects = env_objects(str(inv.prefix), facts.elf)
    chains = resolve_chains(load_roots(facts), objects, view, facts.search, facts.dlopen)
    edges = chains.edges.values()
    loaded = loaded_closure(facts, chains)
    foreign = foreign_files(facts)
    cmd = Commands(target_flags)
    copies = copies_by_name(inv)
    needs = framework_cuda_needs(facts, chains)
    leftovers = cuda_leftovers(facts, needs)
    wanted = jointly(
        facts,
        (
            m
            for m in missing_requirements(inv.distributions, facts.marker_env)
            if m.distribution not in leftovers
        ),
    )
    returning = returning_installs(facts)
    wanted = exactly_returning(wanted, returning)
    installs: dict[str, InstallWhy] = {
        **without_returning(runtime_installs(facts, edges), returning),
        **returning,
    }
    findings = [
        *transactions.pending(facts, cmd),
        *files.missing(inv, cmd),
        *files.clobbered(inv, loaded, cuda.needed_by(needs), cmd),
        *files.foreign_bytes(inv, foreign, cmd),
        *scripts.scripts(facts, cmd),
        *linkage.unresolved(facts, edges, cmd, wanted, copies),
        *cuda.mixed_cuda(facts, chains, needs, cmd),
        *linkage.shadowed(facts, edges, cmd, copies),
        *requirements.requirements(facts, cmd, wanted, installs, leftovers),
        *records.unsafe(inv),
        *records.unreadable(inv),
        *records.bad_elf(facts),
        *records.unmanaged(inv),
    ]
    repair = repair_candidates(facts, foreign)
    install: dict[str, InstallWhy] = {
        m.spec: RequiredBy(distribution=m.distribution) for m in wanted
    }
    return DoctorReport(
        prefix=str(inv.prefix),
        site_packages=list(inv.site_packages),
        distributions=len(inv.distributions),
        elf_objects=len(facts.elf.objects),
        roots=_roots_by_kind(inv, chains),
        imported_objects=len(_imported(facts, chains)),
        findings=findings,
        repair=dict(repair),
        install={**install, **installs},
        target_flags=shell_join(target_flags),
        next_command=_next_command(
            findings, cmd.argv(*_next_words(bool(repair or installs), wanted))
        ),
    )


def _next_command(findings: Sequence[Finding], repairing: list[str]) -> list[str]:
    """The one command to run next: ``recover`` while a transaction is unfinished (what
    else is found may be its half-change); ``repair`` (or ``install``) when it fixes
    errors; else the removal of a leftover CUDA major (it takes the clobbered copies with
    it); else the first problem's own command. Empty when healthy."""
    problems = [f for f in findings if f.severity != "info"]
    if not problems:
        return []
    if recover := [f.command for f in problems if f.kind == "pending-transaction"]:
        return recover[0]
    if repairing:
        return repairing
    mixed = [f.command for f in problems if f.kind == "mixed-cuda" and f.command]
    return next(iter(mixed), next((f.command for f in problems if f.command), []))


def _next_words(repair: bool, wanted: tuple[MissingRequirement, ...]) -> tuple[str, ...]:
    """What to run next: ``install`` when only required distributions are missing (the
    command a person would type), ``repair`` when there is more (it does all of it)."""
    if wanted and not repair:
        return ("install", *sorted({m.spec for m in wanted}), "--dry-run")
    return REPAIR if repair else ()


def _imported(facts: Facts, chains: Chains) -> set[EnvPath]:
    """The environment's ELF objects that extension modules and run-time loads load."""
    prefix = str(facts.inventory.prefix)
    loaded = {o for r in import_roots(chains) for o in chains.loaded[r.path]}
    paths = (to_env_path(prefix, o) for o in loaded)
    return {p for p in paths if p is not None and p in facts.elf.objects}


def _roots_by_kind(inv: Inventory, chains: Chains) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for root in chains.roots:
        out[root.kind].append(in_env(str(inv.prefix), root.path))
    return dict(out)
