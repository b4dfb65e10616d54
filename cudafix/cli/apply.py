"""``cudafix apply FILE``: a cleanup script (TOML) or a saved plan (JSON) as one transaction.

Why one command for both: a fleet plans once (``apply cleanup.toml --dry-run --out
plan.json``), reviews the plan, then applies that same file on every node, where it is
checked against the node first (:mod:`cudafix.plan.preconditions`) and refused when stale.

Non-interactive by design: without ``--yes`` it asks only on a terminal; with stdin not a
terminal (or closed) it refuses at once with exit 2. With ``--json`` every outcome, errors
included, is one JSON object on stdout for a controller to aggregate; exit codes are the
documented ones (0 committed, 1 rolled back, 2 usage/input, 3 refused or stale, 4 locked).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import click
from click.core import ParameterSource
from pydantic import ValidationError

from cudafix.cli.common import (
    EXIT_CODES_HELP,
    _facts,
    _target,
    _warn_pending,
    json_errors,
    plan_options,
    present_and_apply,
)
from cudafix.model.errors import (
    InputError,
)
from cudafix.model.plan import PLAN_SCHEMA_VERSION, Plan
from cudafix.plan.facts import Sources
from cudafix.plan.preconditions import check, retarget
from cudafix.plan.script import Overrides, compile_script, load_script, script_options

FileKind = Literal["plan", "script"]


def file_kind(path: Path, text: str) -> FileKind:
    """A saved plan is JSON (``.json``, or text starting with ``{``); anything else is TOML."""
    return "plan" if path.suffix == ".json" or text.lstrip().startswith("{") else "script"


@click.command("apply", epilog=EXIT_CODES_HELP)
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@plan_options
@click.pass_context
@json_errors
def apply(ctx: click.Context, /, file: Path, **kw: Any) -> None:
    """Apply a cleanup script (TOML) or a saved plan (JSON) as ONE transaction.

    A script's steps become one plan: all removals simulated together, then reinstalls,
    installs and probes; any failure rolls everything back. A saved plan is checked against
    the environment first and refused (exit 3) with the differences when it is stale.
    """
    present_and_apply(_plan_for(ctx, file, kw), kw)


def _plan_for(ctx: click.Context, file: Path, kw: dict[str, Any]) -> Plan:
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {file}: {exc}") from exc
    if file_kind(file, text) == "plan":
        return _saved_plan(ctx, file, text, kw)
    loaded = load_script(file)
    options = script_options(loaded, _overrides(ctx, kw))
    target = _target(kw["venv"], kw["python"])
    _warn_pending(target)
    facts = _facts(kw, target, Sources(options.offline, tuple(options.find_links)))
    return compile_script(loaded, facts, options)


def _overrides(ctx: click.Context, kw: dict[str, Any]) -> Overrides:
    explicit = ctx.get_parameter_source("backend") == ParameterSource.COMMANDLINE
    return Overrides(kw["offline"], tuple(kw["find_links"]), kw["backend"] if explicit else None)


def read_plan(file: Path, text: str) -> Plan:
    """Parse a plan file, or raise :class:`InputError` (exit 2) saying what is wrong."""
    try:
        plan = Plan.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "plan"
        raise InputError(
            f"{file}: not a cudafix plan ({exc.error_count()} problem(s)); {where}: {first['msg']}",
            hint="write one with: cudafix remove ... --dry-run --out plan.json",
        ) from exc
    if plan.schema_version != PLAN_SCHEMA_VERSION:
        raise InputError(
            f"{file}: plan schema {plan.schema_version}; this cudafix reads {PLAN_SCHEMA_VERSION}"
        )
    return plan


def _saved_plan(ctx: click.Context, file: Path, text: str, kw: dict[str, Any]) -> Plan:
    """The saved plan, aimed at --venv/--python (else its own prefix), preconditions checked."""
    plan = read_plan(file, text)
    own = kw["venv"] is None and kw["python"] is None
    target = _target(plan.target.prefix if own else kw["venv"], kw["python"])
    _warn_pending(target)
    plan = retarget(_with_overrides(ctx, plan, kw), target.prefix, target.python)
    facts = _facts(kw, target, Sources(plan.options.offline, tuple(plan.options.find_links)))
    check(plan, facts)
    return plan


def _with_overrides(ctx: click.Context, plan: Plan, kw: dict[str, Any]) -> Plan:
    """--find-links replaces the plan's (the wheelhouse lives elsewhere on this node)."""
    o = _overrides(ctx, kw)
    links = [str(Path(p).absolute()) for p in o.find_links] or plan.options.find_links
    options = plan.options.model_copy(
        update={
            "offline": plan.options.offline or o.offline,
            "find_links": links,
            "backend": o.backend or plan.options.backend,
        }
    )
    return plan.model_copy(update={"options": options})
