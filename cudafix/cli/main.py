"""The ``cudafix`` command line.

Exit codes (also in README and ``--help``): 0 success or healthy; 1 problems found, or an
operation failed and was rolled back; 2 usage or input error; 3 plan refused or stale;
4 locked, or an unfinished transaction needs ``cudafix recover``.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

import click

from cudafix import __version__, app
from cudafix.cli.apply import apply as apply_command
from cudafix.cli.common import (
    EXIT_CODES_HELP,
    PlanFlags,
    confirm,
    echo_err,
    emit_json_error,
    facts_options,
    plan_options,
    present_and_apply,
    stdout_style,
    style_for,
    target_options,
)
from cudafix.cli.install import install as install_command
from cudafix.cli.install import run_command
from cudafix.cli.render import shown
from cudafix.model.errors import CudafixError, EnvironmentFault, ExitCode, UsageError


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, epilog=EXIT_CODES_HELP)
@click.version_option(__version__, prog_name="cudafix")
def cli() -> None:
    """Uninstall and repair Python environments that hold CUDA libraries, safely."""


# -- doctor ---------------------------------------------------------------------------------


@cli.command(epilog=EXIT_CODES_HELP)
@facts_options
@click.option("--json", "as_json", is_flag=True, help="Machine-readable report.")
def doctor(facts: app.FactArgs, as_json: bool) -> None:
    """Diagnose missing files, clobbered shared paths, unresolved sonames, mixed CUDA majors."""
    from cudafix.cli.render import render_report

    try:
        report = app.doctor(facts, on_event=echo_err)
    except CudafixError as err:
        if as_json:
            emit_json_error(err)
        raise
    if as_json:
        click.echo(report.model_dump_json(indent=2))
    else:
        click.echo(render_report(report, stdout_style()))
    raise click.exceptions.Exit(ExitCode.OK if report.healthy else ExitCode.FAILURE)


# -- remove / repair -------------------------------------------------------------------------


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
def remove(
    selectors: tuple[str, ...],
    exclude: tuple[str, ...],
    repair: bool,
    keep_shared: bool,
    allow_broken_requirements: bool,
    flags: PlanFlags,
) -> None:
    """Remove distributions (names or globs like 'nvidia-*-cu13') without orphaning a soname."""
    request = app.RemoveArgs(
        tuple(selectors), tuple(exclude), repair, keep_shared, allow_broken_requirements
    )
    plan = app.plan_remove(
        flags.facts,
        request,
        flags.sources,
        flags.backend,
        mutating=flags.mutating,
        on_event=echo_err,
    )
    present_and_apply(plan, flags)


@cli.command(epilog=EXIT_CODES_HELP)
@plan_options
def repair(flags: PlanFlags) -> None:
    """Reinstall, at their recorded versions, distributions whose files are missing."""
    plan = app.plan_repair(
        flags.facts, flags.sources, flags.backend, mutating=flags.mutating, on_event=echo_err
    )
    if plan is None:
        prefix = app.locate(flags.facts.target).prefix
        click.echo(
            f"Nothing to repair in {shown(str(prefix))}: no distribution has missing files "
            "or files holding another build's bytes."
        )
        raise click.exceptions.Exit(ExitCode.OK)
    present_and_apply(plan, flags)


# -- recover, history, show, undo, gc ----------------------------------------------------------


@cli.command(epilog=EXIT_CODES_HELP)
@target_options
@click.option("--dry-run", is_flag=True, help="Say what would be rolled back.")
@click.option("--lock-timeout", type=float, default=app.DEFAULT_LOCK_TIMEOUT, show_default=True)
def recover(target: app.TargetArgs, dry_run: bool, lock_timeout: float) -> None:
    """Roll back a transaction that was interrupted (killed, power loss)."""
    report = app.recover(target, dry_run=dry_run, lock_timeout=lock_timeout, on_event=echo_err)
    if not report.transactions:
        click.echo(f"No unfinished transaction in {shown(str(report.prefix))}.")
        return
    for action in report.actions:
        click.echo(("would: " if dry_run else "done: ") + shown(action))


@cli.command(epilog=EXIT_CODES_HELP)
@target_options
@click.option("--json", "as_json", is_flag=True)
def history(target: app.TargetArgs, as_json: bool) -> None:
    """List transactions: id, time, command, outcome, what changed."""
    prefix, entries = app.history(target)
    if as_json:
        click.echo(json.dumps([e.__dict__ for e in entries], indent=2, default=list))
        return
    if not entries:
        click.echo(f"No transactions in {shown(str(prefix))}.")
    for e in entries:
        changed = ", ".join([*(f"-{n}" for n in e.removed), *(f"+{n}" for n in e.reinstalled)])
        line = f"{e.txid}  {e.state:<11}  {changed or '-'}  {' '.join(e.command[1:])}"
        click.echo(shown(line))
        if e.error:
            click.echo(f"    {shown(e.error)}")


@cli.command(epilog=EXIT_CODES_HELP)
@click.argument("txid")
@target_options
def show(txid: str, target: app.TargetArgs) -> None:
    """Show one transaction: its journal and the paths it snapshotted."""
    detail = app.show(target, txid)
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
@click.option("--lock-timeout", type=float, default=app.DEFAULT_LOCK_TIMEOUT, show_default=True)
def undo(txid: str, target: app.TargetArgs, yes: bool, lock_timeout: float) -> None:
    """Restore the state before a committed transaction, as a new transaction."""
    confirm(yes)
    run = app.RunArgs(lock_timeout=lock_timeout, command=tuple(sys.argv))
    result = app.undo(target, txid, run, on_event=echo_err)
    click.echo(f"Undid {txid} as transaction {result.txid}.")


@cli.command(epilog=EXIT_CODES_HELP)
@target_options
@click.option("--keep", type=int, default=app.DEFAULT_KEEP, show_default=True)
def gc(target: app.TargetArgs, keep: int) -> None:
    """Delete old snapshots, keeping the newest KEEP committed ones."""
    gone = app.gc(target, keep)
    click.echo(f"Deleted {len(gone)} snapshot(s).")


def _wants_json(args: Sequence[str]) -> bool:
    return "--json" in args


def _fail(err: CudafixError, as_json: bool) -> NoReturn:
    """One clear message on stderr (and one JSON object on stdout under ``--json``)."""
    from cudafix.cli.render import render_error

    if as_json and not err.json_emitted:
        emit_json_error(err)
    click.echo(render_error(err, style_for(sys.stderr.isatty())), err=True)  # escapes its values
    sys.exit(int(err.exit_code))


def _os_error(exc: OSError) -> CudafixError:
    """A failure of the machine (no space, read-only, permission, loop): not a bug."""
    where = f": {exc.filename}" if exc.filename else ""
    return EnvironmentFault(f"{exc.strerror or exc}{where}")


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point: every error becomes one clear message and its documented exit code.

    Errors of the machine (OSError: ENOSPC, EROFS, EACCES, ELOOP) are reported as such,
    never as a cudafix bug; under ``--json`` every failure is also one JSON object.
    """
    args = list(argv) if argv is not None else sys.argv[1:]
    as_json = _wants_json(args)
    try:
        code = cli.main(args=args, prog_name="cudafix", standalone_mode=False)
    except CudafixError as err:
        _fail(err, as_json)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        if as_json:
            emit_json_error(UsageError(exc.format_message()))
        exc.show()
        sys.exit(ExitCode.USAGE)
    except click.exceptions.Abort:
        echo_err("aborted; nothing was changed")
        sys.exit(ExitCode.FAILURE)
    except KeyboardInterrupt:
        echo_err("interrupted")
        sys.exit(130)
    except OSError as exc:
        _fail(_os_error(exc), as_json)
    except Exception as exc:  # a bug: one line by default, the traceback on request
        if os.environ.get("CUDAFIX_DEBUG"):
            raise
        if as_json:
            emit_json_error(CudafixError(f"internal error: {type(exc).__name__}: {exc}"))
        echo_err(f"error: internal error: {type(exc).__name__}: {exc}")
        echo_err("hint: this is a bug in cudafix; rerun with CUDAFIX_DEBUG=1 for the traceback")
        sys.exit(ExitCode.FAILURE)
    sys.exit(code if isinstance(code, int) else ExitCode.OK)


cli.add_command(apply_command)
cli.add_command(install_command)
cli.add_command(run_command)
