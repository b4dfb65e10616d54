"""``cudafix install SPEC...`` and ``cudafix run -- CMD...``: the other half of the incident.

An install is planned like a removal: uv says what it would install and uninstall, the
wheels are staged outside the environment, and the after-state is simulated by the same
loader model; an install that overwrites another distribution's files with other bytes or
makes a consumer load another build of a library is refused (exit 3). One that passes runs
as a transaction (snapshot of every path the wheels write, uv, verify, probes, commit or
roll back).
"""

from __future__ import annotations

import os
import sys

import click

from cudafix import app
from cudafix.cli.common import (
    EXIT_CODES_HELP,
    PlanFlags,
    echo_err,
    facts_options,
    plan_options,
    present_and_apply,
)
from cudafix.cli.render import shown
from cudafix.model.errors import ExitCode, UsageError


@click.command("install", epilog=EXIT_CODES_HELP)
@click.argument("specs", nargs=-1)
@click.option(
    "--index-url",
    metavar="URL",
    help="The index uv resolves and fetches from (sets UV_DEFAULT_INDEX for this run).",
)
@click.option(
    "--allow-broken-requirements", is_flag=True, help="Do not refuse on broken Requires-Dist."
)
@plan_options
def install(
    specs: tuple[str, ...], index_url: str | None, allow_broken_requirements: bool, flags: PlanFlags
) -> None:
    """Install requirements (as uv would) unless they clobber or swap a library in use."""
    if not specs:
        raise UsageError("nothing to install", hint="name at least one, e.g. nvidia-cudnn-cu12")
    if index_url:
        os.environ["UV_DEFAULT_INDEX"] = index_url
    request = app.InstallArgs(tuple(specs), allow_broken_requirements)
    plan = app.plan_install(
        flags.facts, request, flags.sources, flags.backend, mutating=flags.mutating,
        on_event=echo_err,
    )  # fmt: skip
    if not plan.install and not plan.remove and not flags.as_json:
        done = f"Nothing to install in {plan.target.prefix}: {' '.join(specs)} is satisfied."
        click.echo(shown(done))
        raise click.exceptions.Exit(ExitCode.OK)
    present_and_apply(plan, flags)


@click.command(
    "run",
    epilog=EXIT_CODES_HELP,
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@facts_options
@click.option("--accept", is_flag=True, help="Commit even with new problems (printed).")
@click.option(
    "--probe", "probe_code", multiple=True, metavar="CODE", help="Python that must run after."
)
@click.option(
    "--probe-cmd", multiple=True, metavar="CMD", help="Shell command that must succeed after."
)
@click.option("--probe-timeout", type=float, default=60.0, show_default=True)
@click.option("--lock-timeout", type=float, default=app.DEFAULT_LOCK_TIMEOUT, show_default=True)
@click.argument("argv", nargs=-1, type=click.UNPROCESSED, required=True)
def run_command(
    facts: app.FactArgs,
    accept: bool,
    probe_code: tuple[str, ...],
    probe_cmd: tuple[str, ...],
    probe_timeout: float,
    lock_timeout: float,
    argv: tuple[str, ...],
) -> None:
    """Run CMD (after --) as a transaction: snapshot, run, diagnose, probe, commit or roll back.

    For any command that changes the environment: `cudafix run -- uv pip install -U torch`.
    The run is rolled back when the command fails, when doctor finds a problem it did not
    find before (unless --accept), or when a probe fails.
    """
    run = app.RunArgs(
        probe_code=probe_code,
        probe_commands=probe_cmd,
        probe_timeout=probe_timeout,
        lock_timeout=lock_timeout,
        command=tuple(sys.argv),
    )
    result = app.run_command(facts, argv, run, accept=accept, on_event=echo_err)
    out = (result.completed.stdout + result.completed.stderr).rstrip()
    if out:
        click.echo(out)
    for finding in result.findings:
        echo_err(f"accepted: {finding}")
    for path in result.in_place:
        echo_err(f"warning: {path} was rewritten in place; a rollback could not have restored it")
    click.echo(
        shown(f"Committed transaction {result.txid}: {' '.join(argv)}; probes passed: ")
        + f"{len(result.probes)}.\nUndo with: cudafix undo {result.txid} "
        + shown(f"--venv {result.prefix}")
    )
