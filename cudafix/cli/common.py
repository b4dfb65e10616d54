"""What every command shares: target and plan options, confirming, presenting and applying."""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from cudafix.cli.render import plain, render_plan
from cudafix.env.target import TargetEnv, locate_target
from cudafix.model.errors import (
    CudafixError,
    ExitCode,
    LockedError,
    PlanRefused,
    StalePlan,
    TransactionFailed,
    UsageError,
)
from cudafix.model.plan import Plan
from cudafix.plan.facts import Facts, Sources, gather
from cudafix.plan.preconditions import quick_differences
from cudafix.plan.script import probe_spec
from cudafix.tx import transaction
from cudafix.tx.verify import prediction_mismatches

EXIT_CODES_HELP = (
    "Exit codes: 0 ok/healthy, 1 problems found or failed (rolled back), 2 usage or input "
    "error, 3 plan refused or stale, 4 locked or unfinished transaction (run cudafix recover)."
)

F = TypeVar("F", bound=Callable[..., Any])


def _style(ctx_color: bool | None) -> Callable[..., str]:
    return click.style if ctx_color else plain


def _echo_err(message: str) -> None:
    click.echo(message, err=True)


def target_options(func: F) -> F:
    """``--venv`` / ``--python``, as uv spells them."""
    func = click.option("--python", "python", metavar="PATH", help="Target interpreter.")(func)
    func = click.option(
        "--venv", "venv", metavar="DIR", help="Target venv (default: $VIRTUAL_ENV, then ./.venv)."
    )(func)
    return func


def _target(venv: str | None, python: str | None) -> TargetEnv:
    return locate_target(python, venv, os.environ, Path.cwd())


def _warn_pending(target: TargetEnv, *, mutating: bool = False) -> None:
    """An unfinished transaction blocks changes (before any planning) and taints reads."""
    pending = transaction.pending_transactions(target.prefix)
    if not pending:
        return
    if transaction.lock_is_held(target.prefix):
        _echo_err(f"another cudafix run is changing {target.prefix}; this one will wait for it")
        return
    what = f"unfinished transaction {pending[0]} in {target.prefix}"
    if mutating:
        raise LockedError(
            f"{what}: the environment may be half-changed",
            hint=f"cudafix recover --venv {target.prefix}  (add --dry-run to look first)",
        )
    _echo_err(f"warning: {what}; the environment may be half-changed. Run `cudafix recover`.")


def facts_options(func: F) -> F:
    """Target options plus what shapes the resolver: extra dlopen-only edges."""
    func = click.option(
        "--dlopen-table",
        "dlopen_tables",
        multiple=True,
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help='Extra TOML table of dlopen-only edges: [dlopen] "libx.so.1" = ["libpart.so.1"].',
    )(func)
    return target_options(func)


def _facts(kw: dict[str, Any], target: TargetEnv, sources: Sources = Sources()) -> Facts:  # noqa: B008
    return gather(target, dlopen_tables=kw.get("dlopen_tables", ()), sources=sources)


def _tty() -> bool:
    return sys.stdout.isatty()


# -- remove / repair -------------------------------------------------------------------------


def plan_options(func: F) -> F:
    """Options shared by every command that plans and applies."""
    opts = [
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
        click.option("--lock-timeout", type=float, default=60.0, show_default=True),
        click.option(
            "--force",
            is_flag=True,
            help="Apply a refused plan anyway; probes still decide commit or rollback.",
        ),
    ]
    for opt in reversed(opts):
        func = opt(func)
    return facts_options(func)


def present_and_apply(plan: Plan, kw: dict[str, Any]) -> None:
    """Render (or emit) the plan; unless it is a dry run, confirm and run the transaction."""
    if kw["out"]:
        kw["out"].write_text(plan.model_dump_json(indent=2) + "\n", encoding="utf-8")
    if kw["as_json"] and kw["dry_run"]:
        click.echo(plan.model_dump_json(indent=2))
    elif not kw["as_json"]:
        click.echo(render_plan(plan, _style(_tty()), dry_run=kw["dry_run"]))
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
        on_event=_echo_err,
        precondition=functools.partial(quick_differences, plan),
    )
    if kw["as_json"]:
        click.echo(json.dumps(result_json(plan, result), indent=2))
        return
    click.echo(
        f"Committed transaction {result.txid}: removed {len(result.removed)}, reinstalled "
        f"{len(result.reinstalled)}, installed {len(result.installed)}; probes passed: "
        f"{len(result.probes)}.\nUndo with: cudafix undo {result.txid} --venv {result.prefix}"
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


def json_errors(func: F) -> F:
    """With ``--json``, a failure is also one JSON object on stdout (for fleet controllers)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kw: Any) -> Any:
        try:
            return func(*args, **kw)
        except CudafixError as err:
            if kw.get("as_json"):
                click.echo(json.dumps(error_json(err), indent=2))
            raise

    return wrapper  # type: ignore[return-value]
