"""Simulate a change (removals, reinstalls, installs) and decide whether cudafix allows it.

Pure: it reads only the facts it is given (:class:`Facts`, plain data, staged wheels
included) and returns the whole :class:`~cudafix.model.plan.Plan` in one pass, verdict and
preconditions included: :func:`build_plan` is the one entry point. The prediction mirrors
what uv and pip really do: they delete every path in a removed distribution's RECORD,
including paths other distributions claim.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from cudafix.env.inventory import Distribution, Inventory
from cudafix.fetch.staged import Pin, StagedWheel
from cudafix.linker.bypath import BY_PATH
from cudafix.linker.edge import Edge, EdgeKey
from cudafix.linker.elfindex import EnvironmentView
from cudafix.linker.linkage import (
    diff_edges,
    env_objects,
    in_env,
    resolve_chains,
    to_env_path,
)
from cudafix.linker.loader import DlopenTable, expand_entry
from cudafix.model import plan as P
from cudafix.model import reasons as R
from cudafix.model.commands import cudafix_argv, venv_flags
from cudafix.model.names import DistName, EnvPath, Soname
from cudafix.model.plan import Probes, RunTimeProbe
from cudafix.plan import install, verdict
from cudafix.plan.facts import Facts, load_roots
from cudafix.plan.preconditions import record_digest
from cudafix.plan.requirements import Declared, check_requirements
from cudafix.plan.shared import Fate, holders_after, reinstall_reasons, shared_losses
from cudafix.plan.staging import is_payload


@dataclass(frozen=True)
class Request:
    """What the user asked to remove, and how."""

    names: tuple[DistName, ...]
    selectors: tuple[str, ...]
    options: P.Options
    reinstall: Mapping[DistName, R.ReinstallWhy] = field(default_factory=dict)
    """Distributions to reinstall whatever the options say, with the reason (``cudafix repair``)."""
    installs: tuple[Pin, ...] = ()
    """Exact pins installed ``--no-deps`` after removals and reinstalls (cleanup scripts)."""
    probes: Probes = field(default_factory=Probes)
    source: str | None = None
    """The script the request came from, if any."""


def wheels_needed(facts: Facts, request: Request) -> tuple[Pin, ...]:
    """The wheels to stage before :func:`build_plan`: its reinstalls and installs.

    With local sources (``--offline`` or ``--find-links``) the reinstalls of the
    ``--repair`` alternative too, so a suggested command is known to pass; from an index
    they are not fetched just to be suggested (their own run stages and checks them).
    """
    inv = facts.inventory
    deleted = frozenset(_deleted_paths(inv, request.names))
    options = request.options
    local = options.offline or bool(options.find_links)
    repair = options.repair or (local and not options.keep_shared)
    why = reinstall_reasons(inv, deleted, request.names, request.reinstall, repair=repair)
    pins = [(n, inv.distributions[n].version) for n in sorted(why)]
    return (*pins, *request.installs)


def build_plan(facts: Facts, request: Request) -> P.Plan:
    """The plan for ``request``, with safe alternatives when it is refused."""
    view = EnvironmentView(
        facts.inventory.prefix, facts.elf, facts.inventory.files, system=facts.host
    )
    deleted = frozenset(_deleted_paths(facts.inventory, request.names))
    memo: _Resolved = {}
    plan = _simulate(facts, view, deleted, request, memo)
    if plan.verdict == "pass" or request.options.repair or request.options.keep_shared:
        return plan
    alternatives = []
    for flag, opts in (
        ("--repair", replace_options(request.options, repair=True)),
        ("--keep-shared", replace_options(request.options, keep_shared=True)),
    ):
        alt = _simulate(facts, view, deleted, replace(request, options=opts), memo)
        if alt.verdict == "pass":
            unstaged = [
                f"{r.name}=={r.version}"
                for r in alt.reinstall
                if (DistName(r.name), r.version) not in facts.staging.wheels
            ]
            argv = _alternative_argv(plan, flag)
            alternatives.append(P.Alternative(argv=argv, summary=_does(alt), unstaged=unstaged))
    return plan.model_copy(update={"alternatives": alternatives})


def _alternative_argv(plan: P.Plan, flag: str) -> list[str]:
    """The dry run of ``plan``'s request with ``flag``, with the options it was made with."""
    opts = plan.options
    words = [flag, *opts.sources.cli_args()]
    words += ["--backend", opts.backend] if opts.backend != "uv" else []
    words += ["--allow-broken-requirements"] if opts.allow_broken_requirements else []
    target = venv_flags(plan.target.prefix)
    return cudafix_argv("remove", *plan.selectors, target=target, tail=[*words, "--dry-run"])


def replace_options(options: P.Options, **changes: object) -> P.Options:
    return options.model_copy(update=changes)


def _does(plan: P.Plan) -> R.AlternativeDoes:
    if plan.reinstall:
        return R.RemoveThenReinstall(pins=[f"{r.name}=={r.version}" for r in plan.reinstall])
    foreign = [w for w in plan.warnings if isinstance(w, R.KeptForeign)]
    return R.RemoveKeepingShared(
        paths=list(plan.kept_paths),
        foreign=[p for w in foreign for p in w.paths],
        holders=sorted({w.subject for w in foreign}),
    )


_Resolved = dict[tuple[object, ...], Mapping[EdgeKey, Edge]]
"""The edges of the load chains of one state (``before``, or the paths gone after it), by
that state and the roots and objects resolved. A refused removal is simulated three times
(as asked, with ``--repair``, with ``--keep-shared``), mostly on the same state: each state
is resolved once (a torch venv's two resolutions cost 0.1 s)."""


def _simulate(
    facts: Facts,
    view: EnvironmentView,
    deleted: frozenset[EnvPath],
    request: Request,
    memo: _Resolved,
) -> P.Plan:
    """One candidate plan. ``view`` (the environment as it is) and ``deleted`` (what the
    backend deletes for ``request.names``) are shared by every simulation of one request,
    so the loader's memo, the path scan and the chains resolved (``memo``) serve them all."""
    inv = facts.inventory
    removed = set(request.names)
    remaining = {n: d for n, d in inv.distributions.items() if n not in removed}
    fate: Fate = "kept" if request.options.keep_shared else "deleted"
    shared = shared_losses(inv, deleted, removed, fate)
    kept: list[str] = sorted(s.path for s in shared) if request.options.keep_shared else []
    why = reinstall_reasons(
        inv, deleted, request.names, request.reinstall, repair=request.options.repair
    )
    reinstall = [
        P.Reinstall(name=n, version=remaining[n].version, reason=why[n], **_pinned(facts, n))
        for n in sorted(why)
    ]
    rewritten: list[str] = sorted(
        {e.path for r in reinstall for e in inv.distributions[DistName(r.name)].files}
    )
    installs = _installs(facts, request.installs)
    wheels = [w for _, w in installs if w]
    new = install.written(wheels)
    gone = frozenset(p for p in deleted if p not in set(kept) | set(rewritten) | new)
    changed = frozenset(deleted) | {EnvPath(p) for p in rewritten} | new
    clobbers = install.overwritten(inv, wheels, removed, facts.path_hashes)
    lost, switches, touched, run_time = _linkage(
        facts, view, gone, changed, memo, wheels, clobbers, removed
    )
    breaks = _requirement_breaks(facts, remaining, wheels)
    backend_reads = removed | {DistName(r.name) for r in reinstall}
    refused = [
        P.RefusedPath(distribution=u.distribution, entry=u.raw, reason=u.reason)
        for u in inv.unsafe
        if u.distribution in backend_reads
    ]
    restored = set(rewritten) | new
    shared_out = [
        s.model_copy(update={"fate": "restored-by-reinstall"}) if s.path in restored else s
        for s in shared
    ]
    plan = P.Plan(
        target=P.Target(
            prefix=str(inv.prefix),
            python=str(inv.python) if inv.python else None,
            site_packages=list(inv.site_packages),
        ),
        selectors=list(request.selectors),
        options=request.options,
        remove=[_removed(inv, inv.distributions[n]) for n in request.names],
        reinstall=reinstall,
        deleted_paths=sorted(deleted - set(kept)),
        kept_paths=kept,
        rewritten_paths=rewritten,
        holders_after=holders_after(inv, reinstall),
        shared_paths=shared_out,
        lost=lost,
        switches=switches,
        requirement_breaks=breaks,
        refused_paths=refused,
        self_dependencies=sorted(removed & facts.self_dependencies),
        probe_modules=sorted(
            {
                *_probe_modules(
                    inv,
                    remaining,
                    touched,
                    {r.name for r in reinstall} | {o for c in shared for o in c.remaining_owners},
                ),
                *(t for _, w in installs if w for t in w.top_level),
            }
        ),
        probe_libraries=sorted(touched),
        probe_run_time=run_time,
        warnings=[
            *verdict.warnings(shared, request.options, switches, refused),
            *verdict.unchecked(facts, reinstall, installs),
        ],
        verdict="pass",
        reasons=[],
        alternatives=[],
        install=[i for i, _ in installs],
        overwritten=clobbers,
        probes=request.probes,
        source=request.source,
        preconditions=_preconditions(
            facts,
            sorted({*deleted, *map(EnvPath, rewritten)}),
            [*request.names, *(DistName(r.name) for r in reinstall)],
            [EnvPath(p) for i, _ in installs for p in i.paths],
        ),
    )
    reasons = verdict.reasons(plan, facts, request.options) + install.install_reasons(plan)
    warnings = [*plan.warnings, *install.install_warnings(plan, facts.cuda_majors)]
    return plan.model_copy(
        update={
            "verdict": "refused" if reasons else "pass",
            "reasons": reasons,
            "warnings": warnings,
        }
    )


def _deleted_paths(inv: Inventory, names: Sequence[DistName]) -> set[EnvPath]:
    """RECORD paths on disk, the dist-info dir and bytecode: what the backend deletes."""
    return {p for n in names for p in inv.iter_distribution_paths(n) if p in inv.files}


def _loader_may_see(facts: Facts, gone: frozenset[EnvPath]) -> bool:
    """Whether deleting ``gone`` can change any search: only a file named like a need (an
    ELF object, or a non-ELF file that stops the search) or a symlink (a directory may be
    reached through it) can. Removing a pure-Python distribution then costs no second
    resolution of the whole environment."""
    needs = {n for info in facts.elf.objects.values() for n in info.needed}
    table = facts.dlopen if facts.dlopen is not None else DlopenTable.default()
    needs.update(p for parts in table.edges.values() for p in parts)
    names = {n.rsplit("/", 1)[-1] for n in needs}
    files = facts.inventory.files
    return any(
        p.rsplit("/", 1)[-1] in names
        or p in facts.elf.objects
        or p in facts.elf.problems
        or ((st := files.get(p)) is not None and st.kind != "file")
        for p in gone
    )


def _linkage(
    facts: Facts,
    view: EnvironmentView,
    gone: frozenset[EnvPath],
    changed: frozenset[EnvPath],
    memo: _Resolved,
    wheels: Sequence[StagedWheel] = (),
    clobbers: Sequence[P.OverwrittenPath] = (),
    removed: Iterable[DistName] = (),
) -> tuple[list[P.LostNeed], list[P.ProviderSwitch], set[EnvPath], list[RunTimeProbe]]:
    """Needs lost and switched, the remaining objects whose providers change on disk, and
    the run-time loads to probe.

    ``wheels`` are installed after ``gone`` is deleted: the after-state has their files,
    so a need may then resolve into them, or to a path whose bytes they replace. Needs are
    judged as doctor judges them (:func:`~cudafix.linker.linkage.judge`): lost only when
    every real load chain through the consumer fails them.
    """
    inv, prefix = facts.inventory, str(facts.inventory.prefix)
    unseen = not wheels and not _loader_may_see(facts, gone)
    if unseen and not any(p in facts.elf.objects for p in changed):
        # Every provider is an ELF object of the index (or a host file): with none of them
        # changed and nothing the loader sees deleted, no need is lost, switched or touched.
        return [], [], set(), []
    roots = load_roots(facts, gone)
    objects = tuple(env_objects(prefix, facts.elf, gone))

    def edges(state: object, on: EnvironmentView) -> Mapping[EdgeKey, Edge]:
        if (key := (state, roots, objects)) not in memo:
            memo[key] = resolve_chains(roots, objects, on, facts.search, facts.dlopen).edges
        return memo[key]

    before = edges("before", view)
    if unseen:
        after = before  # nothing deleted is a file ld.so could open or stop at
    elif wheels:  # the staged wheels' files are in the after-state too: no key names them
        after_view = install.after_view(view, gone, wheels)
        after = resolve_chains(roots, objects, after_view, facts.search, facts.dlopen).edges
    else:
        after = edges(gone, install.after_view(view, gone, wheels))
    diff = diff_edges(before, after)
    claimed_after = install.owners_after(inv, wheels, removed)  # over inv.owners, not a copy
    lost = [
        P.LostNeed(
            consumer=in_env(prefix, old.requester),
            consumer_distribution=_owner(inv, prefix, old.requester),
            need=in_env(prefix, old.need),
            resolved_before=in_env(prefix, old.provider or ""),
            lost_file_owners=list(_owners(inv, prefix, old.provider or "")),
            searched=list(new.searched),
            run_time_load=row.requested_as
            if (row := facts.runtime.row(old.requester, old.need))
            else None,
        )
        for old, new in diff.lost
        if not facts.runtime.satisfied_otherwise(old.requester, old.need, _found_in(after, old))
    ]
    switches = [
        P.ProviderSwitch(
            consumer=in_env(prefix, old.requester),
            consumer_distribution=_owner(inv, prefix, old.requester),
            need=old.need,
            before=in_env(prefix, old.provider or ""),
            after=in_env(prefix, new.provider or ""),
            before_owners=list(_owners(inv, prefix, old.provider or "")),
            after_owners=list(_claims(claimed_after, inv, in_env(prefix, new.provider or ""))),
        )
        for old, new in diff.switched
    ]
    switches += [
        P.ProviderSwitch(
            consumer=in_env(prefix, edge.requester),
            consumer_distribution=_owner(inv, prefix, edge.requester),
            need=edge.need,
            before=clobber.path,
            after=clobber.path,
            before_owners=list(clobber.owners),
            after_owners=[clobber.by],
        )
        for edge, clobber in install.same_path_switches(prefix, before, gone, clobbers)
    ]
    touched = {  # a by-path need loads only after its framework's preload: not probed alone
        rel
        for e in before.values()
        if e.provider
        and e.how != BY_PATH
        and to_env_path(prefix, e.provider) in changed
        and (rel := to_env_path(prefix, e.requester)) is not None
        and rel not in gone
        and _loadable(facts, rel)
    }
    return lost, switches, touched, _run_time_probes(facts, before, after, changed, gone)


def _found_in(edges: Mapping[EdgeKey, Edge], edge: Edge) -> Callable[[str], bool]:
    """Whether another need of ``edge``'s requester resolves in ``edges``."""

    def found(need: str) -> bool:
        other = edges.get((edge.requester, Soname(need)))
        return other is not None and other.provider is not None

    return found


def _loadable(facts: Facts, path: EnvPath) -> bool:
    """Whether a probe may ``dlopen`` ``path``: never an executable (PT_INTERP; glibc refuses
    to load a PIE) nor anything in ``bin/``, which a probe never runs, nor a Python module
    that loads libraries (its run-time loads are probed instead)."""
    info = facts.elf.objects.get(path)
    if path.startswith("bin/") or path.endswith(".py"):
        return False
    return info is None or not info.is_executable


def _run_time_probes(
    facts: Facts,
    before: Mapping[EdgeKey, Edge],
    after: Mapping[EdgeKey, Edge],
    changed: frozenset[EnvPath],
    gone: frozenset[EnvPath],
) -> list[RunTimeProbe]:
    """Every run-time load of each remaining framework object one of whose run-time loads
    the plan changes: found elsewhere, found again (a repair), lost, or its file rewritten.
    Not one that already failed before the plan and still does (unresolved, or its file has
    a need left unmet: a catalogue's ``libcutensorMp`` with no NCCL installed): the plan did
    not cause that, and a probe of it could only fail. A load the plan itself breaks is
    probed, so a forced plan that breaks it is rolled back."""
    prefix = str(facts.inventory.prefix)

    def moved(key: EdgeKey) -> bool:
        old, new = before.get(key), after[key]
        was = old.provider if old else None
        return was != new.provider or (
            new.provider is not None and to_env_path(prefix, new.provider) in changed
        )

    def failing(edges: Mapping[EdgeKey, Edge]) -> set[EdgeKey]:
        unmet = {e.requester for e in edges.values() if e.provider is None}
        return {k for k, e in edges.items() if e.provider is None or e.provider in unmet}

    failed_before, failed_after = failing(before), failing(after)
    loads = [
        key
        for key in after
        if facts.runtime.row(*key) is not None
        and not (key in failed_after and (key in failed_before or key not in before))
    ]
    objects = {
        obj for obj, need in loads if moved((obj, need)) and to_env_path(prefix, obj) not in gone
    }

    def probed(obj: str, need: str) -> str:
        """A Python module's load by name is a by-name loader's (cuda-pathfinder): it finds
        the file wherever the wheel put it; a need met by path is the file the framework
        preloads; a load by full path whose file is gone falls back to the name (the host's
        copy). The probe loads the file the state resolves for each."""
        edge = after[(obj, Soname(need))]
        by_name = obj.endswith(".py") or edge.how == BY_PATH or "/" in need
        return edge.provider if by_name and edge.provider is not None else need

    return [
        RunTimeProbe(
            object=in_env(prefix, obj),
            need=in_env(prefix, (target := probed(obj, need))),
            framework=row.framework,
            search=[] if "/" in target else [in_env(prefix, d) for d in _own_search(facts, obj)],
        )
        for obj, need in sorted(loads)
        if obj in objects and (row := facts.runtime.row(obj, need)) is not None
    ]


def _own_search(facts: Facts, obj: str) -> list[str]:
    """``obj``'s own RPATH (void under RUNPATH) then RUNPATH, expanded: where a dlopen() it
    makes looks before the system's paths."""
    info = facts.elf.objects.get(EnvPath(in_env(str(facts.inventory.prefix), obj)))
    if info is None:
        return []
    origin = posixpath.dirname(obj)
    entries = (*info.effective_rpath, *info.runpath)
    dirs = (expand_entry(e, origin, facts.search) for e in entries)
    return list(dict.fromkeys(d for d in dirs if d is not None))


def _probe_modules(
    inv: Inventory,
    remaining: Mapping[DistName, Distribution],
    touched: set[EnvPath],
    also: set[str],
) -> list[str]:
    """Import names of remaining distributions that own a touched object, are reinstalled,
    or co-own a path the plan deletes (``cv2`` when opencv-python leaves opencv-contrib's)."""
    names = {o for path in touched for o in inv.owners.get(path, ()) if o in remaining}
    names |= {DistName(n) for n in also}
    return sorted({m for n in names for m in remaining[n].top_level})


def _owners(inv: Inventory, prefix: str, path: str) -> tuple[DistName, ...]:
    rel = to_env_path(prefix, path)
    return inv.owners.get(rel, ()) if rel else ()


def _claims(
    after: Mapping[EnvPath, tuple[DistName, ...]], inv: Inventory, path: str
) -> tuple[DistName, ...]:
    """Who claims ``path`` after the plan: ``after`` where it says, else the index."""
    key = EnvPath(path)
    return after[key] if key in after else inv.owners.get(key, ())


def _owner(inv: Inventory, prefix: str, path: str) -> str | None:
    owners = _owners(inv, prefix, path)
    return owners[0] if owners else None


def _requirement_breaks(
    facts: Facts, remaining: Mapping[DistName, Distribution], installs: Sequence[StagedWheel]
) -> list[P.RequirementBreak]:
    """Requires-Dist the after-state (remaining plus installs) leaves unmet, that hold today.

    Extras are those requested today: removing what an extra brings must not make the
    extra look unrequested.
    """
    extras = facts.extras
    before = set(check_requirements(facts.inventory.distributions, facts.marker_env, extras))
    after: dict[DistName, Declared] = {**remaining, **{w.name: w for w in installs}}
    return [p for p in check_requirements(after, facts.marker_env, extras) if p not in before]


def _installs(facts: Facts, pins: Sequence[Pin]) -> list[tuple[P.Install, StagedWheel | None]]:
    """Each install as staged (its files, version and requirements), or bare when unstaged."""
    out: list[tuple[P.Install, StagedWheel | None]] = []
    for name, version in pins:
        wheel = facts.staging.wheels.get((name, version))
        if wheel is None:
            out.append((P.Install(name=name, version=version), None))
            continue
        install = P.Install(
            name=name,
            version=wheel.version,
            paths=sorted(wheel.files),
            requires=list(wheel.requires),
            sha256={p: h for p, h in wheel.files.items() if h and is_payload(p, wheel.dist_info)},
            **_pinned(facts, name, version),
        )
        out.append((install, wheel))
    return out


def _pinned(facts: Facts, name: DistName, version: str | None = None) -> dict[str, str | None]:
    """``wheel`` and ``wheel_sha256`` of a reinstall or install: the local file it was staged
    from (installed exactly, by path), when staging found one."""
    v = version if version is not None else facts.inventory.distributions[name].version
    wheel = facts.staging.wheels.get((name, v))
    if wheel is None or wheel.wheel is None:
        return {}
    return {"wheel": str(wheel.wheel), "wheel_sha256": wheel.wheel_sha256}


def _removed(inv: Inventory, dist: Distribution) -> P.RemovedDistribution:
    present = [inv.files[e.path] for e in dist.files if e.path in inv.files]
    return P.RemovedDistribution(
        name=dist.name,
        version=dist.version,
        dist_info=dist.dist_info,
        files=len(present),
        bytes=sum(s.size for s in present),
    )


def _preconditions(
    facts: Facts,
    touched: Sequence[EnvPath],
    affected: Sequence[DistName],
    installed_over: Sequence[EnvPath],
) -> P.Precondition:
    """What the plan assumes: versions, the bytes at shared and overwritten paths it
    touches, and the RECORDs of the distributions it removes or reinstalls."""
    inv = facts.inventory
    shared = {s.path for s in inv.shared}
    paths = [p for p in touched if p in shared]
    paths += [p for p in installed_over if p in inv.files]
    return P.Precondition(
        distributions={n: d.version for n, d in sorted(inv.distributions.items())},
        path_hashes={p: facts.path_hashes.get(p) for p in sorted(set(paths))},
        records={n: record_digest(inv.distributions[n]) for n in affected},
    )
