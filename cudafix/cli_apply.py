"""``cudafix apply FILE``: a cleanup script (TOML) or a saved plan (JSON) as one transaction.

Why one command for both: a fleet plans once (``apply cleanup.toml --dry-run --out
plan.json``), reviews the plan, then applies that same file on every node, where it is
checked against the node first (:mod:`cudafix.preconditions`) and refused when stale.

Non-interactive by design: without ``--yes`` it asks only on a terminal; with stdin not a
terminal (or closed) it refuses at once with exit 2. With ``--json`` every outcome, errors
included, is one JSON object on stdout for a controller to aggregate; exit codes are the
documented ones (0 committed, 1 rolled back, 2 usage/input, 3 refused or stale, 4 locked).
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Any, Literal

import click
from click.core import ParameterSource
from pydantic import ValidationError

from cudafix import transaction
from cudafix.cli import EXIT_CODES_HELP, _facts, _target, _warn_pending, plan_options
from cudafix.errors import (
    CudafixError,
    ExitCode,
    InputError,
    LockedError,
    PlanRefused,
    StalePlan,
    TransactionFailed,
    UsageError,
)
from cudafix.facts import Sources
from cudafix.plan import PLAN_SCHEMA_VERSION, Plan
from cudafix.preconditions import check, retarget
from cudafix.render import Style, plain, render_plan
from cudafix.script import Overrides, compile_script, load_script, probe_spec, script_options
from cudafix.verify import prediction_mismatches

FileKind = Literal["plan", "script"]


def file_kind(path: Path, text: str) -> FileKind:
    """A saved plan is JSON (``.json``, or text starting with ``{``); anything else is TOML."""
    return "plan" if path.suffix == ".json" or text.lstrip().startswith("{") else "script"


@click.command("apply", epilog=EXIT_CODES_HELP)
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@plan_options
@click.pass_context
def apply(ctx: click.Context, /, file: Path, **kw: Any) -> None:
    """Apply a cleanup script (TOML) or a saved plan (JSON) as ONE transaction.

    A script's steps become one plan: all removals simulated together, then reinstalls,
    installs and probes; any failure rolls everything back. A saved plan is checked against
    the environment first and refused (exit 3) with the differences when it is stale.
    """
    try:
        plan = _plan_for(ctx, file, kw)
        _present_and_apply(plan, kw)
    except CudafixError as err:
        if kw["as_json"]:
            click.echo(json.dumps(error_json(err), indent=2))
        raise


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


# -- presenting and applying ---------------------------------------------------------------


def render(plan: Plan, style: Style = plain, *, dry_run: bool = True) -> str:
    """render_plan, with the plan's installs and saved probes inserted before the verdict."""
    lines = render_plan(plan, style, dry_run=dry_run).split("\n")
    at = next((i for i, ln in enumerate(lines) if "Verdict: " in ln), len(lines))
    extra = _section(
        "Install (exact pins, --no-deps)",
        [
            style(f"+ {i.name}=={i.version}", fg="green") + f"  ({len(i.paths)} files)"
            for i in plan.install
        ],
    )
    p = plan.probes
    probes = [f"import {m}" for m in p.imports] + [f"python: {c}" for c in p.python]
    probes += [f"command: {c}" for c in p.commands]
    probes += [f"{e.python or e.command!r} prints {e.output!r}" for e in p.expect]
    extra += _section("Probes (from the script)", probes)
    start = at - 1 if at > 0 and not lines[at - 1] else at
    return "\n".join([*lines[:start], *extra, *lines[start:]])


def _section(title: str, lines: list[str]) -> list[str]:
    return ["", f"{title}:", *(f"  {ln}" for ln in lines)] if lines else []


def _present_and_apply(plan: Plan, kw: dict[str, Any]) -> None:
    if kw["out"]:
        kw["out"].write_text(plan.model_dump_json(indent=2) + "\n", encoding="utf-8")
    if kw["as_json"] and kw["dry_run"]:
        click.echo(plan.model_dump_json(indent=2))
    elif not kw["as_json"]:
        tty = sys.stdout.isatty()
        click.echo(render(plan, click.style if tty else plain, dry_run=kw["dry_run"]))
    if kw["dry_run"]:
        raise click.exceptions.Exit(ExitCode.OK if plan.verdict == "pass" else ExitCode.REFUSED)
    if plan.verdict == "refused" and not kw["force"]:
        raise PlanRefused("the plan was refused; nothing was changed", context=plan.reasons)
    confirm(kw["yes"])
    result = transaction.run_transaction(
        plan,
        probes=probe_spec(
            plan,
            auto=not kw["no_probe"],
            code=kw["probe_code"],
            commands=kw["probe_cmd"],
            timeout=kw["probe_timeout"],
        ),
        lock_timeout=kw["lock_timeout"],
        verify=functools.partial(prediction_mismatches, plan),
        force=kw["force"],
        command=sys.argv,
        on_event=lambda m: click.echo(m, err=True),
    )
    _report(plan, result, kw["as_json"])


def confirm(yes: bool) -> None:
    """Ask only a terminal; a closed or redirected stdin refuses at once (never waits)."""
    if yes:
        return
    stdin = sys.stdin
    if stdin is None or stdin.closed or not stdin.isatty():
        raise UsageError(
            "refusing to apply without confirmation: stdin is not a terminal", hint="pass --yes"
        )
    if not click.confirm("Apply this plan?", default=False):
        raise UsageError("aborted; nothing was changed")


def _report(plan: Plan, result: transaction.TransactionResult, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(result_json(plan, result), indent=2))
        return
    click.echo(
        f"Committed transaction {result.txid}: removed {len(result.removed)}, reinstalled "
        f"{len(result.reinstalled)}, installed {len(result.installed)}; probes passed: "
        f"{len(result.probes)}.\nUndo with: cudafix undo {result.txid} --venv {result.prefix}"
    )


def result_json(plan: Plan, result: transaction.TransactionResult) -> dict[str, Any]:
    """What a fleet controller aggregates from a node that committed."""
    return {
        "state": "committed",
        "exit_code": int(ExitCode.OK),
        "target": str(result.prefix),
        "transaction": result.txid,
        "removed": list(result.removed),
        "reinstalled": list(result.reinstalled),
        "installed": list(result.installed),
        "probes": list(result.probes),
        "plan": plan.model_dump(mode="json"),
    }


_STATES: tuple[tuple[type[CudafixError], str], ...] = (
    (StalePlan, "stale"),
    (PlanRefused, "refused"),
    (LockedError, "locked"),
    (TransactionFailed, "rolled-back"),
)


def error_json(err: CudafixError) -> dict[str, Any]:
    """What a fleet controller aggregates from a node that did not commit."""
    state = next((s for kind, s in _STATES if isinstance(err, kind)), "error")
    if state == "rolled-back" and err.hint and "recover" in err.hint:
        state = "rollback-incomplete"
    return {
        "state": state,
        "exit_code": int(err.exit_code),
        "error": err.message,
        "context": list(err.context),
        "hint": err.hint,
    }
