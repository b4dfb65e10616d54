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
from pathlib import Path
from typing import Any

import click

from cudafix import __version__
from cudafix.cli.apply import apply as apply_command
from cudafix.cli.common import (
    EXIT_CODES_HELP,
    _echo_err,
    _facts,
    _style,
    _target,
    _tty,
    _warn_pending,
    confirm,
    facts_options,
    json_errors,
    plan_options,
    present_and_apply,
    target_options,
)
from cudafix.cli.render import render_error, render_report
from cudafix.model.errors import (
    CudafixError,
    ExitCode,
)
from cudafix.model.plan import Options
from cudafix.plan.doctor import diagnose, repair_candidates
from cudafix.plan.facts import Sources
from cudafix.plan.planner import Request, plan_removal
from cudafix.plan.preconditions import strengthen
from cudafix.plan.select import select
from cudafix.tx import transaction


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, epilog=EXIT_CODES_HELP)
@click.version_option(__version__, prog_name="cudafix")
def cli() -> None:
    """Uninstall and repair Python environments that hold CUDA libraries, safely."""


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


cli.add_command(apply_command)
