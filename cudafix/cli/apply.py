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
from typing import TYPE_CHECKING, Literal

import click

from cudafix import app
from cudafix.cli.options import EXIT_CODES_HELP, PlanFlags, plan_options
from cudafix.cli.output import echo_err, echo_event
from cudafix.cli.present import present_and_apply
from cudafix.model.errors import InputError

if TYPE_CHECKING:
    from cudafix.model.plan import Plan

FileKind = Literal["plan", "script"]


def file_kind(path: Path, text: str) -> FileKind:
    """A saved plan is JSON (``.json``, or text starting with ``{``); anything else is TOML."""
    return "plan" if path.suffix == ".json" or text.lstrip().startswith("{") else "script"


@click.command("apply", epilog=EXIT_CODES_HELP)
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--no-plan-probes",
    is_flag=True,
    help="Do not run the file's own probe commands and Python snippets (a plan file is code: "
    "its probes.commands run through /bin/sh).",
)
@plan_options
def apply(file: Path, no_plan_probes: bool, flags: PlanFlags) -> None:
    """Apply a cleanup script (TOML) or a saved plan (JSON) as ONE transaction.

    A script's steps become one plan: all removals simulated together, then reinstalls,
    installs and probes; any failure rolls everything back. A saved plan is checked against
    the environment first and refused (exit 3) with the differences when it is stale.

    A plan or script file is code: its probe commands run through /bin/sh and its Python
    probes in the target interpreter, as the user running cudafix. Apply only files you
    trust, or pass --no-plan-probes.
    """
    present_and_apply(_without_code(_plan_for(file, flags), file, no_plan_probes), flags)


def _without_code(plan: Plan, file: Path, drop: bool) -> Plan:
    """Say what the file's probes will run (or drop them with ``--no-plan-probes``)."""
    probes = plan.probes
    commands = [*probes.commands, *(e.command for e in probes.expect if e.command)]
    snippets = [*probes.python, *(e.python for e in probes.expect if e.python)]
    code = [f"/bin/sh -c {c!r}" for c in commands] + [f"python -c {c!r}" for c in snippets]
    if not code:
        return plan
    if drop:
        echo_err(f"{file}: not running its {len(code)} probe command(s) (--no-plan-probes)")
        cleared = probes.model_copy(update={"commands": [], "python": [], "expect": []})
        return plan.model_copy(update={"probes": cleared})
    echo_err(f"{file} runs {len(code)} probe command(s) as you (a plan file is code):")
    for line in code:
        echo_err(f"  {line}")
    echo_err("  (skip them with --no-plan-probes)")
    return plan


def _plan_for(file: Path, flags: PlanFlags) -> Plan:
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {file}: {exc}") from exc
    backend = flags.backend if flags.backend_given else None
    if file_kind(file, text) == "plan":
        saved = app.read_plan(file, text)
        return app.plan_saved(
            flags.facts, saved, flags.sources, backend, mutating=flags.mutating, on_event=echo_event
        )
    return app.plan_script(
        flags.facts,
        file,
        text,
        flags.sources,
        backend,
        mutating=flags.mutating,
        on_event=echo_event,
    )
