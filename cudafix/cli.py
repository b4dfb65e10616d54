"""The ``cudafix`` command line.

Exit codes (also in README and ``--help``): 0 success or healthy; 1 problems found, or an
operation failed and was rolled back; 2 usage or input error; 3 plan refused or stale;
4 locked, or an unfinished transaction needs ``cudafix recover``.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from cudafix import __version__, transaction
from cudafix.doctor import diagnose, repair_candidates
from cudafix.errors import (
    CudafixError,
    ExitCode,
    LockedError,
    PlanRefused,
    StalePlan,
    TransactionFailed,
    UsageError,
)
from cudafix.facts import Facts, Sources, gather
from cudafix.plan import Options, Plan
from cudafix.planner import Request, plan_removal
from cudafix.preconditions import quick_differences, strengthen
from cudafix.render import plain, render_error, render_plan, render_report
from cudafix.script import probe_spec
from cudafix.select import select
from cudafix.target import TargetEnv, locate_target
from cudafix.verify import prediction_mismatches

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


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, epilog=EXIT_CODES_HELP)
@click.version_option(__version__, prog_name="cudafix")
def cli() -> None:
    """Uninstall and repair Python environments that hold CUDA libraries, safely."""


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


# -- doctor ---------------------------------------------------------------------------------


@cli.command(epilog=EXIT_CODES_HELP)
@facts_options
@click.option("--json", "as_json", is_flag=True, help="Machine-readable report.")
@click.pass_context
def doctor(ctx: click.Context, /, as_json: bool, **kw: Any) -> None:
    """Diagnose missing files, clobbered shared paths, unresolved sonames, mixed CUDA majors."""
    target = _target(kw["venv"], kw["python"])
    _warn_pending(target)
    report = diagnose(_facts(kw, target))
    if as_json:
        click.echo(report.model_dump_json(indent=2))
    else:
        click.echo(render_report(report, _style(_tty())))
    ctx.exit(ExitCode.OK if report.healthy else ExitCode.FAILURE)


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


@cli.command(epilog=EXIT_CODES_HELP)
@click.argument("selectors", nargs=-1)
@click.option("--exclude", multiple=True, metavar="GLOB", help="Leave these out of the selection.")
@click.option(
    "--repair", is_flag=True, help="Reinstall remaining co-owners so their own files come back."
)
@click.option(
    "--keep-shared", is_flag=True, help="Keep paths that remaining distributions also claim."
)
@click.option(
    "--allow-broken-requirements", is_flag=True, help="Do not refuse on broken Requires-Dist."
)
@plan_options
@click.pass_context
@json_errors
def remove(
    ctx: click.Context, /, selectors: tuple[str, ...], exclude: tuple[str, ...], **kw: Any
) -> None:
    """Remove distributions (names or globs like 'nvidia-*-cu13') without orphaning a soname."""
    target = _target(kw["venv"], kw["python"])
    _warn_pending(target, mutating=not kw["dry_run"])
    options = _options(kw)
    facts = _facts(kw, target, Sources(options.offline, tuple(options.find_links)))
    names = select(facts.inventory.distributions, selectors, exclude)
    plan = plan_removal(facts, Request(names, tuple(selectors), options))
    facts.save_caches()
    present_and_apply(strengthen(plan, facts), kw)


@cli.command(epilog=EXIT_CODES_HELP)
@plan_options
@click.pass_context
@json_errors
def repair(ctx: click.Context, /, **kw: Any) -> None:
    """Reinstall, at their recorded versions, distributions whose files are missing."""
    target = _target(kw["venv"], kw["python"])
    _warn_pending(target, mutating=not kw["dry_run"])
    options = _options(kw)
    facts = _facts(kw, target, Sources(options.offline, tuple(options.find_links)))
    wanted = repair_candidates(facts.inventory)
    if not wanted:
        click.echo(f"Nothing to repair in {target.prefix}: no distribution has missing files.")
        ctx.exit(ExitCode.OK)
    plan = plan_removal(facts, Request((), (), options, reinstall=wanted))
    facts.save_caches()
    present_and_apply(strengthen(plan, facts), kw)


def _options(kw: dict[str, Any]) -> Options:
    return Options(
        repair=bool(kw.get("repair", False)),
        keep_shared=bool(kw.get("keep_shared", False)),
        allow_broken_requirements=bool(kw.get("allow_broken_requirements", False)),
        offline=kw["offline"],
        find_links=[str(Path(p).absolute()) for p in kw["find_links"]],
        backend=kw["backend"],
    )


# -- recover, history, show, undo, gc ----------------------------------------------------------


@cli.command(epilog=EXIT_CODES_HELP)
@target_options
@click.option("--dry-run", is_flag=True, help="Say what would be rolled back.")
@click.option("--lock-timeout", type=float, default=60.0, show_default=True)
def recover(venv: str | None, python: str | None, dry_run: bool, lock_timeout: float) -> None:
    """Roll back a transaction that was interrupted (killed, power loss)."""
    target = _target(venv, python)
    report = transaction.recover(
        target.prefix, dry_run=dry_run, lock_timeout=lock_timeout, on_event=_echo_err
    )
    if not report.transactions:
        click.echo(f"No unfinished transaction in {target.prefix}.")
        return
    for action in report.actions:
        click.echo(("would: " if dry_run else "done: ") + action)


@cli.command(epilog=EXIT_CODES_HELP)
@target_options
@click.option("--json", "as_json", is_flag=True)
def history(venv: str | None, python: str | None, as_json: bool) -> None:
    """List transactions: id, time, command, outcome, what changed."""
    target = _target(venv, python)
    entries = transaction.history(target.prefix)
    if as_json:
        click.echo(json.dumps([e.__dict__ for e in entries], indent=2, default=list))
        return
    if not entries:
        click.echo(f"No transactions in {target.prefix}.")
    for e in entries:
        changed = ", ".join([*(f"-{n}" for n in e.removed), *(f"+{n}" for n in e.reinstalled)])
        click.echo(f"{e.txid}  {e.state:<11}  {changed or '-'}  {' '.join(e.command[1:])}")
        if e.error:
            click.echo(f"    {e.error}")


@cli.command(epilog=EXIT_CODES_HELP)
@click.argument("txid")
@target_options
def show(txid: str, venv: str | None, python: str | None) -> None:
    """Show one transaction: its journal and the paths it snapshotted."""
    target = _target(venv, python)
    detail = transaction.show(target.prefix, txid)
    click.echo(
        json.dumps(
            {"entry": detail.entry.__dict__, "journal": detail.journal, "paths": detail.paths},
            indent=2,
            default=list,
        )
    )


@cli.command(epilog=EXIT_CODES_HELP)
@click.argument("txid")
@target_options
@click.option("--yes", "-y", is_flag=True)
@click.option("--lock-timeout", type=float, default=60.0, show_default=True)
def undo(txid: str, venv: str | None, python: str | None, yes: bool, lock_timeout: float) -> None:
    """Restore the state before a committed transaction, as a new transaction."""
    target = _target(venv, python)
    confirm(yes)
    result = transaction.undo(
        target.prefix, txid, lock_timeout=lock_timeout, command=sys.argv, on_event=_echo_err
    )
    click.echo(f"Undid {txid} as transaction {result.txid}.")


@cli.command(epilog=EXIT_CODES_HELP)
@target_options
@click.option("--keep", type=int, default=transaction.DEFAULT_KEEP, show_default=True)
def gc(venv: str | None, python: str | None, keep: int) -> None:
    """Delete old snapshots, keeping the newest KEEP committed ones."""
    target = _target(venv, python)
    gone = transaction.gc(target.prefix, keep)
    click.echo(f"Deleted {len(gone)} snapshot(s).")


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point: every CudafixError becomes one clear message and its exit code."""
    try:
        code = cli.main(
            args=list(argv) if argv is not None else None,
            prog_name="cudafix",
            standalone_mode=False,
        )
    except CudafixError as err:
        _echo_err(render_error(err, _style(sys.stderr.isatty())))
        sys.exit(int(err.exit_code))
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(ExitCode.USAGE)
    except click.exceptions.Abort:
        _echo_err("aborted; nothing was changed")
        sys.exit(ExitCode.FAILURE)
    except KeyboardInterrupt:
        _echo_err("interrupted")
        sys.exit(130)
    except Exception as exc:  # a bug: one line by default, the traceback on request
        if os.environ.get("CUDAFIX_DEBUG"):
            raise
        _echo_err(f"error: internal error: {type(exc).__name__}: {exc}")
        _echo_err("hint: this is a bug in cudafix; rerun with CUDAFIX_DEBUG=1 for the traceback")
        sys.exit(ExitCode.FAILURE)
    sys.exit(code if isinstance(code, int) else ExitCode.OK)


from cudafix.cli_apply import apply as _apply  # noqa: E402 - registers `cudafix apply`

cli.add_command(_apply)
