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

import click

from cudafix import app
from cudafix.cli.common import EXIT_CODES_HELP, PlanFlags, echo_err, plan_options, present_and_apply
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
        click.echo(f"Nothing to install in {plan.target.prefix}: {' '.join(specs)} is satisfied.")
        raise click.exceptions.Exit(ExitCode.OK)
    present_and_apply(plan, flags)
