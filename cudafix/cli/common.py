"""What every command shares: options parsed into typed values, confirming, presenting.

Each option group is one decorator that hands the command a single typed value
(:class:`cudafix.app.TargetArgs`, :class:`cudafix.app.FactArgs` or :class:`PlanFlags`)
instead of a bag of keywords, so a command body reads as: call one flow, render it.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import click
from click.core import ParameterSource

from cudafix import app
from cudafix.cli.render import plain, shown
from cudafix.model.errors import (
    CudafixError,
    ExitCode,
    LockedError,
    PlanRefused,
    RollbackIncomplete,
    StalePlan,
    TransactionFailed,
    UsageError,
)
from cudafix.model.sources import Sources

if TYPE_CHECKING:
    from cudafix.model.plan import Plan
    from cudafix.model.transaction import TransactionResult

EXIT_CODES_HELP = (
    "Exit codes: 0 ok/healthy, 1 problems found or failed (rolled back), 2 usage or input "
    "error, 3 plan refused or stale, 4 locked or unfinished transaction (run cudafix recover)."
)

F = TypeVar("F", bound=Callable[..., Any])


def style_for(stream_is_tty: bool) -> Callable[..., str]:
    """Colour only a terminal."""
    return click.style if stream_is_tty else plain


def echo_err(message: str) -> None:
    """Progress and warnings go to stderr, so stdout stays the report (or the JSON).

    One line each: control characters in it (a path's newline) are escaped."""
    click.echo(shown(message), err=True)


def stdout_style() -> Callable[..., str]:
    """The style for what goes to stdout."""
    return style_for(sys.stdout.isatty())


def _collect(func: F, names: tuple[str, ...], into: str, build: Callable[..., Any]) -> F:
    """Wrap ``func`` so the options ``names`` arrive as one value, keyword ``into``."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kw: Any) -> Any:
        picked = {name: kw.pop(name) for name in names}
        kw[into] = build(**picked)
        return func(*args, **kw)

    return cast(F, wrapper)


def _decorate(func: F, options: list[Callable[[Any], Any]]) -> F:
    for option in reversed(options):
        func = option(func)
    return func


def _target_option_list() -> list[Callable[[Any], Any]]:
    return [
        click.option(
            "--venv",
            "venv",
            metavar="DIR",
            help="Target venv (default: $VIRTUAL_ENV, then ./.venv).",
        ),
        click.option("--python", "python", metavar="PATH", help="Target interpreter."),
    ]


def _facts_option_list() -> list[Callable[[Any], Any]]:
    return [
        *_target_option_list(),
        click.option(
            "--dlopen-table",
            "dlopen_tables",
            multiple=True,
            type=click.Path(exists=True, dir_okay=False, path_type=Path),
            help='Extra TOML table of dlopen-only edges: [dlopen] "libx.so.1" = ["libpart.so.1"].',
        ),
    ]


def _target_args(venv: str | None, python: str | None) -> app.TargetArgs:
    return app.TargetArgs(venv, python)


def _fact_args(
    venv: str | None, python: str | None, dlopen_tables: tuple[Path, ...]
) -> app.FactArgs:
    return app.FactArgs(app.TargetArgs(venv, python), tuple(dlopen_tables))


def target_options(func: F) -> F:
    """``--venv`` / ``--python``, as uv spells them; the command receives ``target``."""
    func = _collect(func, ("venv", "python"), "target", _target_args)
    return _decorate(func, _target_option_list())


def facts_options(func: F) -> F:
    """Target options plus extra dlopen-only edges; the command receives ``facts``."""
    func = _collect(func, ("venv", "python", "dlopen_tables"), "facts", _fact_args)
    return _decorate(func, _facts_option_list())


# -- plan and apply --------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanFlags:
    """Every option of a command that plans and may apply, parsed."""

    facts: app.FactArgs
    sources: Sources
    backend: app.BackendName
    backend_given: bool
    """``--backend`` was on the command line (it then overrides a script's or plan's)."""
    dry_run: bool
    as_json: bool
    out: Path | None
    yes: bool
    run: app.RunArgs

    @property
    def mutating(self) -> bool:
        """The plan will be applied (a pending transaction then blocks, not warns)."""
        return not self.dry_run


_PLAN_OPTION_NAMES = (
    "venv",
    "python",
    "dlopen_tables",
    "dry_run",
    "as_json",
    "out",
    "offline",
    "find_links",
    "no_fetch",
    "backend",
    "yes",
    "probe_code",
    "probe_cmd",
    "no_probe",
    "probe_timeout",
    "lock_timeout",
    "force",
)


def _plan_flags(**kw: Any) -> PlanFlags:
    ctx = click.get_current_context()
    return PlanFlags(
        facts=_fact_args(kw["venv"], kw["python"], kw["dlopen_tables"]),
        sources=Sources(kw["offline"], tuple(kw["find_links"]), fetch=not kw["no_fetch"]),
        backend=kw["backend"],
        backend_given=ctx.get_parameter_source("backend") == ParameterSource.COMMANDLINE,
        dry_run=kw["dry_run"],
        as_json=kw["as_json"],
        out=kw["out"],
        yes=kw["yes"],
        run=app.RunArgs(
            auto_probes=not kw["no_probe"],
            probe_code=tuple(kw["probe_code"]),
            probe_commands=tuple(kw["probe_cmd"]),
            probe_timeout=kw["probe_timeout"],
            lock_timeout=kw["lock_timeout"],
            force=kw["force"],
            command=tuple(sys.argv),
        ),
    )


def plan_options(func: F) -> F:
    """Options of every command that plans and applies; the command receives ``flags``.

    With ``--json``, a failure is also one JSON object on stdout (for fleet controllers).
    """

    @functools.wraps(func)
    def emitting_errors(*args: Any, **kw: Any) -> Any:
        try:
            return func(*args, **kw)
        except CudafixError as err:
            if kw["flags"].as_json:
                emit_json_error(err)
            raise

    wrapped = _collect(cast(F, emitting_errors), _PLAN_OPTION_NAMES, "flags", _plan_flags)
    opts = [
        *_facts_option_list(),
        click.option("--dry-run", is_flag=True, help="Show the plan; change nothing."),
        click.option("--json", "as_json", is_flag=True, help="Emit the plan (or result) as JSON."),
        click.option(
            "--out",
            type=click.Path(dir_okay=False, path_type=Path),
            help="Write the plan JSON here.",
        ),
        click.option(
            "--offline", is_flag=True, help="Reinstall only from uv's cache or --find-links."
        ),
        click.option(
            "--find-links", multiple=True, metavar="DIR", help="Extra wheel source for reinstalls."
        ),
        click.option(
            "--no-fetch",
            is_flag=True,
            help="Do not stage (download) wheels while planning; the plan says it did not "
            "check them. For air-gapped dry runs.",
        ),
        click.option(
            "--backend", type=click.Choice(["uv", "pip"]), default="uv", show_default=True
        ),
        click.option("--yes", "-y", is_flag=True, help="Apply without asking."),
        click.option(
            "--probe",
            "probe_code",
            multiple=True,
            metavar="CODE",
            help="Python code that must run after.",
        ),
        click.option(
            "--probe-cmd",
            multiple=True,
            metavar="CMD",
            help="Shell command that must succeed after.",
        ),
        click.option("--no-probe", is_flag=True, help="Skip the automatic import/dlopen probes."),
        click.option("--probe-timeout", type=float, default=60.0, show_default=True),
        click.option(
            "--lock-timeout", type=float, default=app.DEFAULT_LOCK_TIMEOUT, show_default=True
        ),
        click.option(
            "--force",
            is_flag=True,
            help="Apply a refused plan anyway; probes still decide commit or rollback.",
        ),
    ]
    return _decorate(wrapped, opts)


def present_and_apply(plan: Plan, flags: PlanFlags) -> None:
    """Render (or emit) the plan; unless it is a dry run, confirm and run the transaction."""
    from cudafix.cli.render import render_plan
    from cudafix.model.plan import refuse_unless_allowed

    if flags.out:
        try:
            flags.out.write_text(plan.model_dump_json(indent=2) + "\n", encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot write the plan to {flags.out}: {exc.strerror}") from exc
    if flags.as_json and flags.dry_run:
        click.echo(plan.model_dump_json(indent=2))
    elif not flags.as_json:
        click.echo(render_plan(plan, stdout_style(), dry_run=flags.dry_run))
    if flags.dry_run:
        raise click.exceptions.Exit(ExitCode.OK if plan.verdict == "pass" else ExitCode.REFUSED)
    refuse_unless_allowed(plan, flags.run.force)
    confirm(flags.yes)
    result = app.execute(plan, flags.run, on_event=echo_err)
    if flags.as_json:
        click.echo(json.dumps(result_json(plan, result), indent=2))
        return
    click.echo(
        f"Committed transaction {result.txid}: removed {len(result.removed)}, reinstalled "
        f"{len(result.reinstalled)}, installed {len(result.installed)}; probes passed: "
        f"{len(result.probes)}.\nUndo with: cudafix undo {result.txid} "
        + shown(f"--venv {result.prefix}")
    )


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


def result_json(plan: Plan, result: TransactionResult) -> dict[str, Any]:
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
    (RollbackIncomplete, "rollback-incomplete"),
    (TransactionFailed, "rolled-back"),
)


def error_json(err: CudafixError) -> dict[str, Any]:
    """What a fleet controller aggregates from a node that did not commit."""
    return {
        "state": next((s for kind, s in _STATES if isinstance(err, kind)), "error"),
        "exit_code": int(err.exit_code),
        "error": err.message,
        "context": list(err.context),
        "hint": err.hint,
    }


def emit_json_error(err: CudafixError) -> None:
    """One JSON object on stdout for a failure, beside the one-line message on stderr."""
    if not err.json_emitted:
        click.echo(json.dumps(error_json(err), indent=2))
    err.json_emitted = True
