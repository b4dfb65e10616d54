"""Diagnose an environment that pip or uv may already have broken.

Pure: a function of the same :class:`~cudafix.plan.planner.Facts` the planner uses. Each finding
says what is wrong, where, and the next command.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypedDict

from packaging.requirements import Requirement

from cudafix.env.inventory import CoOwnedPath, Inventory, is_bytecode
from cudafix.linker.bypath import partly_provided
from cudafix.linker.elfindex import EnvironmentView
from cudafix.linker.hostdeps import provided_by_system
from cudafix.linker.linkage import (
    Chains,
    Edge,
    Root,
    RootKind,
    env_objects,
    in_env,
    resolve_chains,
    to_env_path,
)
from cudafix.linker.loader import LoadTree, Step, expand_entry
from cudafix.linker.runtime import RuntimeLoad
from cudafix.model import reasons as R
from cudafix.model.commands import TargetFlags, cudafix_argv, shell_join
from cudafix.model.doctor import Choice, DoctorReport, Finding, Severity
from cudafix.model.names import DistName, EnvPath, normalize_name, site_relative
from cudafix.model.wording import reinstall_text
from cudafix.plan.facts import Facts, Mismatches, load_roots
from cudafix.plan.gone import gone_libraries, pin, returning_installs
from cudafix.plan.requirements import (
    MissingRequirement,
    applicable,
    check_requirements,
    extra_requirements,
    missing_requirements,
    requirement_closure,
    unmet,
)
from cudafix.plan.versions import joint, jointly

_SONAME_MAJOR = re.compile(r"^(?P<stem>.+\.so)\.(?P<major>\d+)")

IMPORT_KINDS: tuple[RootKind, ...] = ("extension", "run-time")
"""Roots whose chains are what the environment is for (executables are tools it ships)."""


def diagnose(facts: Facts, target_flags: TargetFlags = ()) -> DoctorReport:
    """Run every check; the order of findings is the order a person should fix them in.

    ``target_flags`` (``--venv DIR``) is carried into every printed command, so each one
    runs as printed from wherever the user is.
    """
    inv = facts.inventory
    view = EnvironmentView(inv.prefix, facts.elf, inv.files)
    objects = env_objects(str(inv.prefix), facts.elf)
    chains = resolve_chains(load_roots(facts), objects, view, facts.search, facts.dlopen)
    loaded = loaded_closure(facts, chains)
    foreign = foreign_files(facts)
    cmd = _Commands(target_flags)
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
    installs = {**runtime_installs(facts, chains.edges.values()), **returning_installs(facts)}
    findings = [
        *_missing(inv, cmd),
        *_clobbered(inv, loaded, _needed_by(needs), cmd),
        *_foreign_bytes(inv, foreign, cmd),
        *_scripts(inv, facts, cmd),
        *_unresolved(inv, chains.edges.values(), cmd, facts, wanted),
        *_mixed_cuda(facts, chains, needs, cmd),
        *_shadowed(facts, chains.edges.values(), cmd),
        *_requirements(facts, cmd, wanted, installs, leftovers),
        *_unsafe(inv),
        *_unreadable(inv),
        *_bad_elf(facts),
        *_unmanaged(inv),
    ]
    repair = repair_candidates(facts, foreign)
    install = {m.spec: f"required by {m.distribution}" for m in wanted}
    return DoctorReport(
        prefix=str(inv.prefix),
        distributions=len(inv.distributions),
        elf_objects=len(facts.elf.objects),
        roots=_roots_by_kind(inv, chains),
        imported_objects=len(_imported(facts, chains)),
        findings=findings,
        repair={n: reinstall_text(r, inv.site_packages) for n, r in repair.items()},
        install={**install, **installs},
        target_flags=shell_join(target_flags),
        next_command=_next_command(
            findings, cmd.argv(*_next_words(bool(repair or installs), wanted))
        ),
    )


def _next_command(findings: Sequence[Finding], repairing: list[str]) -> list[str]:
    """The one command to run next: ``repair`` (or ``install``) when it fixes errors; else
    the removal of a leftover CUDA major (it takes the clobbered copies with it); else the
    first problem's own command. Empty when healthy."""
    problems = [f for f in findings if f.severity != "info"]
    if not problems:
        return []
    if repairing:
        return repairing
    mixed = [f.command for f in problems if f.kind == "mixed-cuda" and f.command]
    return next(iter(mixed), next((f.command for f in problems if f.command), []))


def _next_words(repair: bool, wanted: tuple[MissingRequirement, ...]) -> tuple[str, ...]:
    """What to run next: ``install`` when only required distributions are missing (the
    command a person would type), ``repair`` when there is more (it does all of it)."""
    if wanted and not repair:
        return ("install", *sorted({m.spec for m in wanted}), "--dry-run")
    return ("repair", "--dry-run") if repair else ()


def _imported(facts: Facts, chains: Chains) -> set[EnvPath]:
    """The environment's ELF objects that extension modules and run-time loads load."""
    prefix = str(facts.inventory.prefix)
    loaded = {o for r in _import_roots(chains) for o in chains.loaded[r.path]}
    paths = (to_env_path(prefix, o) for o in loaded)
    return {p for p in paths if p is not None and p in facts.elf.objects}


def _roots_by_kind(inv: Inventory, chains: Chains) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for root in chains.roots:
        out[root.kind].append(in_env(str(inv.prefix), root.path))
    return dict(out)


@dataclass(frozen=True)
class _Commands:
    """Commands as the report prints them: with the user's target flags, runnable as is."""

    flags: TargetFlags

    def argv(self, *words: str) -> list[str]:
        """``cudafix WORDS... --venv DIR``, or nothing for no words."""
        return cudafix_argv(*words, target=self.flags) if words else []

    def __call__(self, *words: str) -> str:
        return shell_join(self.argv(*words))


def repair_candidates(
    facts: Facts, foreign: Mapping[DistName, list[tuple[EnvPath, str]]] | None = None
) -> dict[DistName, R.ReinstallWhy]:
    """Distributions to reinstall so that every missing RECORD file comes back, fewest first,
    and those whose own (unshared) files hold another build's bytes.

    A missing path claimed by several distributions needs only one of them reinstalled;
    reinstalling every claimant would clobber them in turn. Clobbered co-owners whose files
    are all present are not candidates: the fix there is removing one of them
    (``cudafix remove X --repair``). ``foreign``: :func:`foreign_files`, if already known.
    """
    inv = facts.inventory
    covered: set[str] = set()
    chosen: dict[DistName, R.ReinstallWhy] = {}
    by_need = sorted(inv.missing.items(), key=lambda item: (-len(item[1]), item[0]))
    for name, paths in by_need:
        fresh = [p for p in paths if p not in covered]
        if fresh:
            chosen[name] = R.MissingFiles(subject=name, count=len(paths))
            covered.update(paths)
    for name, wrong in (foreign_files(facts) if foreign is None else foreign).items():
        chosen.setdefault(name, R.ForeignOwnFiles(subject=name, count=len(wrong)))
    for name, scripts in script_problems(facts)[1].items():
        chosen.setdefault(name, R.StaleScripts(subject=name, count=len(scripts)))
    return dict(sorted(chosen.items()))


def runtime_installs(facts: Facts, edges: Iterable[Edge] | None = None) -> dict[str, str]:
    """Requirements to install so that every framework's run-time loads resolve again.

    For each run-time load (``cudafix/data/runtime.toml``) that resolves nowhere, whose
    framework asked for the library through an extra that was installed (some of its
    requirements still are): the unmet requirements of that extra, verbatim but for the
    marker (the exact specifier its metadata asks for). ``edges``: the environment's, if
    already resolved (else the run-time loading objects are resolved here).
    """
    inv = facts.inventory
    if edges is None:
        view = EnvironmentView(inv.prefix, facts.elf, inv.files)
        roots = [r for r in load_roots(facts) if r.path in facts.runtime.objects]
        edges = resolve_chains(roots, (), view, facts.search, facts.dlopen).edges.values()
    out: dict[str, str] = {}
    for e in sorted(edges, key=lambda e: (e.requester, e.need)):
        row = facts.runtime.row(e.requester, e.need)
        if e.provider is not None or row is None:
            continue
        for spec in _unmet_specs(facts, row):
            out.setdefault(
                spec,
                f"{row.requested_as} requires it; {_show(inv, e.requester)} loads "
                f"{_show(inv, e.need)} at run time",
            )
    return out


def _unmet_specs(facts: Facts, row: RuntimeLoad) -> list[str]:
    """The unmet requirements of the row's extra (name and specifier, marker dropped), when
    its libraries were installed from wheels; else none."""
    if not _was_installed(facts, row):
        return []
    inv = facts.inventory
    reqs = extra_requirements(inv.distributions[row.provider], row.extra, facts.marker_env)
    unmet_specs = (
        f"{r.name}{r.specifier}" for r in reqs if unmet(r, inv.distributions) is not None
    )
    return list(dict.fromkeys(joint(facts, spec) for spec in unmet_specs))


def _was_installed(facts: Facts, row: RuntimeLoad) -> bool:
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


def _missing(inv: Inventory, cmd: _Commands) -> Iterable[Finding]:
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
            paths=list(paths),
            **_step(cmd.argv("repair", "--dry-run"), f"reinstalls {name}=={dist.version}"),
        )


class _Step(TypedDict):
    command: list[str]
    reason: str
    hint: str


def _step(argv: list[str], reason: str) -> _Step:
    """A finding's next step: its command, why, and both as a person reads them."""
    return {"command": argv, "reason": reason, "hint": f"{shell_join(argv)}  ({reason})"}


def _clobbered(
    inv: Inventory,
    loaded: frozenset[DistName],
    needed_by: Mapping[DistName, list[DistName]],
    cmd: _Commands,
) -> Iterable[Finding]:
    """Shared paths, grouped by owners; a warning where bytes differ from an owner's RECORD.

    Paths whose bytes every owner's RECORD matches (the empty ``nvidia/__init__.py`` of
    every nvidia wheel) are information: uninstalling one owner still deletes them. Owners
    whose RECORD row has no hash (pip's rows for the ``.pyc`` it compiled) cannot disagree.
    The owner the hint removes is one that what ``import`` loads does not require (``loaded``).
    When a framework requires each owner (torch cu13's cudnn-cu13 and jax's cudnn-cu12 share
    ``nvidia/cudnn/lib``) no removal is offered: it would break the other framework, and the
    choice is between frameworks (the mixed-cuda finding's).
    """
    groups: dict[tuple[DistName, ...], list[CoOwnedPath]] = defaultdict(list)
    for s in inv.shared:
        groups[s.owners].append(s)
    for owners, paths in sorted(groups.items()):
        differ = [s for s in paths if _disagrees(inv, s)]
        spare = [o for o in owners if o not in loaded]
        if not spare and not all(needed_by.get(o) for o in owners):
            spare = [owners[-1]]
        offer = bool(differ and spare)
        yield Finding(
            kind="clobbered" if differ else "shared",
            severity="warning" if differ else "info",
            message=f"{len(paths)} path(s) are claimed by {' and '.join(owners)}"
            + (f"; {len(differ)} hold bytes an owner's RECORD does not list" if differ else ""),
            details=[f"{_show(inv, s.path)}: {_holds(inv, s)}" for s in paths],
            paths=[s.path for s in paths],
            owners=list(owners),
            command=cmd.argv("remove", spare[-1], "--repair", "--dry-run") if offer else [],
            reason=(
                f"removes {spare[-1]} and reinstalls the other owners, so each path holds "
                "its remaining owner's bytes"
                if offer
                else None
            ),
            hint=_clobbered_hint(owners, spare, bool(differ), needed_by, cmd),
        )


def _clobbered_hint(
    owners: tuple[DistName, ...],
    spare: list[DistName],
    differ: bool,
    needed_by: Mapping[DistName, list[DistName]],
    cmd: _Commands,
) -> str:
    head = "uninstalling any one of them with pip or uv deletes these files for all; "
    if not differ:
        return head + "`cudafix remove` plans for that (it reinstalls or keeps them)"
    if spare:
        return head + f"remove one with `{cmd('remove', spare[-1], '--repair', '--dry-run')}`"
    needs = "; ".join(
        f"{', '.join(needed_by[o])} require{'s' if len(needed_by[o]) == 1 else ''} {o}"
        for o in owners
    )
    return (
        f"{needs}: removing either breaks a framework; keep both (one framework loads the "
        "other's bytes), or remove one framework with its libraries (see mixed-cuda)"
    )


def _needed_by(needs: Needs) -> dict[DistName, list[DistName]]:
    """Per CUDA library, the frameworks whose requirement closure holds it."""
    out: dict[DistName, list[DistName]] = defaultdict(list)
    for framework, libs in sorted(needs.items()):
        for lib in sorted(libs):
            out[lib].append(framework)
    return dict(out)


def _disagrees(inv: Inventory, s: CoOwnedPath) -> bool:
    """Present bytes that an owner with a recorded hash does not match."""
    if s.missing:
        return False
    hashed = [
        o
        for o in s.owners
        if (e := inv.distributions[o].record_by_path.get(s.path)) is not None and e.sha256
    ]
    return any(o not in s.matching for o in hashed)


def foreign_files(facts: Facts) -> Mismatches:
    """Single-owner files of ELF-providing distributions whose bytes are not their RECORD's.

    What a ``--keep-shared`` removal or an install over another build leaves: a file one
    distribution claims, holding another build's bytes. Only files changed since their
    RECORD was written were hashed (:func:`cudafix.env.inventory.changed_since_record`);
    a size that disagrees needs no hash. Scripts with a ``#!`` line are not counted: a
    relocated environment rewrites them (:func:`script_problems` judges them).
    """
    return {
        name: kept
        for name, wrong in facts.record_mismatches.items()
        if (kept := [(p, why) for p, why in wrong if p not in facts.shebangs])
    }


def script_problems(facts: Facts) -> tuple[Mismatches, Mismatches]:
    """Scripts whose bytes differ from RECORD, split by their ``#!`` line: (relocated: the
    interpreter it names exists; broken: it does not). The RECORD hash covers the whole
    file, old shebang included, so a relocation cannot be told from an edit of the rest;
    a relocated script is information, a script that cannot start is a problem."""
    relocated: Mismatches = {}
    broken: Mismatches = {}
    for name, wrong in facts.record_mismatches.items():
        for path, _ in wrong:
            if (shebang := facts.shebangs.get(path)) is not None:
                (relocated if shebang.exists else broken).setdefault(name, []).append(
                    (path, shebang.interpreter)
                )
    return relocated, broken


def _foreign_bytes(
    inv: Inventory, foreign: Mapping[DistName, list[tuple[EnvPath, str]]], cmd: _Commands
) -> Iterable[Finding]:
    for name, wrong in sorted(foreign.items()):
        dist = inv.distributions[name]
        yield Finding(
            kind="foreign-bytes",
            severity="warning",
            distribution=name,
            message=f"{len(wrong)} file(s) of {name} {dist.version} hold bytes its RECORD "
            "does not list (another build was installed over them)",
            details=[f"{_show(inv, path)}: {why}" for path, why in wrong],
            paths=[path for path, _ in wrong],
            **_step(cmd.argv("repair", "--dry-run"), f"reinstalls {name}=={dist.version}"),
        )


def _scripts(inv: Inventory, facts: Facts, cmd: _Commands) -> Iterable[Finding]:
    relocated, broken = script_problems(facts)
    for name, scripts in sorted(relocated.items()):
        for path, interpreter in scripts:
            yield Finding(
                kind="relocated",
                severity="info",
                distribution=name,
                paths=[path],
                message=f"{_show(inv, path)} of {name}: relocated, its shebang points at "
                f"{interpreter} (its RECORD hash covers the old shebang, so the rest of the "
                "script was not compared)",
            )
    for name, scripts in sorted(broken.items()):
        dist = inv.distributions[name]
        yield Finding(
            kind="bad-script",
            severity="warning",
            distribution=name,
            paths=[path for path, _ in scripts],
            message=f"{len(scripts)} script(s) of {name} {dist.version} name an interpreter "
            "that does not exist, so they cannot start",
            details=[f"{_show(inv, path)}: #!{interp}" for path, interp in scripts],
            **_step(cmd.argv("repair", "--dry-run"), f"reinstalls {name}=={dist.version}"),
        )


def _holds(inv: Inventory, s: CoOwnedPath) -> str:
    if s.missing:
        return "missing"
    if not _disagrees(inv, s) and not s.matching:
        return "no owner's RECORD has its hash (bytecode pip compiled), so none disagrees"
    if len(s.matching) > 1:
        return "identical bytes in " + ", ".join(s.matching)
    return f"holds {s.holder}'s bytes" if s.holder else "holds bytes no owner's RECORD matches"


def _unresolved(
    inv: Inventory,
    edges: Iterable[Edge],
    cmd: _Commands,
    facts: Facts,
    wanted: tuple[MissingRequirement, ...],
) -> Iterable[Finding]:
    """Needs nothing provides, graded by what breaks.

    Each need is judged on the chains that really load its object (``Edge.chains``): an
    error when every one of them fails it (an import, a tool or a run-time load fails), or
    when the file should be there (a RECORD claims it). Information when a driver or
    optional system stack provides it, or when nothing loads the object (plugins and
    optional transports are loaded on demand): then it was judged on its own tree. A
    framework's run-time load is judged by :func:`_run_time_unresolved`. When the consumer's
    distribution requires one that is not installed, installing that is the fix.

    Two things make it an error whatever the chains: the need's library was there at the
    last reading of this environment and went since (:mod:`cudafix.plan.gone`: ``repair``
    installs what provided it, at that version), or nothing loads the object while some of
    its needs are met in the venv and this one nowhere
    (:func:`~cudafix.linker.bypath.partly_provided`: the stack it was built for is there).
    """
    system = provided_by_system()
    elsewhere = _copies_by_name(inv)
    searched = _Searched(inv)
    edges = list(edges)
    broken = partly_provided(
        edges, str(inv.prefix), lambda p: next(iter(_owners_abs(inv, p)), None)
    )
    gone = gone_libraries(facts)
    for e in sorted(edges, key=lambda e: (e.requester, e.need)):
        if e.provider is not None:
            continue
        row = facts.runtime.row(e.requester, e.need)
        if row is not None:
            yield _run_time_unresolved(facts, e, row, cmd)
            continue
        rel = searched.env_path(e.requester)
        owner = inv.owners.get(rel, ()) if rel else ()
        claimants = _claimants(inv, e.need)
        severity: Severity = "error" if claimants or e.chains else "info"
        why = ""
        step = (
            _install_step(cmd, wanted, owner)
            if not claimants
            else _step(cmd.argv("repair", "--dry-run"), f"reinstalls {', '.join(claimants)}")
        )
        hint: str | None = None
        optional = facts.runtime.optional.get(e.requester)
        seen = None if claimants else gone.get(e.need)
        if seen is not None:
            severity = "error"
            why = (
                f"; {seen.distribution} {seen.version} provided it at the last reading of this "
                "environment, and it went since"
            )
            step = _step(cmd.argv("repair", "--dry-run"), f"installs {pin(seen)}")
        elif not claimants and e.need in system:
            severity, why = "info", f"; {e.need} comes from {system[e.need]}, not from a wheel"
            step, hint = None, f"nothing to do unless this host should have {system[e.need]}"
        elif not claimants and optional is not None:
            severity = "info"
            why = f"; {optional.framework} imports it only if it can, and runs without it"
        elif severity == "info" and e.requester in broken:
            severity = "error"
            why = (
                "; its other needs are met in this environment, so the stack it was built "
                "for is installed and it fails when loaded"
            )
        elif severity == "info":
            why = (
                "; no extension module loads it (nor an executable or a run-time load), "
                "so nothing fails until something does"
            )
        if hint is None and step is None:
            hint = _where_else(inv, e.need, elsewhere.get(e.need, []))
        chains = (
            [f"fails on each of the {e.chains} load chain(s) through it, "
             f"e.g. from {_show(inv, e.root)}"]
            if e.chains else []
        )  # fmt: skip
        yield Finding(
            **(step if step is not None and hint is None else {"hint": hint}),
            kind="unresolved",
            severity=severity,
            distribution=owner[0] if owner else None,
            message=(
                f"{searched.show(e.requester)} ({', '.join(owner) or 'no distribution'}) "
                f"needs {e.need}, which is not found{why}"
            ),
            details=chains
            + searched.details(e)
            + [f"{e.need} is in the RECORD of {c}, but missing on disk" for c in claimants]
            + (
                [f"{e.need} was {_show(inv, seen.path)} of {seen.distribution} {seen.version}"]
                if seen is not None
                else []
            ),
            consumer=searched.env_path(e.requester) or e.requester,
            need=e.need,
            owners=[seen.distribution] if seen is not None else claimants,
        )


def _install_step(
    cmd: _Commands, wanted: tuple[MissingRequirement, ...], owners: Iterable[str]
) -> _Step | None:
    """Installing what the consumer's distribution requires and lacks, as required."""
    specs = sorted({m.spec for m in wanted if m.distribution in set(owners)})
    if not specs:
        return None
    by = ", ".join(sorted(set(owners)))
    return _step(cmd.argv("install", *specs, "--dry-run"), f"{by} requires it; not installed")


def _run_time_unresolved(facts: Facts, e: Edge, row: RuntimeLoad, cmd: _Commands) -> Finding:
    """A framework's run-time load that resolves nowhere: an error when its libraries were
    installed from wheels (the GPU backend fails when it loads them), else information."""
    inv = facts.inventory
    owner = _owners_abs(inv, e.requester)
    mine = _unmet_specs(facts, row)
    installed = _was_installed(facts, row)
    why = "" if installed else f"; none of {row.requested_as}'s wheels is installed (system CUDA)"
    return Finding(
        kind="unresolved",
        severity="error" if installed else "info",
        distribution=owner[0] if owner else None,
        message=f"{_show(inv, e.requester)} ({', '.join(owner) or 'no distribution'}) "
        f"loads {_show(inv, e.need)} at run time (for {row.requested_as}), which is not "
        f"found{why}",
        details=[f"searched {_show(inv, d)}" for d in dict.fromkeys(e.searched)]
        + [f"evidence: {row.source}"],
        consumer=in_env(str(inv.prefix), e.requester),
        need=e.need,
        owners=[row.framework],
        command=cmd.argv("repair", "--dry-run") if mine else [],
        reason=f"installs {', '.join(mine)}" if mine else None,
        hint=f"{cmd('repair', '--dry-run')}  (installs {', '.join(mine)})" if mine else None,
    )


class _Searched:
    """The directories an unresolved need was looked for in, listed once per object.

    Every need of one object that nothing provides was searched in the same directories
    (its RPATH chain, RUNPATH, the defaults); listing them again for each need would make
    the report objects x needs x directories long, where the input is objects x (needs +
    directories). Later needs of the same object refer back to the first.
    """

    def __init__(self, inv: Inventory) -> None:
        self._inv = inv
        self._first: dict[str, tuple[str, tuple[str, ...], int]] = {}
        self._shown: dict[str, str] = {}
        self._env: dict[str, EnvPath | None] = {}

    def details(self, e: Edge) -> list[str]:
        first = self._first.get(e.requester)
        if first is None:
            first = self._first[e.requester] = (e.need, e.searched, len(set(e.searched)))
        need, dirs, count = first
        if need != e.need and (dirs is e.searched or dirs == e.searched):
            return [f"searched the same {count} directories as for {need}"]
        return [f"searched {self.show(d)}" for d in dict.fromkeys(e.searched)]

    def show(self, path: str) -> str:
        """:func:`_show`, memoised: the same objects and directories recur per need."""
        shell_join = self._shown.get(path)
        if shell_join is None:
            shell_join = self._shown[path] = _show(self._inv, path)
        return shell_join

    def env_path(self, path: str) -> EnvPath | None:
        """:func:`to_env_path`, memoised like :meth:`show`."""
        if path not in self._env:
            self._env[path] = to_env_path(str(self._inv.prefix), path)
        return self._env[path]


def _copies_by_name(inv: Inventory) -> dict[str, list[EnvPath]]:
    """Every file in the venv by base name: where a soname sits, on anyone's path or not."""
    out: dict[str, list[EnvPath]] = defaultdict(list)
    for path in inv.files:
        name = path.rsplit("/", 1)[-1]
        if ".so" in name:
            out[name].append(path)
    return out


def _where_else(inv: Inventory, need: str, copies: list[EnvPath]) -> str:
    """The next step for a need nothing on the search path provides: a copy the venv holds
    off that path (found only once a process has loaded it by another route), or a provider
    to install."""
    if not copies:
        return f"install the distribution that provides {need}"
    shell_join = ", ".join(
        f"{_show(inv, p)} ({', '.join(inv.owners.get(p, ())) or 'unowned'})" for p in sorted(copies)
    )
    return (
        f"{need} is in the venv at {shell_join}, not on this object's search path: it loads "
        "only in a process that has already loaded that copy"
    )


def _claimants(inv: Inventory, soname: str) -> list[str]:
    """Distributions whose RECORD lists a missing file named like ``soname``."""
    return sorted(
        {n for n, paths in inv.missing.items() for p in paths if p.rsplit("/", 1)[-1] == soname}
    )


def loaded_closure(facts: Facts, chains: Chains) -> frozenset[DistName]:
    """The requirement closure of the distributions owning the extension modules ``import``
    loads (and run-time loads): what the environment is for (torch and its pins), as
    opposed to leftovers."""
    return _closure(facts, _frameworks(facts.inventory, chains))


def _closure(facts: Facts, roots: Iterable[DistName]) -> frozenset[DistName]:
    """:func:`requirement_closure` through the requested extras, as the planner judges
    requirements: what ``roots`` were installed to load."""
    inv = facts.inventory
    return requirement_closure(inv.distributions, roots, facts.marker_env, facts.extras)


def _import_roots(chains: Chains) -> list[Root]:
    return [r for r in chains.roots if r.kind in IMPORT_KINDS]


def _frameworks(inv: Inventory, chains: Chains) -> set[DistName]:
    """Distributions owning an extension module or a run-time load."""
    return {o for r in _import_roots(chains) for o in _owners_abs(inv, r.path)}


def _mixed_cuda(facts: Facts, chains: Chains, needs: Needs, cmd: _Commands) -> Iterable[Finding]:
    """More than one CUDA major installed, and the two-majors-in-one-process check."""
    majors: dict[int, list[str]] = defaultdict(list)
    for name, major in sorted(facts.cuda_majors.items()):
        majors[major].append(name)
    if len(majors) > 1:
        yield _majors_finding(facts, needs, majors, cmd)
    yield from _mixed_sonames(facts.inventory, chains.trees.values())


def _majors_finding(
    facts: Facts, needs: Needs, majors: Mapping[int, list[str]], cmd: _Commands
) -> Finding:
    """Which framework needs which major, and what to do: typed :class:`Choice` values.

    A framework is a distribution owning an extension module (or run-time load); the majors
    it needs are those in its requirement closure. A major no framework needs is a leftover
    (a warning; its removal is the choice). When frameworks need different majors each is
    healthy on its own (information): the choices are keeping both, or removing one
    framework with the libraries of its major that no other framework needs. Nothing a
    framework needs is ever offered for removal. Without any framework evidence the hint
    stays generic rather than guess.
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
    hint = None
    if not by_major:
        remove = cmd("remove", "nvidia-*-cuNN", "--repair", "--dry-run")
        hint = f"remove the leftovers of the major you do not use: `{remove}`"
    elif len(by_major) == 1 and leftover:
        used = ", ".join(f"cu{m}" for m in sorted(by_major))
        commands = "; ".join(f"`{c.command}`" for c in choices)
        hint = f"what import loads needs {used}; remove the leftovers: {commands}"
    selectors = _leftover_selectors(leftover[0], majors[leftover[0]]) if leftover else []
    needed = "; ".join(
        f"{', '.join(fs)} need{'s' if len(fs) == 1 else ''} cu{m}"
        for m, fs in sorted(by_major.items())
    )
    return Finding(
        kind="mixed-cuda",
        severity="warning" if leftover or not by_major else "info",
        message="distributions for more than one CUDA major are installed: "
        + "; ".join(f"cu{k}: {len(v)}" for k, v in sorted(majors.items()))
        + (f" ({needed})" if needed else ""),
        details=[f"cu{k}: {', '.join(sorted(v))}" for k, v in sorted(majors.items())],
        owners=sorted(n for v in majors.values() for n in v),
        hint=hint,
        choices=choices,
        command=cmd.argv("remove", *selectors, "--repair", "--dry-run")
        if len(by_major) == 1 and leftover
        else [],
        reason=f"what import loads needs only cu{next(iter(by_major))}; the cu{leftover[0]} "
        "wheels are leftovers no framework needs"
        if len(by_major) == 1 and leftover
        else None,
    )


Needs = Mapping[DistName, frozenset[DistName]]
"""Per framework, the CUDA libraries its requirement closure holds: computed once per
diagnosis (:func:`framework_cuda_needs`) for the clobber hint, mixed-cuda and leftovers."""


def framework_cuda_needs(facts: Facts, chains: Chains) -> dict[DistName, frozenset[DistName]]:
    """Per framework (owner of an extension module or run-time load), the CUDA libraries its
    requirement closure holds (``*-cuNN`` and ``nvidia-*``: cu13 wheels often carry no
    suffix); frameworks needing none are left out."""
    inv = facts.inventory
    frameworks = _frameworks(inv, chains)
    out: dict[DistName, frozenset[DistName]] = {}
    for framework in sorted(frameworks):
        closure = _closure(facts, {framework})
        libs = frozenset(n for n in closure if n in facts.cuda_majors or n.startswith("nvidia-"))
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


def _leftover_selectors(major: int, names: Sequence[str]) -> list[str]:
    """``nvidia-*-cuNN``, and by name the leftovers of that major the glob misses (CUDA 13
    wheels are mostly unsuffixed)."""
    glob = f"nvidia-*-cu{major}"
    rest = [n for n in sorted(names) if not fnmatch.fnmatchcase(n, glob)]
    return rest if len(rest) == len(names) else [glob, *rest]


def _remove_leftovers(major: int, names: Sequence[str], cmd: _Commands) -> Choice:
    return Choice(
        action="remove-leftovers",
        majors=[major],
        command=cmd("remove", *_leftover_selectors(major, names), "--repair", "--dry-run"),
    )


def _remove_framework(
    facts: Facts,
    needs: Mapping[DistName, frozenset[DistName]],
    by_major: Mapping[int, list[DistName]],
    major: int,
    cmd: _Commands,
) -> Choice:
    """Remove the frameworks needing ``major`` and that major's libraries, keeping every
    distribution a framework of another major needs (its closure, itself included)."""
    frameworks = by_major[major]
    others = [f for f in needs if f not in frameworks]
    kept = set(_closure(facts, others))
    libs = sorted(
        {n for f in frameworks for n in needs[f] if facts.cuda_majors.get(n) in (major, None)}
        - kept
    )
    removed = [f for f in frameworks if f not in kept]
    removed += _dependents(facts, {*removed, *libs}, kept)
    names: list[str] = [*removed, *libs]
    return Choice(
        action="remove-framework",
        majors=[major],
        frameworks=list(removed),
        distributions=names,
        command=cmd("remove", *names, "--repair", "--dry-run") if names else None,
    )


def _dependents(facts: Facts, frameworks: set[DistName], kept: set[DistName]) -> list[DistName]:
    """What must go with ``frameworks`` (and the libraries removed with them) for their
    removal to break nothing: the installed distributions that require them (``jax``, whose
    requested extra ``cuda12`` asks for ``jax-cuda12-plugin``; ``cuda-toolkit``, whose
    extras torch asked for list the cu13 wheels), and those owning objects whose run-time
    loads a removed framework's extra brings (``jax-cuda12-pjrt``); none that ``kept``
    needs."""
    inv = facts.inventory
    out = {
        name
        for name in inv.distributions
        if name not in frameworks | kept and _closure(facts, {name}) & frameworks
    }
    for (obj, _need), row in facts.runtime.rows.items():
        if row.provider in frameworks:
            out |= {o for o in _owners_abs(inv, obj) if o not in frameworks | kept}
    return sorted(out)


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
                message=f"loading {_show(inv, tree.root)} maps {' and '.join(key)}",
                details=[
                    f"{_show(inv, needs[n].requester)} needs {n} "
                    f"({_show(inv, needs[n].provider or '')})"
                    for n in key
                ],
                hint="two majors of one library in one process: one of them is a leftover build",
            )


def _shadowed(facts: Facts, edges: Iterable[Edge], cmd: _Commands) -> Iterable[Finding]:
    """Sonames with several copies in the venv, graded by whether any search competes.

    A warning only where one consumer's own search path (the directories ld.so walks for it)
    holds two copies and the one it gets is not from its requirement closure, or is of
    another CUDA major than that closure: a cu13 torch finding a leftover cu12
    ``libcusparseLt.so.0`` first. Copies no search path puts side by side (triton's
    ``cupti``, which triton loads by full path) are information.
    """
    inv = facts.inventory
    prefix = str(inv.prefix)
    copies = {
        name: {f"{prefix}/{p}" for p in paths} for name, paths in _copies_by_name(inv).items()
    }
    by_need: dict[str, list[tuple[Edge, list[str]]]] = defaultdict(list)
    for e in edges:
        if e.provider is None or len(copies.get(e.need, ())) < 2:
            continue
        dirs = _search_dirs(facts, e)
        competing = sorted(c for c in copies[e.need] if posixpath.dirname(c) in dirs)
        by_need[e.need].append((e, competing))
    for need, uses in sorted(by_need.items()):
        places = sorted(copies[need])
        contested = [(e, c) for e, c in uses if len(c) > 1]
        listing = [f"{_show(inv, p)} ({_owned_by(inv, p)})" for p in places]
        if not contested:
            yield Finding(
                kind="duplicate-soname",
                severity="info",
                message=f"{need} is provided at {len(places)} places, but no consumer's search "
                "path holds two of them; a process that loads both by path gets two copies",
                details=listing,
                need=need,
                paths=[in_env(str(inv.prefix), p) for p in places],
            )
            continue
        wrong = [(e, c) for e, c in contested if _wrong_pick(facts, e)]
        for e, competing in wrong or contested[:1]:
            provider = e.provider or ""
            unwanted = next(iter(_owners_abs(inv, provider)), "NAME")
            # --repair when the copy's distribution shares paths: removing it bare is refused
            shares = any(unwanted in c.owners and not is_bytecode(c.path) for c in inv.shared)
            words = [unwanted, *(["--repair"] if shares else []), "--dry-run"]
            remove = cmd("remove", *words)
            yield Finding(
                kind="shadowed",
                severity="warning" if wrong else "info",
                distribution=next(iter(_owners_abs(inv, e.requester)), None),
                message=f"{_show(inv, e.requester)} finds {need} at "
                f"{_show(inv, provider)} ({_owned_by(inv, provider)})"
                f" first, of {len(competing)} on its search path"
                + ("; that copy is not of the build its distribution requires" if wrong else ""),
                details=[
                    *listing,
                    f"searched first: {', '.join(_show(inv, d) for d in e.searched[:4])}",
                ],
                consumer=in_env(str(inv.prefix), e.requester),
                need=need,
                provider=in_env(str(inv.prefix), e.provider or ""),
                paths=[in_env(str(inv.prefix), p) for p in competing],
                owners=sorted({o for p in competing for o in _owners_abs(inv, p)}),
                hint=f"remove the copy its distribution does not require: `{remove}`"
                if wrong
                else None,
                command=cmd.argv("remove", *words) if wrong else [],
                reason=f"removes {unwanted}, whose copy is found first"
                + (", and reinstalls what shares its paths" if shares else "")
                if wrong
                else None,
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
    consumers = _owners_abs(inv, e.requester)
    providers = _owners_abs(inv, e.provider or "")
    if not consumers or not providers:
        return False
    closure = _closure(facts, consumers)
    known = facts.cuda_majors
    majors = {m for n in closure if (m := known.get(n)) is not None}
    if not any(p in closure for p in providers):
        return True
    return bool(majors) and any(
        (m := known.get(p)) is not None and m not in majors for p in providers
    )


def _owners_abs(inv: Inventory, path: str) -> list[DistName]:
    rel = to_env_path(str(inv.prefix), path) if path else None
    return list(inv.owners.get(rel, ())) if rel else []


def _owned_by(inv: Inventory, path: str) -> str:
    return ", ".join(_owners_abs(inv, path)) or "unowned"


def _requirements(
    facts: Facts,
    cmd: _Commands,
    wanted: tuple[MissingRequirement, ...],
    installs: Mapping[str, str],
    leftovers: frozenset[DistName],
) -> Iterable[Finding]:
    """Broken Requires-Dist; one that names a distribution not installed at all is fixed by
    installing it as required (``cudafix install NAME==VERSION``, which ``repair`` also does),
    one that ``repair`` installs for a framework's extra (``installs``) by ``repair``. One of
    a CUDA leftover (:func:`cuda_leftovers`: a stray ``nvidia-cudnn-cu12`` in a torch cu13
    venv asking for ``nvidia-cublas-cu12``) is mended by removing the leftover, not by
    installing more of a CUDA major nothing loads."""
    missing = {(m.distribution, m.requirement): m for m in wanted}
    repairable = {normalize_name(Requirement(spec).name) for spec in installs}
    asked = _asked_for(facts)
    for p in check_requirements(facts.inventory.distributions, facts.marker_env):
        named = (p.distribution, p.extra)
        if p.extra and named not in asked and not _partly_installed(facts, *named):
            continue
        gone = missing.get((p.distribution, p.requirement))
        step = (
            _step(
                cmd.argv("remove", p.distribution, "--repair", "--dry-run"),
                f"{p.distribution} is a leftover of a CUDA major no framework here needs; "
                "removing it, with --repair putting back the files it shares, mends this",
            )
            if p.distribution in leftovers
            else _step(
                cmd.argv("install", gone.spec, "--dry-run"),
                f"installs it as {p.distribution} requires",
            )
            if gone is not None
            else _step(
                cmd.argv("repair", "--dry-run"),
                f"installs a version {p.requirement.split(';')[0].strip()} allows, as uv "
                f"resolves it (or remove {p.distribution})",
            )
            if normalize_name(Requirement(p.requirement).name) in repairable
            else {
                "hint": "install a matching version, or "
                f"`{cmd('remove', p.distribution, '--dry-run')}`"
            }
        )
        yield Finding(
            kind="requirement",
            severity="error",
            distribution=p.distribution,
            message=f"{p.requested_as} requires {p.requirement}: {p.reason}",
            **step,
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


def _unreadable(inv: Inventory) -> Iterable[Finding]:
    for u in inv.unreadable:
        yield Finding(
            kind="unreadable-record",
            severity="error",
            distribution=u.distribution,
            paths=[u.record],
            message=f"{u.record} cannot be read exactly ({u.reason}): pip and uv would each "
            f"read other rows, so what {u.distribution} owns is unknown",
            hint="fix that RECORD by hand (or remove its dist-info and reinstall); until "
            "then cudafix refuses every plan in this environment",
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
    """A path for people: an EnvPath, or an absolute path inside the environment, relative to
    its site-packages dir."""
    return site_relative(path, inv.site_packages, str(inv.prefix))
