"""What a command shows before it acts: a read-only answer (given once), a plan, a confirmation.

A read-only command's answer is given again while nothing it was read from changed
(:func:`answer_once`); a plan is rendered (or emitted as JSON), confirmed, and applied as
one transaction (:func:`present_and_apply`).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click

from cudafix import app
from cudafix.cli.options import PlanFlags
from cudafix.cli.output import OUTPUT, echo_err, echo_event, echo_json, echo_out, stdout_style
from cudafix.cli.render import render_plan, shown
from cudafix.cli.shapes import declined_json, result_json
from cudafix.model.commands import apply_file_argv, applying_argv, cudafix_line, venv_flags
from cudafix.model.errors import ExitCode, PlanRefused, UsageError
from cudafix.model.transaction import RunEvent

if TYPE_CHECKING:
    from cudafix.model.plan import Plan


@dataclass
class _Events:
    """A flow's events to stderr, noting whether any said more than progress: such an
    answer (a warning, a note) is not remembered, so it is given freshly every time."""

    more_than_progress: bool = False

    def __call__(self, event: RunEvent) -> None:
        if event.kind != "progress":
            self.more_than_progress = True
        echo_event(event)


@dataclass(frozen=True)
class Computed:
    """A read-only command's answer, computed."""

    answer: app.Answer
    keep: bool = True
    """Whether it may be remembered (not when it depended on an index)."""
    also: Mapping[str, app.Answer] = field(default_factory=dict)
    """Other answers read from the same state, remembered with it by key (doctor's
    findings, for ``run``)."""
    read: app.ReadSet | None = None
    """What it was read from, where the flow says (else the last walk's, read again)."""
    renderings: Mapping[tuple[tuple[object, ...], int], app.Answer] = field(default_factory=dict)
    """The same answer as other options print it, by (command, verbosity): remembered
    beside it, so ``doctor -v`` or ``doctor --json`` after ``doctor`` reads nothing again."""


def answer_once(
    facts: app.FactArgs,
    command: Sequence[object],
    compute: Callable[[app.OnEvent], Computed],
) -> NoReturn:
    """Print a read-only command's answer and exit with its code: the one remembered for
    the same ``command`` when nothing it was read from has changed since, else
    ``compute``'s (given the event sink).

    Only what stdout says is remembered; progress is said afresh.
    """
    started = time.time_ns()
    colour = OUTPUT.colours(sys.stdout.isatty())
    key = app.answer_key(command, {"verbosity": OUTPUT.verbosity, "colour": colour})
    with app.one_reading():  # the stamp, the walk and the new stamp stat each path once
        answer = _given_again(facts, key) or _computed(facts, key, compute, started, colour)
    echo_out(answer.out)
    raise click.exceptions.Exit(answer.code)


def _given_again(facts: app.FactArgs, key: str) -> app.Answer | None:
    hit = app.recall_answer(facts.target, key)
    if hit is None:
        return None
    prefix, answer = hit
    echo_event(
        RunEvent(
            "progress",
            f"Environment: {prefix}: nothing it was read from changed since the last run, "
            "so its answer is given again",
        )
    )
    return answer


def _computed(
    facts: app.FactArgs,
    key: str,
    compute: Callable[[app.OnEvent], Computed],
    started: int,
    colour: bool,
) -> app.Answer:
    events = _Events()
    computed = compute(events)
    if computed.keep and not events.more_than_progress:
        kept = {
            app.answer_key(command, {"verbosity": v, "colour": colour}): answer
            for (command, v), answer in computed.renderings.items()
        }
        kept.update({key: computed.answer, **computed.also})
        app.remember_answer(facts, kept, since_ns=started, read=computed.read)
    return computed.answer


def present_and_apply(plan: Plan, flags: PlanFlags) -> None:
    """Render (or emit) the plan; unless it is a dry run, confirm and run the transaction."""
    if flags.out:
        try:
            flags.out.write_text(plan.model_dump_json(indent=2) + "\n", encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot write the plan to {flags.out}: {exc.strerror}") from exc
    if flags.dry_run:
        answer = dry_run_answer(plan, flags)
        echo_out(answer.out)
        raise click.exceptions.Exit(answer.code)
    if flags.out and not flags.as_json:
        echo_err(f"Plan written to {flags.out}.")
    if not flags.as_json:
        echo_out(render_plan(plan, stdout_style(), verbosity=OUTPUT.verbosity))
    try:
        app.refuse_unless_allowed(plan, flags.run.force)
    except PlanRefused as err:
        if not flags.as_json:  # its reasons were just printed with the verdict: say them once
            err.reasons = ()
        raise
    confirm(flags.yes)
    result = app.execute(plan, flags.run, on_event=echo_event)
    if flags.as_json:
        echo_json(result_json(plan, result))
        return
    echo_out(
        f"Committed transaction {result.txid}: removed {len(result.removed)}, reinstalled "
        f"{len(result.reinstalled)}, installed {len(result.installed)}; probes passed: "
        f"{len(result.probes)}.\n{undo_line(result.txid, result.prefix)}"
    )


def dry_run_answer(plan: Plan, flags: PlanFlags) -> app.Answer:
    """What a dry run prints (the plan, rendered or as JSON, with the command that applies
    it) and its exit code."""
    if flags.as_json:
        out = plan.model_dump_json(indent=2)
    else:
        out = render_plan(
            plan,
            stdout_style(),
            verbosity=OUTPUT.verbosity,
            next_argv=next_argv(plan, flags),
            saved=None if flags.out is None else str(flags.out),
        )
    return app.Answer(out, ExitCode.OK if plan.verdict == "pass" else ExitCode.REFUSED)


def next_argv(plan: Plan, flags: PlanFlags) -> list[str] | None:
    """The command that applies a dry run's plan, as it would pass: the plan file it was
    saved to (with the sources its wheels come from, and any extra dlopen tables), else the
    same command without ``--dry-run``; None when the plan is refused."""
    if plan.verdict != "pass":
        return None
    target = venv_flags(plan.target.prefix)
    if flags.out is None:
        return applying_argv(OUTPUT.argv, target, ask=can_ask())
    tables = [w for t in flags.facts.dlopen_tables for w in ("--dlopen-table", str(t))]
    staged = plan.options.sources.cli_args() if plan.reinstall or plan.install else []
    return apply_file_argv(flags.out, target, [*tables, *staged])


def undo_line(txid: str, prefix: Path) -> str:
    """How to go back, as a command that runs as printed."""
    return "Undo with: " + shown(cudafix_line("undo", txid, target=venv_flags(prefix)))


def can_ask() -> bool:
    """Whether a person can be asked: stdin is an open terminal."""
    stdin = sys.stdin
    return stdin is not None and not stdin.closed and stdin.isatty()


def confirm(yes: bool) -> None:
    """Ask only a terminal; a closed or redirected stdin refuses at once (never waits)."""
    if yes:
        return
    if not can_ask():
        raise UsageError(
            "refusing to apply without confirmation: stdin is not a terminal", hint="pass --yes"
        )
    if not click.confirm("Apply this plan?", default=False):
        if OUTPUT.as_json:
            echo_json(declined_json(), indent=None)
        echo_err("Nothing changed.")
        raise click.exceptions.Exit(ExitCode.FAILURE)
