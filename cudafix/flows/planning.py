"""Making a plan: for a removal, a repair, an install, a cleanup script or a saved plan file.

Each opens its target (:mod:`.target`), turns the request into the planner's, stages the
wheels the plan needs outside the environment, then plans once on that data
(:func:`_plan`); a saved plan is checked against the target instead, and refused when
stale. Nothing here changes the environment.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from cudafix.env.memo.answers import ReadSet
from cudafix.env.target import interpreter
from cudafix.fetch.backend import find_pip
from cudafix.fetch.resolve import exact_pin, resolve
from cudafix.fetch.staged import Pin, Staging
from cudafix.fetch.staging import stage
from cudafix.flows.target import check_pending, facts_read_set, locate, open_target, read_facts
from cudafix.gather import with_hashes, with_staging
from cudafix.model.args import FactArgs, InstallArgs, RemoveArgs, TargetArgs
from cudafix.model.commands import cudafix_argv, venv_flags
from cudafix.model.errors import CudafixError, InputError
from cudafix.model.names import BackendName, DistName
from cudafix.model.plan import PLAN_SCHEMA_VERSION, Alternative, Options, Plan
from cudafix.model.reasons import InstallToday, ReinstallWhy, RequirementsSetAside
from cudafix.model.sources import Sources, link_path
from cudafix.model.transaction import OnEvent, RunEvent, quiet
from cudafix.plan.admit import input_problems
from cudafix.plan.doctor import repair_candidates, runtime_installs
from cudafix.plan.facts import Facts
from cudafix.plan.gone import returning_installs, without_returning
from cudafix.plan.install import matching_builds
from cudafix.plan.planner import Request, build_plan, wheels_needed
from cudafix.plan.preconditions import assumed_paths, check, retarget
from cudafix.plan.requirements import missing_requirements
from cudafix.plan.select import select
from cudafix.plan.versions import jointly


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
            RunEvent(
                "progress",
                f"  fetching {len(pins)} wheel(s) to check them: {names} (uv unpacks them in a "
                f"scratch directory; {facts.inventory.prefix} is not changed)",
            )
        )
    staged = with_staging(facts, _stage(facts, pins, sources))
    if staged.staging.wheels:
        on_event(RunEvent("progress", f"  fetched {_fetched(staged)}"))
    on_event(RunEvent("progress", "  simulating the plan"))
    plan = build_plan(staged, request)
    facts.host.save()
    return plan


def _check_backend(backend: BackendName, facts: Facts) -> None:
    """``--backend pip`` only where some pip can act on the target: refused while planning,
    not after a dry run passed."""
    if backend != "pip":
        return
    inv = facts.inventory
    python = interpreter(inv.prefix, inv.python)
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
    python = interpreter(inv.prefix, inv.python)
    return stage(python, pins, sources, inv.site_packages[0])


@dataclass(frozen=True)
class Planned:
    """A plan, and what it was read from."""

    plan: Plan
    read: ReadSet
    """The walk's paths and the host files the planning consulted
    (:func:`~cudafix.flows.target.facts_read_set`): a dry run's answer is remembered by
    them, with no second reading of the tree cache to learn them."""


def plan_remove(
    args: FactArgs,
    request: RemoveArgs,
    sources: Sources,
    backend: BackendName,
    *,
    mutating: bool,
    on_event: OnEvent = quiet,
) -> Planned:
    """The plan for removing what ``request`` selects (``mutating``: it will be applied)."""
    target, facts = open_target(args, mutating=mutating, on_event=on_event)
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
    plan = _plan(facts, Request(names, request.selectors, options), sources, on_event)
    return Planned(
        plan, facts_read_set(args, target, facts.read_paths, host=facts.host.consulted())
    )


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
    missing = {
        m.spec for m in jointly(facts, missing_requirements(inv.distributions, facts.marker_env))
    }
    returning = returning_installs(facts)
    needed = without_returning(dict.fromkeys(runtime_installs(facts)), returning)
    ranged = without_returning(dict.fromkeys(missing | set(needed)), returning)
    specs = tuple(sorted({*ranged, *returning}))
    if not wanted and not specs:
        return None
    plan = _repair_plan(facts, wanted, specs, sources, backend, on_event)
    # requirements unmet before the break (extras installed --no-deps): a plan refused for
    # what installing them brings repairs what is broken without them, and says so
    fixing = tuple(sorted({*needed, *returning}))
    if plan.verdict == "pass" or fixing == specs or not (wanted or fixing):
        return plan
    on_event(RunEvent("progress", "  refused with the unmet requirements: planning without them"))
    alone = _repair_plan(facts, wanted, fixing, sources, backend, on_event)
    if alone.verdict != "pass":
        return plan
    aside = RequirementsSetAside(
        subject="repair",
        specs=[s for s in specs if s not in fixing],
        reasons=len(plan.reasons),
        shown=plan.reasons[:SHOWN_REASONS],
    )
    return alone.model_copy(update={"warnings": [*alone.warnings, aside]})


SHOWN_REASONS = 3
"""Reasons a repair's left-out requirements would be refused for, kept to be shown."""


def _repair_plan(
    facts: Facts,
    wanted: Mapping[DistName, ReinstallWhy],
    specs: tuple[str, ...],
    sources: Sources,
    backend: BackendName,
    on_event: OnEvent,
) -> Plan:
    """The repair that reinstalls ``wanted`` and installs ``specs`` (resolved by uv)."""
    if specs:
        on_event(RunEvent("progress", f"  asking uv what installing {' '.join(specs)} takes"))
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
    resolved = resolve(str(interpreter(inv.prefix, inv.python)), ranged, sources)
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
    for specs in matching_builds(plan, request.specs, facts.cuda_majors):
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
    python = interpreter(inv.prefix, inv.python)
    on_event(RunEvent("progress", f"  asking uv what installing {' '.join(request.specs)} takes"))
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
    from cudafix.plan.script import load_script, script_options, script_request  # its models

    loaded = load_script(file, text)
    options = script_options(loaded, sources, backend)
    _target, facts = open_target(args, mutating=mutating, on_event=on_event)
    sources = replace(options.sources, fetch=sources.fetch)
    return _plan(facts, script_request(loaded, facts, options), sources, on_event)


def _schema_version(file: Path, text: str) -> object:
    """The ``schema_version`` a plan file states, or None when it states none.

    JSON nested deeper than the parser's recursion (no plan is more than a few levels
    deep) is refused here as input, never carried on to fail as a bug."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    except RecursionError:
        raise InputError(
            f"{file}: not a cudafix plan; its JSON is nested deeper than any plan",
            hint="write one with: cudafix remove ... --dry-run --out plan.json",
        ) from None
    return data.get("schema_version") if isinstance(data, dict) else None


def read_plan(file: Path, text: str) -> Plan:
    """Parse a plan file, or raise :class:`InputError` (exit 2) saying what is wrong.

    The schema version is read first: a plan another cudafix wrote is refused by its
    version, not by whichever field changed shape since.
    """
    version = _schema_version(file, text)
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
