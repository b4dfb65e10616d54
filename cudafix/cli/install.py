"""``cudafix install SPEC...`` and ``cudafix run -- CMD...``: the other half of the incident.

An install is planned like a removal: uv says what it would install and uninstall, the
wheels are staged outside the environment, and the after-state is simulated by the same
loader model; an install that overwrites another distribution's files with other bytes or
makes a consumer load another build of a library is refused (exit 3). One that passes runs
as a transaction (snapshot of every path the wheels write, uv, verify, probes, commit or
roll back).
"""

from __future__ import annotations

import shlex
import sys
from typing import TYPE_CHECKING

import click

from cudafix import app
from cudafix.cli.errors import emit_json_error
from cudafix.cli.options import (
    EXIT_CODES_HELP,
    PlanFlags,
    facts_options,
    lock_timeout_option,
    plan_options,
    probe_timeout_option,
)
from cudafix.cli.output import echo_err, echo_event, echo_json, echo_out
from cudafix.cli.present import present_and_apply
from cudafix.cli.render import shown
from cudafix.cli.shapes import run_json, unchanged_json
from cudafix.model.errors import CudafixError, ExitCode, UsageError
from cudafix.model.transaction import GuardedRun, exit_status

if TYPE_CHECKING:
    from collections.abc import Sequence

    from cudafix.model.doctor import DoctorReport, Finding

RUN_EXIT_HELP = (
    "Exit codes: 0 committed, or nothing changed; the command's own status when it failed "
    "(after rolling back what it changed); 1 rolled back (new problems, probe failed, "
    "timeout); 2 usage; 4 locked or unfinished transaction (run cudafix recover)."
)


@click.command("install", epilog=EXIT_CODES_HELP)
@click.argument("specs", nargs=-1)
@click.option(
    "--allow-broken-requirements", is_flag=True, help="Do not refuse on broken Requires-Dist."
)
@plan_options
def install(specs: tuple[str, ...], allow_broken_requirements: bool, flags: PlanFlags) -> None:
    """Install requirements (as uv would) unless they clobber or swap a library in use."""
    if not specs:
        raise UsageError("nothing to install", hint="name at least one, e.g. nvidia-cudnn-cu12")
    request = app.InstallArgs(tuple(specs), allow_broken_requirements)
    plan = app.plan_install(
        flags.facts, request, flags.sources, flags.backend, mutating=flags.mutating,
        on_event=echo_event,
    )  # fmt: skip
    if not plan.install and not plan.remove and not flags.as_json:
        done = f"Nothing to install in {plan.target.prefix}: {' '.join(specs)} is satisfied."
        echo_out(shown(done))
        raise click.exceptions.Exit(ExitCode.OK)
    present_and_apply(plan, flags)


@click.command("run", epilog=RUN_EXIT_HELP, context_settings={"allow_interspersed_args": False})
@facts_options
@click.option("--accept", is_flag=True, help="Commit even with new problems (printed).")
@click.option(
    "--probe", "probe_code", multiple=True, metavar="CODE", help="Python that must run after."
)
@click.option(
    "--probe-cmd", multiple=True, metavar="CMD", help="Shell command that must succeed after."
)
@click.option(
    "--no-probe", is_flag=True, help="Skip the automatic import probes of what the command changed."
)
@probe_timeout_option()
@lock_timeout_option()
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    metavar="SECONDS",
    help="Stop the command (and roll back) if it runs longer.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="The outcome as one JSON object on stdout (the "
    "command's own output then goes to stderr).",
)  # fmt: skip
@click.option("--yes", "-y", is_flag=True, help="Accepted as elsewhere; run never asks.")
@click.argument("argv", nargs=-1, type=click.UNPROCESSED, required=True, metavar="CMD...")
def run_command(
    facts: app.FactArgs,
    accept: bool,
    probe_code: tuple[str, ...],
    probe_cmd: tuple[str, ...],
    no_probe: bool,
    probe_timeout: float,
    lock_timeout: float,
    timeout: float | None,
    as_json: bool,
    yes: bool,
    argv: tuple[str, ...],
) -> None:
    """Run CMD (after --) as a transaction: snapshot, run, diagnose, probe, commit or roll back.

    For any command that changes the environment: `cudafix run -- uv pip install -U torch`.
    Options before -- are cudafix's. The command's output is shown as it runs. The run is
    rolled back when the command fails or times out, when doctor finds a problem it did not
    find before (unless --accept), or when a probe fails.
    """
    del yes  # run never prompts; accepted so scripts can pass it to every command
    run = app.RunArgs(
        auto_probes=not no_probe,
        probe_code=probe_code,
        probe_commands=probe_cmd,
        probe_timeout=probe_timeout,
        lock_timeout=lock_timeout,
        command=tuple(sys.argv),
    )
    live = app.LiveArgs(timeout=timeout, echo=(2, 2) if as_json else (1, 2))
    try:
        result = app.run_command(
            facts, argv, run, live, accept=accept, on_event=echo_event, say=_said
        )
    except CudafixError as err:
        if as_json:
            emit_json_error(err)
        raise
    if not result.committed:
        _unchanged(result, as_json)
        return
    for finding in result.findings:
        echo_err(f"accepted: {shown(finding)}")
    for path in result.in_place:
        echo_err(
            f"warning: {shown(path)} was rewritten in place; a rollback could not have restored it"
        )
    if as_json:
        echo_json(run_json(result))
        return
    changed = f" changed {', '.join(result.changed)};" if result.changed else ""
    undo = f"cudafix undo {result.txid} --venv {shlex.quote(str(result.prefix))}"
    kept = (
        f" (it cannot bring back the {len(result.in_place)} file(s) rewritten in place)"
        if result.in_place
        else ""
    )
    echo_out(
        f"Committed transaction {result.txid}: {shown(shlex.join(argv))};{shown(changed)} "
        "probes passed: "
        f"{len(result.probes)}.\nUndo with: {shown(undo)}{kept}"
    )


def _unchanged(result: GuardedRun, as_json: bool) -> None:
    """A command that changed nothing: nothing committed, no transaction kept; a command
    that failed gives its own exit status, as ``uv run`` does."""
    code = exit_status(result.completed.returncode)
    if as_json:
        echo_json(unchanged_json(result, code))
    else:
        status = f" and failed (exit status {code})" if code else ""
        echo_out(
            f"Nothing changed in {shown(str(result.prefix))}: "
            f"{shown(shlex.join(result.completed.argv))} ran{status}; "
            "no transaction was kept, nothing to undo."
        )
    if code:
        sys.exit(code)


def _said(report: DoctorReport, findings: Sequence[Finding]) -> list[str]:
    """doctor's words for findings, imported only when a command changed what doctor
    read: a run that changed nothing never loads the report's models."""
    from cudafix.cli.doctor_words import said

    return said(report, findings)
