"""The flows a user runs (doctor, remove, repair, install, apply, run, and the log), typed.

Every command goes target -> facts -> plan -> (apply) the same way here (one opening,
:func:`open_target`), so caches are saved, pending transactions checked and probes built
identically whichever command asked. Loaded through :mod:`cudafix.app`'s lazy boundary;
the argument values are :mod:`cudafix.app`'s.
"""

from __future__ import annotations

import functools
import os
import shlex
from collections.abc import Sequence
from pathlib import Path

from cudafix.app import FactArgs, InstallArgs, RemoveArgs, RunArgs, TargetArgs
from cudafix.env.target import TargetEnv, locate_target
from cudafix.fetch.resolve import exact_pin, resolve
from cudafix.fetch.staging import Pin, Staging, stage
from cudafix.model.doctor import DoctorReport
from cudafix.model.errors import CudafixError, LockedError
from cudafix.model.names import BackendName
from cudafix.model.plan import Alternative, Options, Plan
from cudafix.model.probe import ProbeSpec
from cudafix.model.sources import Sources
from cudafix.model.transaction import (
    GuardedRun,
    HistoryEntry,
    OnEvent,
    RecoveryReport,
    TransactionDetail,
    TransactionResult,
    quiet,
)
from cudafix.plan.doctor import diagnose, repair_candidates, runtime_installs
from cudafix.plan.facts import Facts, gather, with_hashes, with_staging
from cudafix.plan.install import matching_builds
from cudafix.plan.planner import Request, build_plan, wheels_needed
from cudafix.plan.preconditions import assumed_paths, check, quick_differences, retarget
from cudafix.plan.script import load_script, probe_spec, script_options, script_request
from cudafix.plan.select import select
from cudafix.tx import history as tx_history
from cudafix.tx import undo as tx_undo
from cudafix.tx.apply import run_transaction
from cudafix.tx.guard import run_guarded
from cudafix.tx.recovery import lock_is_held, pending_transactions
from cudafix.tx.recovery import recover as tx_recover
from cudafix.tx.verify import prediction_mismatches


def locate(target: TargetArgs) -> TargetEnv:
    """The target environment, chosen the way uv chooses it."""
    return locate_target(target.python, target.venv, os.environ, Path.cwd())


def target_flags(args: TargetArgs, target: TargetEnv) -> str:
    """How a printed next command names this target, so it runs as printed from anywhere:
    the interpreter if the user named one, else the environment's prefix."""
    if args.python is not None and target.python is not None:
        return f"--python {shlex.quote(str(target.python))}"
    return f"--venv {shlex.quote(str(target.prefix))}"


def check_pending(target: TargetEnv, *, mutating: bool, on_event: OnEvent = quiet) -> None:
    """An unfinished transaction blocks changes (before any planning) and taints reads."""
    pending = pending_transactions(target.prefix)
    if not pending:
        return
    if lock_is_held(target.prefix):
        on_event(f"another cudafix run is changing {target.prefix}; this one will wait for it")
        return
    what = f"unfinished transaction {pending[0]} in {target.prefix}"
    recover = f"cudafix recover --venv {target.prefix}"
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
    return target, read_facts(args, target)


def read_facts(args: FactArgs, target: TargetEnv) -> Facts:
    """Everything planning and doctor read from the target, gathered once."""
    return gather(target, dlopen_tables=args.dlopen_tables)


def _options(sources: Sources, backend: BackendName, **policy: bool) -> Options:

    return Options(
        offline=sources.offline,
        find_links=[str(Path(p).absolute()) for p in sources.find_links],
        backend=backend,
        **policy,
    )


def _plan(facts: Facts, request: Request, sources: Sources) -> Plan:
    """Every flow's planning: stage the wheels the plan needs, then plan once on the data."""
    staged = with_staging(facts, _stage(facts, wheels_needed(facts, request), sources))
    return build_plan(staged, request)


def _stage(facts: Facts, pins: Sequence[Pin], sources: Sources) -> Staging:
    """Fetch ``pins`` into a scratch directory (unless ``sources.fetch`` is off)."""
    if not sources.fetch:
        return Staging(fetched=False)
    inv = facts.inventory
    python = inv.python or inv.prefix / "bin" / "python"
    return stage(python, pins, sources, inv.site_packages[0])


# -- the flows ------------------------------------------------------------------------------


def doctor(args: FactArgs, on_event: OnEvent = quiet) -> DoctorReport:
    """Diagnose the target: what is broken, and the command to run next."""
    target, facts = open_target(args, mutating=False, on_event=on_event)
    return diagnose(facts, target_flags(args.target, target))


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
    names = select(inventory.distributions, request.selectors, request.exclude, inventory.unmanaged)
    options = _options(
        sources,
        backend,
        repair=request.repair,
        keep_shared=request.keep_shared,
        allow_broken_requirements=request.allow_broken_requirements,
    )
    return _plan(facts, Request(names, request.selectors, options), sources)


def plan_repair(
    args: FactArgs,
    sources: Sources,
    backend: BackendName,
    *,
    mutating: bool,
    on_event: OnEvent = quiet,
) -> Plan | None:
    """The plan that reinstalls distributions whose files are missing, and installs what a
    framework's requested extra requires for its run-time loads (None: nothing to do)."""
    _target, facts = open_target(args, mutating=mutating, on_event=on_event)
    wanted = repair_candidates(facts)
    specs = tuple(runtime_installs(facts))
    if not wanted and not specs:
        return None
    installs = _pins(facts, specs, sources)
    request = Request((), (), _options(sources, backend), reinstall=wanted, installs=installs)
    return _plan(facts, request, sources)


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
    plan = _install_plan(facts, request, sources, backend)
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
        words = ["cudafix", "install", *specs, "--venv", str(target.prefix)]
        words += ["--offline"] if sources.offline else []
        words += [w for link in sources.find_links for w in ("--find-links", link)]
        pins = ", ".join(f"{i.name}=={i.version}" for i in alt.install)
        summary = (
            f"install {pins}, the build the consumers load today"
            if pins
            else "already satisfied: the build the consumers load today is installed"
        )
        alternatives.append(Alternative(command=shlex.join([*words, "--dry-run"]), summary=summary))
    return plan.model_copy(update={"alternatives": alternatives})


def _install_plan(
    facts: Facts, request: InstallArgs, sources: Sources, backend: BackendName
) -> Plan:
    """Resolve with uv (what it would install and uninstall), stage, plan the after-state."""
    inv = facts.inventory
    python = inv.python or inv.prefix / "bin" / "python"
    resolution = resolve(str(python), request.specs, sources)
    options = _options(
        sources, backend, allow_broken_requirements=request.allow_broken_requirements
    )
    planned = Request(resolution.replaced, request.specs, options, installs=resolution.installs)
    return _plan(facts, planned, sources)


def plan_script(
    args: FactArgs,
    file: Path,
    sources: Sources,
    backend: BackendName | None,
    *,
    mutating: bool,
    on_event: OnEvent = quiet,
) -> Plan:
    """A cleanup script (TOML) compiled into one plan; ``backend`` None keeps the script's."""
    loaded = load_script(file)
    options = script_options(loaded, sources, backend)
    _target, facts = open_target(args, mutating=mutating, on_event=on_event)
    sources = Sources(options.offline, tuple(options.find_links), sources.fetch)
    return _plan(facts, script_request(loaded, facts, options), sources)


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
    links = [str(Path(p).absolute()) for p in sources.find_links] or plan.options.find_links
    options = plan.options.model_copy(
        update={
            "offline": plan.options.offline or sources.offline,
            "find_links": links,
            "backend": backend or plan.options.backend,
        }
    )
    plan = retarget(plan.model_copy(update={"options": options}), target.prefix, target.python)
    check(plan, with_hashes(read_facts(args, target), assumed_paths(plan)))
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
        precondition=functools.partial(quick_differences, plan),
    )


def run_command(
    args: FactArgs,
    argv: Sequence[str],
    run: RunArgs,
    *,
    accept: bool = False,
    on_event: OnEvent = quiet,
) -> GuardedRun:
    """Run any command that changes the environment (``uv pip install -U torch``,
    ``pip install -r req.txt``) as a transaction: the whole site-packages and ``bin/`` are
    snapshotted by hard link, the environment is diagnosed again after, and the run is rolled
    back when it introduced a problem doctor reports (``accept``: commit anyway) or a probe
    fails."""
    target, facts = open_target(args, mutating=True, on_event=on_event)
    flags = target_flags(args.target, target)
    known = {(f.kind, f.message) for f in diagnose(facts, flags).findings}

    def judge() -> list[str]:
        after = diagnose(read_facts(args, target), flags)
        return [
            f"[{f.kind}] {f.message}"
            for f in after.findings
            if f.severity != "info" and (f.kind, f.message) not in known
        ]

    roots = [*facts.inventory.site_packages, "bin"]
    probes = ProbeSpec(code=run.probe_code, commands=run.probe_commands, timeout=run.probe_timeout)
    return run_guarded(
        target.prefix,
        roots,
        argv,
        judge=judge,
        probes=probes,
        accept=accept,
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
    """One transaction: its journal and the paths it snapshotted."""
    return tx_history.show(locate(target).prefix, txid)


def undo(
    target: TargetArgs, txid: str, run: RunArgs, on_event: OnEvent = quiet
) -> TransactionResult:
    """Restore the state before a committed transaction, as a new transaction."""
    return tx_undo.undo(
        locate(target).prefix,
        txid,
        lock_timeout=run.lock_timeout,
        command=run.command,
        on_event=on_event,
    )


def gc(target: TargetArgs, keep: int) -> Sequence[str]:
    """Delete old snapshots, keeping the newest ``keep`` committed ones."""
    return tx_history.gc(locate(target).prefix, keep)
