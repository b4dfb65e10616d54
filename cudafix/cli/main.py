"""The ``cudafix`` command line.

Exit codes (also in README and ``--help``): 0 success or healthy; 1 problems found, or an
operation failed and was rolled back; 2 usage or input error; 3 plan refused or stale;
4 locked, or an unfinished transaction needs ``cudafix recover``, or a rollback could
not restore every path (each is named).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, NoReturn

import click

from cudafix import __version__, app
from cudafix.cli.apply import apply as apply_command
from cudafix.cli.errors import emit_json_error
from cudafix.cli.install import install as install_command
from cudafix.cli.install import run_command
from cudafix.cli.options import (
    BEFORE,
    EXIT_CODES_HELP,
    PlanFlags,
    facts_options,
    global_target_options,
    lock_timeout_option,
    plan_options,
    probe_timeout_option,
    target_options,
)
from cudafix.cli.output import (
    OUTPUT,
    echo_err,
    echo_event,
    echo_json,
    echo_out,
    echo_rendered,
    gone,
    output_options,
    reset_output,
    stdout_style,
    style_for,
)
from cudafix.cli.present import (
    Computed,
    answer_once,
    can_ask,
    confirm,
    dry_run_answer,
    present_and_apply,
    undo_line,
)
from cudafix.cli.render import (
    render_detail,
    render_error,
    render_history,
    render_report,
    render_undo_preview,
    shown,
    size_text,
    undo_break_lines,
)
from cudafix.cli.shapes import (
    detail_json,
    history_json,
    nothing_to_do_json,
    undo_json,
    undone_json,
)
from cudafix.cli.wording import listing_hint
from cudafix.model.commands import cudafix_line, venv_flags
from cudafix.model.errors import (
    CudafixError,
    EnvironmentFault,
    ExitCode,
    PlanRefused,
    StalePlan,
    UnmatchedSelector,
    UnsafeState,
    UsageError,
)

if TYPE_CHECKING:
    from importlib.abc import Traversable

    from cudafix.model.transaction import UndoPreview


class _Group(click.Group):
    """Commands by name, and the aliases uv and pip users type (``uninstall``)."""

    ALIASES: ClassVar[dict[str, str]] = {"uninstall": "remove"}

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return super().get_command(ctx, self.ALIASES.get(cmd_name, cmd_name))

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        return (command.name if command else name), command, rest

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Each command's first sentence whole (click cuts it to the width with ``...``);
        the help formatter wraps it instead."""
        rows = [
            (name, command.get_short_help_str(limit=1000))
            for name in self.list_commands(ctx)
            if (command := self.get_command(ctx, name)) is not None and not command.hidden
        ]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(
    cls=_Group,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=EXIT_CODES_HELP
    + '\n\nShell completion: eval "$(_CUDAFIX_COMPLETE=bash_source cudafix)" '
    "(zsh_source, fish_source for those shells).",
)
@click.version_option(__version__, "-V", "--version", prog_name="cudafix")
@output_options
@global_target_options
def cli() -> None:
    """Uninstall and repair Python environments that hold CUDA libraries, safely.

    `uninstall` is another name for `remove`. The options here (-q, -v, --color, --venv,
    -p) may also be given after the command.
    """


# -- doctor ---------------------------------------------------------------------------------


@cli.command(epilog=EXIT_CODES_HELP)
@facts_options
@click.option("--json", "as_json", is_flag=True, help="Machine-readable report (every finding).")
def doctor(facts: app.FactArgs, as_json: bool) -> None:
    """Diagnose missing files, clobbered shared paths, unresolved sonames, mixed CUDA majors.

    Errors first, then warnings, then one line per kind of information (-v lists it all;
    -q says only the verdict and the command to run next).
    """

    def asked(in_json: bool) -> tuple[object, ...]:
        """The question, as the remembered answers are keyed: one spelling for all."""
        return ("doctor", facts, in_json)

    def diagnose(on_event: app.OnEvent) -> Computed:
        try:
            diagnosis = app.doctor(facts, on_event=on_event)
        except CudafixError as err:
            if as_json:
                emit_json_error(err)
            raise
        from cudafix.cli.doctor_words import worded

        report = diagnosis.report
        code = ExitCode.OK if report.healthy else ExitCode.FAILURE
        if any(f.kind == "pending-transaction" for f in report.findings):
            code = ExitCode.LOCKED  # an unfinished transaction: `cudafix recover`
        texts = render_report(report, stdout_style(), (-1, 0, 1))
        renderings: dict[tuple[tuple[object, ...], int], app.Answer] = {  # -q, plain, -v, --json
            (asked(False), v): app.Answer(text, code)
            for v, text in zip((-1, 0, 1), texts, strict=True)
        }
        # The JSON names every path; unasked, it is rendered only where it would be kept.
        named = sum(len(path) for finding in report.findings for path in finding.paths)
        if as_json or named <= app.MAX_KEPT_CHARS:
            json_out = app.Answer(worded(report).model_dump_json(indent=2), code)
            renderings[(asked(True), OUTPUT.verbosity if as_json else 0)] = json_out
        answer = renderings[(asked(as_json), OUTPUT.verbosity)]
        return Computed(
            answer, also=diagnosis.before_run, read=diagnosis.read, renderings=renderings
        )

    answer_once(facts, asked(as_json), diagnose)


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
    try:
        _remove(request, flags)
    except UnmatchedSelector as err:
        found = app.locate(flags.facts.target)
        err.hint = listing_hint(str(found.python or found.prefix / "bin" / "python"))
        raise


def _remove(request: app.RemoveArgs, flags: PlanFlags) -> None:
    def plan(on_event: app.OnEvent) -> app.Planned:
        return app.plan_remove(
            flags.facts,
            request,
            flags.sources,
            flags.backend,
            mutating=flags.mutating,
            on_event=on_event,
        )

    def key() -> str:  # asked only where a plan is made or applied: a warm dry run is not
        return app.remove_plan_key(flags.facts, request, flags.sources, flags.backend)

    if flags.dry_run and flags.out is None:

        def dry_run(on_event: app.OnEvent) -> Computed:
            made = plan(on_event)
            staged = bool(made.plan.reinstall or made.plan.install)  # it depends on an index
            answer = dry_run_answer(made.plan, flags)
            also = app.kept_plan(key(), made.plan)
            return Computed(answer, keep=not staged, read=made.read, also=also)

        answer_once(flags.facts, ("remove", request, flags, OUTPUT.argv, can_ask()), dry_run)
    shown = None if flags.dry_run else app.plan_shown(flags.facts, key(), echo_event)
    present_and_apply(shown or plan(echo_event).plan, flags)


@cli.command(epilog=EXIT_CODES_HELP)
@plan_options
def repair(flags: PlanFlags) -> None:
    """Reinstall distributions whose files are missing (at their installed versions), and
    install required distributions that are not installed (at the version required)."""
    plan = app.plan_repair(
        flags.facts, flags.sources, flags.backend, mutating=flags.mutating, on_event=echo_event
    )
    if plan is None:
        prefix = app.locate(flags.facts.target).prefix
        if flags.as_json:
            echo_json(nothing_to_do_json(prefix), indent=None)
        else:
            echo_out(
                f"Nothing to repair in {shown(str(prefix))}: no distribution has missing "
                "files or files holding another build's bytes, and every required distribution "
                "is installed."
            )
        raise click.exceptions.Exit(ExitCode.OK)
    present_and_apply(plan, flags)


# -- recover, history, show, undo, gc ----------------------------------------------------------


@cli.command(epilog=EXIT_CODES_HELP)
@target_options
@click.option("--dry-run", is_flag=True, help="Say what would be rolled back.")
@lock_timeout_option()
def recover(target: app.TargetArgs, dry_run: bool, lock_timeout: float) -> None:
    """Roll back a transaction that was interrupted (killed, power loss)."""
    report = app.recover(target, dry_run=dry_run, lock_timeout=lock_timeout, on_event=echo_event)
    if not report.transactions:
        echo_out(f"No unfinished transaction in {shown(str(report.prefix))}.")
    for action in report.actions if report.transactions else ():
        echo_out(("would: " if dry_run else "done: ") + shown(action))
    if report.trash:
        what = f"the {len(report.trash)} old snapshot(s) an interrupted deletion left"
        echo_out(f"would: delete {what}" if dry_run else f"done: deleted {what}")
    if report.trash_left:
        raise _not_deleted(report.prefix, len(report.trash_left))


def _not_deleted(prefix: Path, count: int) -> EnvironmentFault:
    """Old snapshots set aside for deletion that are still there after it."""
    trash = shown(str(prefix / ".cudafix" / "trash"))
    return EnvironmentFault(
        f"{count} old snapshot(s) set aside in {trash} could not be deleted",
        hint="check the file system and permissions there, then "
        + cudafix_line("gc", target=venv_flags(prefix)),
    )


@cli.command(epilog=EXIT_CODES_HELP)
@target_options
@click.option("--json", "as_json", is_flag=True, help="Every transaction, every field.")
def history(target: app.TargetArgs, as_json: bool) -> None:
    """List transactions, newest first: short id, time, command, outcome, what changed."""
    prefix, entries = app.history(target)
    if as_json:
        echo_json(history_json(entries))
        return
    echo_out(render_history(prefix, entries, stdout_style()))


@cli.command(epilog=EXIT_CODES_HELP)
@click.argument("txid")
@target_options
@click.option("--json", "as_json", is_flag=True, help="Everything: its journal, every path.")
def show(txid: str, target: app.TargetArgs, as_json: bool) -> None:
    """Show one transaction (TXID: its id, 6+ characters of its start or end, or `last~N`)."""
    detail = app.show(target, txid)
    if not as_json:
        echo_out(render_detail(detail, stdout_style()))
        return
    echo_json(detail_json(detail))


@cli.command(epilog=EXIT_CODES_HELP)
@click.argument("txid")
@facts_options
@click.option("--dry-run", is_flag=True, help="Show what would be undone; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="The preview, or the result, as JSON.")
@click.option("--yes", "-y", is_flag=True, help="Undo without asking.")
@click.option(
    "--accept", is_flag=True, help="Commit even if the undo brings back problems (printed)."
)
@click.option("--no-probe", is_flag=True, help="Skip the import probes.")
@probe_timeout_option()
@lock_timeout_option()
def undo(
    txid: str,
    facts: app.FactArgs,
    dry_run: bool,
    as_json: bool,
    yes: bool,
    accept: bool,
    no_probe: bool,
    probe_timeout: float,
    lock_timeout: float,
) -> None:
    """Restore the state before a committed transaction, as a new transaction.

    TXID is its id, 6+ characters of its start or end (the short id `history` prints), or
    `last`, `last~1`, ...: the newest committed transaction that is not an undo and was not
    undone, and those before it. The undo is shown first and refused, as its dry run says,
    when what it touched changed since, what it takes out is needed, or doctor finds a
    new error in the state it restores (read from a copy built of hard links under
    .cudafix/); once done it is probed and compared with doctor's findings again.
    """
    preview = app.undo_preview(facts, txid, on_event=echo_event, lock_timeout=lock_timeout)
    if as_json and dry_run:
        echo_json(undo_json(preview, accept))
    elif not as_json:
        echo_out(render_undo_preview(preview, stdout_style(), accept))
    refusal = _undo_refusal(preview, accept, listed=not as_json)
    if dry_run:  # decided as the undo decides: the same refusal, the same exit code
        if refusal is not None and not as_json:
            echo_rendered(render_error(refusal, style_for(sys.stderr.isatty())))
        code = refusal.exit_code if refusal is not None and preview.readable else ExitCode.OK
        raise click.exceptions.Exit(code)
    if refusal is not None:
        raise refusal
    confirm(yes)
    run = app.RunArgs(
        auto_probes=not no_probe,
        probe_timeout=probe_timeout,
        lock_timeout=lock_timeout,
        command=tuple(sys.argv),
    )
    from cudafix.cli.doctor_words import said

    told = () if as_json else preview.brings_back  # the preview printed them
    result = app.undo(
        facts, preview.entry.txid, run, accept=accept, on_event=echo_event, say=said, told=told
    )
    if as_json:
        echo_json(undone_json(result), indent=None)
        return
    echo_out(
        f"Undid {preview.entry.txid} as transaction {result.txid}; probes passed: "
        f"{len(result.probes)}.\n{undo_line(result.txid, result.prefix)}"
    )


@cli.command(epilog=EXIT_CODES_HELP)
@target_options
@click.option(
    "--keep",
    type=click.IntRange(min=0),
    default=app.DEFAULT_KEEP,
    show_default=True,
    help="How many committed transactions keep their snapshot (for undo).",
)
@lock_timeout_option()
def gc(target: app.TargetArgs, keep: int, lock_timeout: float) -> None:
    """Delete old snapshots, keeping the newest KEEP committed ones."""
    gone, freed, left = app.gc(target, keep, lock_timeout)
    echo_out(f"Deleted {len(gone)} snapshot(s), freeing {size_text(freed)}.")
    if left:
        raise _not_deleted(left[0].parents[2], len(left))


# -- schema -----------------------------------------------------------------------------------


@cli.command(epilog=EXIT_CODES_HELP)
@click.argument("name", required=False)
@output_options
def schema(name: str | None) -> None:
    """Print the JSON Schema of a --json output; without NAME, list them with their versions.

    NAME is doctor, plan, result, run, undo, undo-preview, history, show or error
    (docs/json.md says which command prints which). The same files ship in the package,
    under cudafix/data/schemas/.
    """
    found = {p.name.removesuffix(".schema.json"): p for p in _schema_files()}
    if name is None:
        for each, path in sorted(found.items()):
            version = json.loads(path.read_text(encoding="utf-8"))["version"]
            click.echo(f"{each}\t{version}")
        return
    if name not in found:
        raise UsageError(
            f"no JSON schema named {name!r}", hint=f"one of: {', '.join(sorted(found))}"
        )
    click.echo(found[name].read_text(encoding="utf-8"), nl=False)


def _schema_files() -> list[Traversable]:
    from importlib import resources  # only here: 9 ms of every command's start

    folder = resources.files("cudafix").joinpath("data/schemas")
    return [p for p in folder.iterdir() if p.name.endswith(".schema.json")]


def _undo_refusal(preview: UndoPreview, accept: bool, listed: bool) -> CudafixError | None:
    """Why an undo is refused before anything changes (None: it goes ahead): a snapshot
    this user cannot read, paths changed since the commit, or needs it would leave unfound
    or errors doctor finds in the state it restores (unless ``accept``). ``listed``: the
    preview on stdout already lists the paths (not under ``--json``), so the error does not
    list them again."""
    txid = preview.entry.txid
    if not preview.readable:
        return UnsafeState(
            f"the snapshot of {txid} is not readable by this user; nothing was changed",
            hint="run cudafix as a user who can write the environment",
        )
    if preview.conflicts:
        return StalePlan(
            f"cannot undo {txid}: the environment changed since",
            context=[] if listed else list(preview.conflicts),
        )
    if preview.blocked and not accept:
        return PlanRefused(
            f"undoing {txid} would bring back problems; nothing was changed",
            context=undo_break_lines(preview),
            hint="`--accept` undoes it anyway",
        )
    return None


def _wants_json(args: Sequence[str]) -> bool:
    """``--json`` among cudafix's own options (not in the command ``run`` runs after ``--``)."""
    return "--json" in (args[: args.index("--")] if "--" in args else args)


class Terminated(KeyboardInterrupt):
    """cudafix got SIGTERM: unwound like Ctrl-C (a transaction rolls back), exit 143."""


def _raise_terminated(_signum: int, _frame: object) -> None:
    raise Terminated


def exit_on_sigterm() -> None:
    """Make SIGTERM unwind the program (a transaction rolls back) instead of killing it."""
    signal.signal(signal.SIGTERM, _raise_terminated)


def _fail(err: CudafixError, as_json: bool) -> NoReturn:
    """One clear message on stderr (and one JSON object on stdout under ``--json``).

    A run interrupted by Ctrl-C or SIGTERM that rolled back exits as interrupted (130, 143).
    """
    if as_json and not err.json_emitted:
        emit_json_error(err)
    echo_rendered(render_error(err, style_for(sys.stderr.isatty())))  # escapes its values
    cause = err.__cause__
    if isinstance(cause, KeyboardInterrupt) and err.exit_code == ExitCode.FAILURE:
        sys.exit(_interrupted_code(cause))
    sys.exit(int(err.exit_code))


def _interrupted_code(exc: KeyboardInterrupt) -> int:
    """128 + the signal: 130 for Ctrl-C (SIGINT), 143 for SIGTERM."""
    return 143 if isinstance(exc, Terminated) else 130


def _usage_error(exc: click.ClickException) -> CudafixError:
    """click's complaint about the command line, in cudafix's own ``error:``/``hint:`` form:
    the command's usage beneath it, and where its help is."""
    message = exc.format_message().strip().rstrip(".")
    if isinstance(exc, click.NoSuchOption) and exc.possibilities:
        close = ", ".join(repr(p) for p in sorted(exc.possibilities))
        message = f"{exc.message.rstrip('.')} (did you mean {close}?)"
    message = message[:1].lower() + message[1:]
    ctx = exc.ctx if isinstance(exc, click.UsageError) else None
    if ctx is None:
        return UsageError(message)
    usage = ctx.get_usage().replace("Usage: ", "usage: ", 1)
    return UsageError(message, context=[usage], hint=f"`{ctx.command_path} --help` says more")


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
    reset_output(tuple(args), as_json=as_json)
    BEFORE.venv = BEFORE.python = None
    exit_on_sigterm()
    try:
        code = cli.main(args=args, prog_name="cudafix", standalone_mode=False)
    except CudafixError as err:
        _fail(err, as_json)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.NoArgsIsHelpError as exc:
        exc.show()  # the help, for ``cudafix`` alone
        sys.exit(ExitCode.USAGE)
    except click.ClickException as exc:
        _fail(_usage_error(exc), as_json)
    except click.exceptions.Abort as exc:
        if isinstance(exc.__cause__, KeyboardInterrupt):  # click wraps Ctrl-C and SIGTERM
            echo_err("interrupted")
            sys.exit(_interrupted_code(exc.__cause__))
        echo_err("Nothing changed.")
        sys.exit(ExitCode.FAILURE)
    except KeyboardInterrupt as exc:
        echo_err("interrupted")
        sys.exit(_interrupted_code(exc))
    except BrokenPipeError:  # a reader gone before a last line (``| head``): nothing to tell
        gone(sys.stdout)
        gone(sys.stderr)
        sys.exit(ExitCode.FAILURE)
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
