"""The flows a user runs (doctor, remove, repair, apply, and the transaction log), typed.

Every command goes target -> facts -> plan -> (apply) in the same way here, so caches are
saved, pending transactions checked and probes built identically whichever command asked.
The CLI parses options into these values, calls one flow and renders what it returns; it
holds no logic of its own. Nothing here prints: events go to an ``on_event`` callback.
"""

from __future__ import annotations

import functools
import os
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from cudafix.model.errors import CudafixError, LockedError, PlanRefused, UnsafeState
from cudafix.model.sources import Sources

if TYPE_CHECKING:
    from cudafix.env.target import TargetEnv
    from cudafix.model.plan import Options, Plan
    from cudafix.plan.doctor import DoctorReport
    from cudafix.plan.facts import Facts
    from cudafix.plan.planner import Request
    from cudafix.tx import transaction

Backend = Literal["uv", "pip"]
"""Which installer applies the plan."""

OnEvent = Callable[[str], None]
"""Where a flow reports progress and warnings (the CLI sends them to stderr)."""


def _quiet(_message: str) -> None:
    """The default ``on_event``: say nothing."""


@dataclass(frozen=True)
class TargetArgs:
    """Which environment: ``--venv`` or ``--python``, else ``$VIRTUAL_ENV``, else ``./.venv``."""

    venv: str | None = None
    python: str | None = None


@dataclass(frozen=True)
class FactArgs:
    """What shapes the facts read from the target."""

    target: TargetArgs = TargetArgs()
    dlopen_tables: tuple[Path, ...] = ()


@dataclass(frozen=True)
class RunArgs:
    """How an approved plan is applied: probes, waiting for the lock, overriding a refusal."""

    auto_probes: bool = True
    probe_code: tuple[str, ...] = ()
    probe_commands: tuple[str, ...] = ()
    probe_timeout: float = 60.0
    lock_timeout: float = 60.0
    force: bool = False
    command: tuple[str, ...] = ()
    """The command line, recorded in the journal for ``history``."""


@dataclass(frozen=True)
class LiveArgs:
    """How ``run`` runs its command: how long it may take, where its output goes."""

    timeout: float | None = None
    echo: tuple[int, int] = (1, 2)
    """File descriptors the command's stdout and stderr are copied to as they come."""


@dataclass(frozen=True)
class RemoveArgs:
    """What ``cudafix remove`` was asked to remove, and how far it may go."""

    selectors: tuple[str, ...]
    exclude: tuple[str, ...] = ()
    repair: bool = False
    keep_shared: bool = False
    allow_broken_requirements: bool = False


@dataclass(frozen=True)
class InstallArgs:
    """What ``cudafix install`` was asked to install (requirement specifiers, as for uv)."""

    specs: tuple[str, ...]
    allow_broken_requirements: bool = False


def locate(target: TargetArgs) -> TargetEnv:
    """The target environment, chosen the way uv chooses it."""
    from cudafix.env.target import locate_target

    return locate_target(target.python, target.venv, os.environ, Path.cwd())


def target_flags(args: TargetArgs, target: TargetEnv) -> str:
    """How a printed next command names this target, so it runs as printed from anywhere:
    the interpreter if the user named one, else the environment's prefix."""
    if args.python is not None and target.python is not None:
        return f"--python {shlex.quote(str(target.python))}"
    return f"--venv {shlex.quote(str(target.prefix))}"


def check_pending(target: TargetEnv, *, mutating: bool, on_event: OnEvent = _quiet) -> None:
    """An unfinished transaction blocks changes (before any planning) and taints reads."""
    from cudafix.tx import transaction

    pending = transaction.pending_transactions(target.prefix)
    hidden = transaction.unreadable_transactions(target.prefix)
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
    if transaction.lock_is_held(target.prefix):
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


def read_facts(args: FactArgs, target: TargetEnv) -> Facts:
    """Everything planning and doctor read from the target, gathered once."""
    from cudafix.plan.facts import gather

    return gather(target, dlopen_tables=args.dlopen_tables)


def _options(sources: Sources, backend: Backend, **policy: bool) -> Options:
    from cudafix.model.plan import Options

    return Options(
        offline=sources.offline,
        find_links=[str(Path(p).absolute()) for p in sources.find_links],
        backend=backend,
        **policy,
    )


def _plan(facts: Facts, request: Request, sources: Sources) -> Plan:
    """Every flow's planning: stage the wheels the plan needs, then plan once on the data."""
    from cudafix.plan.facts import with_staging
    from cudafix.plan.planner import build_plan, wheels_needed

    staged = with_staging(facts, wheels_needed(facts, request), sources)
    return build_plan(staged, request)


# -- the flows ------------------------------------------------------------------------------


def doctor(args: FactArgs, on_event: OnEvent = _quiet) -> DoctorReport:
    """Diagnose the target: what is broken, and the command to run next."""
    from cudafix.plan.doctor import diagnose

    target = locate(args.target)
    check_pending(target, mutating=False, on_event=on_event)
    return diagnose(read_facts(args, target), target_flags(args.target, target))


def plan_remove(
    args: FactArgs,
    request: RemoveArgs,
    sources: Sources,
    backend: Backend,
    *,
    mutating: bool,
    on_event: OnEvent = _quiet,
) -> Plan:
    """The plan for removing what ``request`` selects (``mutating``: it will be applied)."""
    from cudafix.plan.planner import Request
    from cudafix.plan.select import select

    target = locate(args.target)
    check_pending(target, mutating=mutating, on_event=on_event)
    facts = read_facts(args, target)
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
    backend: Backend,
    *,
    mutating: bool,
    on_event: OnEvent = _quiet,
) -> Plan | None:
    """The plan that reinstalls distributions whose files are missing (None: nothing to do)."""
    from cudafix.plan.doctor import repair_candidates
    from cudafix.plan.planner import Request

    target = locate(args.target)
    check_pending(target, mutating=mutating, on_event=on_event)
    facts = read_facts(args, target)
    wanted = repair_candidates(facts)
    if not wanted:
        return None
    request = Request((), (), _options(sources, backend), reinstall=wanted)
    return _plan(facts, request, sources)


def plan_install(
    args: FactArgs,
    request: InstallArgs,
    sources: Sources,
    backend: Backend,
    *,
    mutating: bool,
    on_event: OnEvent = _quiet,
) -> Plan:
    """The plan for ``uv pip install SPEC...`` simulated on the after-state; when refused,
    with the matching-major installs that pass when planned the same way."""
    import shlex

    from cudafix.model.plan import Alternative
    from cudafix.plan.install import matching_builds

    target = locate(args.target)
    check_pending(target, mutating=mutating, on_event=on_event)
    facts = read_facts(args, target)
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


def _install_plan(facts: Facts, request: InstallArgs, sources: Sources, backend: Backend) -> Plan:
    """Resolve with uv (what it would install and uninstall), stage, plan the after-state."""
    from cudafix.plan.install import resolve
    from cudafix.plan.planner import Request

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
    backend: Backend | None,
    *,
    mutating: bool,
    on_event: OnEvent = _quiet,
) -> Plan:
    """A cleanup script (TOML) compiled into one plan; ``backend`` None keeps the script's."""
    from cudafix.plan.script import load_script, script_options, script_request

    loaded = load_script(file)
    options = script_options(loaded, sources, backend)
    target = locate(args.target)
    check_pending(target, mutating=mutating, on_event=on_event)
    facts = read_facts(args, target)
    sources = Sources(options.offline, tuple(options.find_links), sources.fetch)
    return _plan(facts, script_request(loaded, facts, options), sources)


def plan_saved(
    args: FactArgs,
    plan: Plan,
    sources: Sources,
    backend: Backend | None,
    *,
    mutating: bool,
    on_event: OnEvent = _quiet,
) -> Plan:
    """A saved plan aimed at the target (else its own prefix), refused when stale (exit 3)."""
    from cudafix.plan.facts import with_hashes
    from cudafix.plan.preconditions import assumed_paths, check, retarget

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


def execute(plan: Plan, run: RunArgs, on_event: OnEvent = _quiet) -> transaction.TransactionResult:
    """Apply an approved plan as one transaction: commit, or roll back and raise."""
    from cudafix.plan.preconditions import quick_differences
    from cudafix.plan.script import probe_spec
    from cudafix.tx import transaction
    from cudafix.tx.verify import prediction_mismatches

    if plan.verdict == "refused" and not run.force:
        raise PlanRefused("the plan was refused; nothing was changed", context=plan.reasons)
    return transaction.run_transaction(
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
    live: LiveArgs = LiveArgs(),
    *,
    accept: bool = False,
    on_event: OnEvent = _quiet,
) -> transaction.GuardedRun:
    """Run any command that changes the environment (``uv pip install -U torch``,
    ``pip install -r req.txt``) as a transaction: the whole environment is snapshotted by
    hard link, the environment is diagnosed again after, and the run is rolled back when it
    introduced a problem doctor reports (``accept``: commit anyway) or a probe fails. The
    automatic probes import what the distributions the command added or changed provide."""
    from cudafix.plan.doctor import diagnose
    from cudafix.tx import transaction
    from cudafix.tx.probe import ProbeSpec

    target = locate(args.target)
    check_pending(target, mutating=True, on_event=on_event)
    flags = target_flags(args.target, target)
    facts = read_facts(args, target)
    known = {(f.kind, f.message) for f in diagnose(facts, flags).findings}
    before = {d.dist_info for d in facts.inventory.distributions.values()}

    def judge() -> transaction.Judged:
        now = read_facts(args, target)
        after = diagnose(now, flags)
        findings = [
            f"[{f.kind}] {f.message}"
            for f in after.findings
            if f.severity != "info" and (f.kind, f.message) not in known
        ]
        changed = [d for d in now.inventory.distributions.values() if d.dist_info not in before]
        modules = sorted({m for d in changed for m in d.top_level}) if run.auto_probes else []
        spec = ProbeSpec(
            modules=tuple(modules),
            code=run.probe_code,
            commands=run.probe_commands,
            timeout=run.probe_timeout,
        )
        return transaction.Judged(tuple(findings), spec)

    return transaction.run_guarded(
        target.prefix,
        argv,
        judge=judge,
        accept=accept,
        timeout=live.timeout,
        echo=live.echo,
        lock_timeout=run.lock_timeout,
        command=run.command,
        on_event=on_event,
    )


# -- the transaction log --------------------------------------------------------------------


def recover(
    target: TargetArgs, *, dry_run: bool, lock_timeout: float, on_event: OnEvent = _quiet
) -> transaction.RecoveryReport:
    """Roll back every interrupted transaction (``dry_run``: say what would be done)."""
    from cudafix.tx import transaction

    prefix = locate(target).prefix
    return transaction.recover(
        prefix, dry_run=dry_run, lock_timeout=lock_timeout, on_event=on_event
    )


def history(target: TargetArgs) -> tuple[Path, Sequence[transaction.HistoryEntry]]:
    """The target's prefix and its transactions, oldest first."""
    from cudafix.tx import transaction

    prefix = locate(target).prefix
    return prefix, transaction.history(prefix)


def show(target: TargetArgs, txid: str) -> transaction.TransactionDetail:
    """One transaction: its journal and the paths it snapshotted."""
    from cudafix.tx import transaction

    return transaction.show(locate(target).prefix, txid)


def undo(
    target: TargetArgs, txid: str, run: RunArgs, on_event: OnEvent = _quiet
) -> transaction.TransactionResult:
    """Restore the state before a committed transaction, as a new transaction."""
    from cudafix.tx import transaction

    return transaction.undo(
        locate(target).prefix,
        txid,
        lock_timeout=run.lock_timeout,
        command=run.command,
        on_event=on_event,
    )


def gc(target: TargetArgs, keep: int) -> Sequence[str]:
    """Delete old snapshots, keeping the newest ``keep`` committed ones."""
    from cudafix.tx import transaction

    return transaction.gc(locate(target).prefix, keep)
