"""The flows a user runs (doctor, remove, repair, install, apply, run, and the log), typed.

Every command goes target -> facts -> plan -> (apply) the same way here (one opening,
:func:`open_target`), so caches are saved, pending transactions checked and probes built
identically whichever command asked. Loaded through :mod:`cudafix.app`'s lazy boundary;
the argument values are :mod:`cudafix.app`'s.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from cudafix.app import FactArgs, InstallArgs, LiveArgs, Progress, RemoveArgs, RunArgs, TargetArgs
from cudafix.env.answers import (
    Answer,
    ReadSet,
    answer_key,
    recall,
    remember,
    settled_stamp,
    sorted_unique,
    stamp,
)
from cudafix.env.inventory import Distribution
from cudafix.env.statedir import STATE_DIR_NAME, StateDir
from cudafix.env.target import TargetEnv, locate_target
from cudafix.env.treecache import TreeCache
from cudafix.fetch.backend import find_pip
from cudafix.fetch.resolve import exact_pin, resolve
from cudafix.fetch.staging import Pin, Staging, stage
from cudafix.gather import gather, live_differences, with_hashes, with_staging
from cudafix.linker.elfindex import SHARED_SYSTEM
from cudafix.linker.hostcache import HOST
from cudafix.model.commands import TargetFlags, cudafix_argv, cudafix_line, venv_flags
from cudafix.model.doctor import DoctorReport, Finding, new_problems
from cudafix.model.errors import CudafixError, InputError, LockedError, UnsafeState
from cudafix.model.names import BackendName, DistName, EnvPath
from cudafix.model.plan import PLAN_SCHEMA_VERSION, Alternative, Options, Plan, input_problems
from cudafix.model.probe import ProbeSpec, probe_spec
from cudafix.model.reasons import InstallToday
from cudafix.model.sources import Sources, link_path
from cudafix.model.transaction import (
    GuardedRun,
    HistoryEntry,
    OnEvent,
    RecoveryReport,
    TransactionDetail,
    TransactionResult,
    UndoPreview,
    quiet,
)
from cudafix.plan.doctor import diagnose, repair_candidates, runtime_installs
from cudafix.plan.facts import Facts
from cudafix.plan.install import matching_builds
from cudafix.plan.planner import Request, build_plan, wheels_needed
from cudafix.plan.preconditions import assumed_paths, check, retarget
from cudafix.plan.requirements import missing_requirements
from cudafix.plan.script import load_script, script_options, script_request
from cudafix.plan.select import select
from cudafix.tx import history as tx_history
from cudafix.tx import undo as tx_undo
from cudafix.tx.apply import run_transaction
from cudafix.tx.guard import Judged, run_guarded
from cudafix.tx.recovery import lock_is_held, pending_transactions, unreadable_transactions
from cudafix.tx.recovery import recover as tx_recover
from cudafix.tx.verify import prediction_mismatches


def locate(target: TargetArgs) -> TargetEnv:
    """The target environment, chosen the way uv chooses it."""
    return locate_target(target.python, target.venv, os.environ, Path.cwd())


def target_flags(args: TargetArgs, target: TargetEnv) -> TargetFlags:
    """How a printed next command names this target, so it runs as printed from anywhere:
    the interpreter if the user named one, else the environment's prefix."""
    if args.python is not None and target.python is not None:
        return ("--python", str(target.python))
    return venv_flags(target.prefix)


def check_pending(target: TargetEnv, *, mutating: bool, on_event: OnEvent = quiet) -> None:
    """An unfinished transaction blocks changes (before any planning) and taints reads."""
    pending = pending_transactions(target.prefix)
    hidden = unreadable_transactions(target.prefix)
    if hidden and mutating:
        raise UnsafeState(
            f"transaction {hidden[0]} in {target.prefix} is not readable by this user; "
            "nothing was changed",
            hint="run cudafix as a user who can write the environment",
        )
    if hidden:
        on_event(f"note: transaction {hidden[0]} is not readable by this user; not checked")
    if not pending:
        return
    if lock_is_held(target.prefix):
        on_event(
            f"another cudafix run is changing {target.prefix}; this one will wait for it"
            if mutating
            else f"warning: another cudafix run is changing {target.prefix}; this report "
            "may show it half-done (run again when it has finished)"
        )
        return
    what = f"unfinished transaction {pending[0]} in {target.prefix}"
    recover = cudafix_line("recover", target=venv_flags(target.prefix))
    if mutating:
        raise LockedError(
            f"{what}: the environment may be half-changed",
            hint=f"{recover}  (add --dry-run to look first)",
        )
    on_event(f"warning: {what}; the environment may be half-changed. Run `{recover}`.")


def open_target(
    args: FactArgs, *, mutating: bool, on_event: OnEvent = quiet
) -> tuple[TargetEnv, Facts]:
    """Every flow's opening: locate the target, check for unfinished transactions (before
    any planning), and read its facts once."""
    target = locate(args.target)
    check_pending(target, mutating=mutating, on_event=on_event)
    return target, read_facts(args, target, on_event)


def read_facts(args: FactArgs, target: TargetEnv, on_event: OnEvent = quiet) -> Facts:
    """Everything planning and doctor read from the target, gathered once."""
    on_event(Progress(f"Environment: {target.prefix}: reading distributions and ELF objects"))
    facts = gather(target, dlopen_tables=args.dlopen_tables)
    on_event(
        Progress(
            f"  read {len(facts.inventory.distributions)} distributions, "
            f"{len(facts.elf.objects)} ELF objects"
        )
    )
    return facts


def _options(sources: Sources, backend: BackendName, **policy: bool) -> Options:
    """The plan's options: its policy and where its wheels come from (kept in a saved plan)."""
    return Options(backend=backend, **_source_options(sources)).model_copy(update=policy)


def _source_options(sources: Sources) -> dict[str, Any]:
    """``Options`` fields for ``sources``, local wheel directories made absolute."""
    return {
        "offline": sources.offline,
        "find_links": [link_path(p) for p in sources.find_links],
        "index_url": sources.index_url,
        "extra_index_urls": list(sources.extra_index_urls),
        "fetched": sources.fetch,
    }


def _plan(facts: Facts, request: Request, sources: Sources, on_event: OnEvent = quiet) -> Plan:
    """Every flow's planning: stage the wheels the plan needs, then plan once on the data."""
    _check_backend(request.options.backend, facts)
    pins = wheels_needed(facts, request)
    if pins and sources.fetch:
        names = ", ".join(f"{n}=={v}" for n, v in pins)
        on_event(
            Progress(
                f"  fetching {len(pins)} wheel(s) to check them: {names} (uv installs them "
                "into a scratch directory outside the environment)"
            )
        )
    staged = with_staging(facts, _stage(facts, pins, sources))
    if staged.staging.wheels:
        on_event(Progress(f"  fetched {_fetched(staged)}"))
    on_event(Progress("  simulating the plan"))
    return build_plan(staged, request)


def _check_backend(backend: BackendName, facts: Facts) -> None:
    """``--backend pip`` only where some pip can act on the target: refused while planning,
    not after a dry run passed."""
    if backend != "pip":
        return
    inv = facts.inventory
    python = inv.python or inv.prefix / "bin" / "python"
    if find_pip(python) is None:
        raise InputError(
            f"--backend pip: no pip can act on {inv.prefix} (it has none, cudafix's own "
            "interpreter has none, and there is no pip on PATH)",
            hint="use the default backend (uv), or install pip where cudafix can run it",
        )


def _fetched(facts: Facts) -> str:
    """What staging unpacked, wheel by wheel, with sizes."""
    wheels = sorted(facts.staging.wheels.items())
    return ", ".join(f"{n}=={v} ({w.size / 2**20:.1f} MiB unpacked)" for (n, v), w in wheels)


def _stage(facts: Facts, pins: Sequence[Pin], sources: Sources) -> Staging:
    """Fetch ``pins`` into a scratch directory (unless ``sources.fetch`` is off)."""
    if not sources.fetch:
        return Staging(fetched=False)
    inv = facts.inventory
    python = inv.python or inv.prefix / "bin" / "python"
    return stage(python, pins, sources, inv.site_packages[0])


def remember_answer(
    args: FactArgs,
    answers: Mapping[str, Answer],
    *,
    since_ns: int,
    read: ReadSet | None = None,
    ctimes: bool = True,
) -> bool:
    """Keep a read-only command's answers (by key) for its next identical run, stamped with
    what they were read from: ``read``, else what the last walk read (:func:`read_set`);
    ``ctimes`` as :func:`cudafix.env.answers.remember` takes it.

    Never while a transaction is unfinished or unreadable: such an answer carries a
    warning that must be given again, freshly, each time.
    """
    target = locate(args.target)
    if pending_transactions(target.prefix) or unreadable_transactions(target.prefix):
        return False
    if read is None:
        tree = TreeCache.load(StateDir(target.prefix).tree_cache).read_paths()
        read = read_set(args, target, tree)
    return remember(target.prefix, answers, read, since_ns=since_ns, ctimes=ctimes)


def read_set(
    args: FactArgs, target: TargetEnv, tree: Sequence[str], search_dirs: Sequence[str] = ()
) -> ReadSet:
    """What facts read from ``target`` (and what was resolved on them) depend on: the
    ``tree`` paths the walk listed and watched (``Facts.read_paths``), the interpreter, the
    host files the loader consulted, the extra dlopen tables (:mod:`cudafix.env.answers`);
    ``search_dirs``: system directories a resolution still to come will list."""
    state = StateDir(target.prefix)
    env = [*tree, "pyvenv.cfg", f"{STATE_DIR_NAME}/{state.transactions.name}"]
    host = [*HOST.paths(), *SHARED_SYSTEM.consulted(), *map(str, args.dlopen_tables)]
    host += search_dirs
    if target.python is not None:
        host.append(str(target.python))
    return ReadSet(sorted_unique(env), sorted_unique(host))


# -- the flows ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Diagnosis:
    """doctor's report, and what a later ``run`` judges its command against (the same
    reading, remembered beside the report: :func:`run_command`)."""

    report: DoctorReport
    before_run: Mapping[str, Answer]


def doctor(args: FactArgs, on_event: OnEvent = quiet) -> Diagnosis:
    """Diagnose the target: what is broken, and the command to run next."""
    target, facts = open_target(args, mutating=False, on_event=on_event)
    on_event(Progress("  diagnosing"))
    report = diagnose(facts, target_flags(args.target, target))
    return Diagnosis(report, {_before_run_key(args): _before_run_answer(facts, report.findings)})


def plan_remove(
    args: FactArgs,
    request: RemoveArgs,
    sources: Sources,
    backend: BackendName,
    *,
    mutating: bool,
    on_event: OnEvent = quiet,
) -> Plan:
    """The plan for removing what ``request`` selects (``mutating``: it will be applied)."""
    _target, facts = open_target(args, mutating=mutating, on_event=on_event)
    inventory = facts.inventory
    versions = {n: d.version for n, d in inventory.distributions.items()}
    names = select(
        inventory.distributions, request.selectors, request.exclude, inventory.unmanaged, versions
    )
    options = _options(
        sources,
        backend,
        repair=request.repair,
        keep_shared=request.keep_shared,
        allow_broken_requirements=request.allow_broken_requirements,
    )
    return _plan(facts, Request(names, request.selectors, options), sources, on_event)


def plan_repair(
    args: FactArgs,
    sources: Sources,
    backend: BackendName,
    *,
    mutating: bool,
    on_event: OnEvent = quiet,
) -> Plan | None:
    """The plan that reinstalls distributions whose files are missing, and installs required
    distributions that are not installed (at the version asked for) and what a framework's
    requested extra requires for its run-time loads (None: nothing to do)."""
    _target, facts = open_target(args, mutating=mutating, on_event=on_event)
    wanted = repair_candidates(facts)
    inv = facts.inventory
    missing = {m.spec for m in missing_requirements(inv.distributions, facts.marker_env)}
    specs = tuple(sorted(missing | set(runtime_installs(facts))))
    if not wanted and not specs:
        return None
    if specs:
        on_event(Progress(f"  asking uv what installing {' '.join(specs)} takes"))
    installs = _pins(facts, specs, sources)
    request = Request((), (), _options(sources, backend), reinstall=wanted, installs=installs)
    return _plan(facts, request, sources, on_event)


def _pins(facts: Facts, specs: tuple[str, ...], sources: Sources) -> tuple[Pin, ...]:
    """Exact pins for requirement specifiers: ``name==V`` as written, else what uv resolves
    for them against the target and the plan's sources (their missing dependencies too)."""
    exact = [pin for spec in specs if (pin := exact_pin(spec)) is not None]
    ranged = [spec for spec in specs if exact_pin(spec) is None]
    if not ranged:
        return tuple(exact)
    inv = facts.inventory
    resolved = resolve(str(inv.python or inv.prefix / "bin" / "python"), ranged, sources)
    have = {name for name, _ in exact}
    return (*exact, *(pin for pin in resolved.installs if pin[0] not in have))


def plan_install(
    args: FactArgs,
    request: InstallArgs,
    sources: Sources,
    backend: BackendName,
    *,
    mutating: bool,
    on_event: OnEvent = quiet,
) -> Plan:
    """The plan for ``uv pip install SPEC...`` simulated on the after-state; when refused,
    with the matching-major installs that pass when planned the same way."""

    target, facts = open_target(args, mutating=mutating, on_event=on_event)
    plan = _install_plan(facts, request, sources, backend, on_event)
    if plan.verdict == "pass":
        return plan
    alternatives = []
    for specs in matching_builds(plan, request.specs):
        try:
            alt = _install_plan(
                facts, InstallArgs(specs, request.allow_broken_requirements), sources, backend
            )
        except CudafixError:
            continue
        if alt.verdict != "pass":
            continue
        if not alt.install:
            continue  # already satisfied: running it would change nothing, so not a way out
        words = cudafix_argv(
            "install", *specs, target=venv_flags(target.prefix), tail=sources.cli_args()
        )
        does = InstallToday(pins=[f"{i.name}=={i.version}" for i in alt.install])
        alternatives.append(Alternative(argv=[*words, "--dry-run"], summary=does))
    return plan.model_copy(update={"alternatives": alternatives})


def _install_plan(
    facts: Facts,
    request: InstallArgs,
    sources: Sources,
    backend: BackendName,
    on_event: OnEvent = quiet,
) -> Plan:
    """Resolve with uv (what it would install and uninstall), stage, plan the after-state."""
    inv = facts.inventory
    python = inv.python or inv.prefix / "bin" / "python"
    on_event(Progress(f"  asking uv what installing {' '.join(request.specs)} takes"))
    resolution = resolve(str(python), request.specs, sources)
    options = _options(
        sources, backend, allow_broken_requirements=request.allow_broken_requirements
    )
    planned = Request(resolution.replaced, request.specs, options, installs=resolution.installs)
    return _plan(facts, planned, sources, on_event)


def plan_script(
    args: FactArgs,
    file: Path,
    text: str,
    sources: Sources,
    backend: BackendName | None,
    *,
    mutating: bool,
    on_event: OnEvent = quiet,
) -> Plan:
    """A cleanup script (TOML, ``text`` read from ``file``) compiled into one plan;
    ``backend`` None keeps the script's."""
    loaded = load_script(file, text)
    options = script_options(loaded, sources, backend)
    _target, facts = open_target(args, mutating=mutating, on_event=on_event)
    sources = replace(options.sources, fetch=sources.fetch)
    return _plan(facts, script_request(loaded, facts, options), sources, on_event)


def _schema_version(text: str) -> object:
    """The ``schema_version`` a plan file states, or None when it states none."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data.get("schema_version") if isinstance(data, dict) else None


def read_plan(file: Path, text: str) -> Plan:
    """Parse a plan file, or raise :class:`InputError` (exit 2) saying what is wrong.

    The schema version is read first: a plan another cudafix wrote is refused by its
    version, not by whichever field changed shape since.
    """
    version = _schema_version(text)
    if version is not None and version != PLAN_SCHEMA_VERSION:
        raise InputError(
            f"{file}: plan schema {version}; this cudafix reads {PLAN_SCHEMA_VERSION}",
            hint="write it again with this cudafix: cudafix remove ... --dry-run --out plan.json",
        )
    try:
        plan = Plan.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "plan"
        raise InputError(
            f"{file}: not a cudafix plan ({exc.error_count()} problem(s)); {where}: {first['msg']}",
            hint="write one with: cudafix remove ... --dry-run --out plan.json",
        ) from exc
    problems = input_problems(plan)
    if problems:
        raise InputError(
            f"{file}: refused, {len(problems)} field(s) are not what they claim; {problems[0]}",
            context=problems[1:],
            hint="a plan names distributions, versions, modules and paths, never options; "
            "write a new one with --dry-run --out",
        )
    return plan


def plan_saved(
    args: FactArgs,
    plan: Plan,
    sources: Sources,
    backend: BackendName | None,
    *,
    mutating: bool,
    on_event: OnEvent = quiet,
) -> Plan:
    """A saved plan aimed at the target (else its own prefix), refused when stale (exit 3)."""
    own = args.target.venv is None and args.target.python is None
    target = locate(TargetArgs(plan.target.prefix, None) if own else args.target)
    check_pending(target, mutating=mutating, on_event=on_event)
    links = [link_path(p) for p in sources.find_links] or plan.options.find_links
    saved = plan.options
    options = saved.model_copy(
        update={
            "offline": saved.offline or sources.offline,
            "find_links": links,
            "index_url": sources.index_url or saved.index_url,
            "extra_index_urls": list(sources.extra_index_urls) or saved.extra_index_urls,
            "backend": backend or saved.backend,
        }
    )
    plan = retarget(plan.model_copy(update={"options": options}), target.prefix, target.python)
    facts = with_hashes(read_facts(args, target, on_event), assumed_paths(plan))
    _check_backend(plan.options.backend, facts)
    check(plan, facts)
    return plan


def execute(plan: Plan, run: RunArgs, on_event: OnEvent = quiet) -> TransactionResult:
    """Apply an approved plan as one transaction: commit, or roll back and raise."""
    return run_transaction(
        plan,
        probes=probe_spec(
            plan,
            auto=run.auto_probes,
            code=run.probe_code,
            commands=run.probe_commands,
            timeout=run.probe_timeout,
        ),
        lock_timeout=run.lock_timeout,
        verify=functools.partial(prediction_mismatches, plan),
        force=run.force,
        command=run.command,
        on_event=on_event,
        precondition=functools.partial(live_differences, plan),
    )


@dataclass(frozen=True)
class _Before:
    """What ``run`` judges its command against: the state the diagnosis read before it."""

    read: ReadSet
    """What the diagnosis read: unchanged after the command, nothing new can be wrong."""
    dist_infos: frozenset[str]
    """The distributions installed (their ``.dist-info`` EnvPaths): the others are probed."""
    findings: Sequence[Finding]
    """doctor's findings (remembered, or read now and kept for the next run)."""
    owners: Callable[[Sequence[str]], list[str]]
    """``NAME==VERSION`` of the distributions whose RECORD claims any of the paths."""


def _before_run_key(args: FactArgs) -> str:
    return answer_key(("before-run", args), {})


def _before_run_answer(facts: Facts, findings: Sequence[Finding]) -> Answer:
    """doctor's findings and the distributions they were found among, kept as an answer
    (:mod:`cudafix.env.answers`) so that ``run`` need not read them again."""
    body = {
        "findings": [f.model_dump(mode="json") for f in findings],
        "dist_infos": sorted(d.dist_info for d in facts.inventory.distributions.values()),
        "search_dirs": _search_dirs(facts),
    }
    return Answer(json.dumps(body, separators=(",", ":")), 0)


def _search_dirs(facts: Facts) -> list[str]:
    """The system directories the loader lists (its defaults, ``LD_LIBRARY_PATH``): the
    judgement after the command lists them again, so they are part of what it reads."""
    return [*facts.search.default_dirs, *facts.search.ld_library_path]


def _remembered_before(args: FactArgs, target: TargetEnv, on_event: OnEvent) -> _Before | None:
    """The last reading doctor's findings were kept from (by ``doctor``, or by a ``run``
    that read first), when nothing it was read from has changed since but ctimes (None:
    none kept, or not this user's, or stale); the environment then need not be read
    again before the command. Ctimes alone move with every run's snapshot, and doctor's
    findings do not depend on them (:func:`cudafix.env.answers.recall`)."""
    found = recall(target.prefix, _before_run_key(args), ctimes=False)
    if found is None:
        return None
    try:
        body = json.loads(found.answer.out)
        findings = tuple(Finding.model_validate(f) for f in body["findings"])
        dist_infos = frozenset(str(d) for d in body["dist_infos"])
        search_dirs = [str(d) for d in body["search_dirs"]]
    except (ValueError, TypeError, KeyError, ValidationError):
        return None
    on_event(
        Progress(
            f"Environment: {target.prefix}: nothing doctor's last reading depends on changed "
            "since; the command is judged against its findings"
        )
    )
    host = sorted_unique([*found.read.host, *search_dirs])  # listed again after the command

    def owners(paths: Sequence[str]) -> list[str]:
        # asked only when the command wrote files in place, which keeps their owners
        # installed: those still installed that were installed before
        now = read_facts(args, target).inventory
        kept = {n: d for n, d in now.distributions.items() if d.dist_info in dist_infos}
        return _owners(kept, now.owners, paths)

    return _Before(ReadSet(found.read.env, host), dist_infos, findings, owners)


def _read_before(
    args: FactArgs, target: TargetEnv, flags: TargetFlags, on_event: OnEvent
) -> _Before:
    """The target's reading before the command, read now; its findings are kept for the
    next run, as doctor keeps them (:func:`_remembered_before`)."""
    started = time.time_ns()
    facts = read_facts(args, target, on_event)
    inv = facts.inventory
    read = read_set(args, target, facts.read_paths, _search_dirs(facts))
    findings = diagnose(facts, flags).findings
    kept = {_before_run_key(args): _before_run_answer(facts, findings)}
    remember_answer(args, kept, since_ns=started, read=read, ctimes=False)
    return _Before(
        read,
        frozenset(d.dist_info for d in inv.distributions.values()),
        findings,
        functools.partial(_owners, inv.distributions, inv.owners),
    )


def _owners(
    dists: Mapping[DistName, Distribution],
    owned: Mapping[EnvPath, Sequence[DistName]],
    paths: Sequence[str],
) -> list[str]:
    names = {n for p in paths for n in owned.get(EnvPath(p), ())}
    return sorted(f"{n}=={dists[n].version}" for n in names if n in dists)


def _said(findings: Sequence[Finding]) -> list[str]:
    return [f"[{f.kind}] {f.message}" for f in findings]


def run_command(
    args: FactArgs,
    argv: Sequence[str],
    run: RunArgs,
    live: LiveArgs = LiveArgs(),  # noqa: B008 - frozen value
    *,
    accept: bool = False,
    on_event: OnEvent = quiet,
) -> GuardedRun:
    """Run any command that changes the environment (``uv pip install -U torch``,
    ``pip install -r req.txt``) as a transaction: the whole environment is snapshotted, the
    environment is diagnosed again after, and the run is rolled back when it introduced a
    problem doctor reports (``accept``: commit anyway) or a probe fails. The automatic
    probes import what the distributions the command added or changed provide."""
    target = locate(args.target)
    check_pending(target, mutating=True, on_event=on_event)
    flags = target_flags(args.target, target)
    before = _remembered_before(args, target, on_event) or _read_before(
        args, target, flags, on_event
    )
    start: list[str] = []

    def ready() -> None:
        start.append(settled_stamp(target.prefix, before.read))

    def probes(modules: Sequence[str]) -> ProbeSpec:
        return ProbeSpec(
            modules=tuple(modules),
            code=run.probe_code,
            commands=run.probe_commands,
            timeout=run.probe_timeout,
        )

    def judge() -> Judged:
        if start and stamp(target.prefix, before.read) == start[0]:
            on_event(Progress("  nothing the diagnosis reads changed: no new problems"))
            return Judged((), probes(()))
        now = read_facts(args, target)
        findings = _said(new_problems(before.findings, diagnose(now, flags).findings))
        dists = now.inventory.distributions.values()
        changed = [d for d in dists if d.dist_info not in before.dist_infos]
        modules = sorted({m for d in changed for m in d.top_level}) if run.auto_probes else []
        return Judged(tuple(findings), probes(modules))

    return run_guarded(
        target.prefix,
        argv,
        judge=judge,
        owners=before.owners,
        ready=ready,
        accept=accept,
        timeout=live.timeout,
        echo=live.echo,
        lock_timeout=run.lock_timeout,
        command=run.command,
        on_event=on_event,
    )


# -- the transaction log --------------------------------------------------------------------


def recover(
    target: TargetArgs, *, dry_run: bool, lock_timeout: float, on_event: OnEvent = quiet
) -> RecoveryReport:
    """Roll back every interrupted transaction (``dry_run``: say what would be done)."""
    prefix = locate(target).prefix
    return tx_recover(prefix, dry_run=dry_run, lock_timeout=lock_timeout, on_event=on_event)


def history(target: TargetArgs) -> tuple[Path, Sequence[HistoryEntry]]:
    """The target's prefix and its transactions, oldest first."""
    prefix = locate(target).prefix
    return prefix, tx_history.history(prefix)


def show(target: TargetArgs, txid: str) -> TransactionDetail:
    """One transaction (a unique id prefix, or ``last``): its journal and snapshot paths."""
    prefix = locate(target).prefix
    return tx_history.show(prefix, tx_history.resolve(prefix, txid))


def undo_preview(target: TargetArgs, txid: str) -> UndoPreview:
    """What undoing ``txid`` (a unique id prefix, or ``last``) would do; changes nothing."""
    prefix = locate(target).prefix
    return tx_undo.preview(prefix, tx_history.resolve(prefix, txid))


def undo(
    args: FactArgs,
    txid: str,
    run: RunArgs,
    *,
    accept: bool = False,
    on_event: OnEvent = quiet,
) -> TransactionResult:
    """Restore the state before a committed transaction, as a new transaction: the imports
    its plan probed are probed again, and doctor's findings after are compared with before
    (an undo that puts back a broken state is rolled back and says so, unless ``accept``)."""
    target, facts = open_target(args, mutating=True, on_event=on_event)
    flags = target_flags(args.target, target)
    before = diagnose(facts, flags).findings

    def judge() -> list[str]:
        """Errors block (an import the undo would break); warnings it brings back are said:
        they were there before the transaction being undone."""
        found = new_problems(before, diagnose(read_facts(args, target), flags).findings)
        for said in _said([f for f in found if f.severity != "error"]):
            on_event(f"warning: the undo brings back {said}")
        return _said([f for f in found if f.severity == "error"])

    probes = ProbeSpec(code=run.probe_code, commands=run.probe_commands, timeout=run.probe_timeout)
    full = tx_history.resolve(target.prefix, txid)
    added = tx_history.entry(StateDir(target.prefix).tx(full)).installed
    dists = facts.inventory.distributions
    gone = [m for n in added if (d := dists.get(DistName(n))) is not None for m in d.top_level]
    return tx_undo.undo(
        target.prefix,
        full,
        gone=gone,
        probes=probes if run.auto_probes else ProbeSpec(timeout=run.probe_timeout),
        judge=judge,
        accept=accept,
        lock_timeout=run.lock_timeout,
        command=run.command,
        on_event=on_event,
    )


def gc(target: TargetArgs, keep: int) -> tuple[Sequence[str], int]:
    """Delete old snapshots, keeping the newest ``keep`` committed ones; with the bytes
    that freed (snapshot files no longer linked from the environment)."""
    prefix = locate(target).prefix
    freed = tx_history.freeable(prefix, tx_history.collectable(prefix, keep))
    return tx_history.gc(prefix, keep), freed
