"""What every command shares: options parsed into typed values, confirming, presenting.

Each option group is one decorator that hands the command a single typed value
(:class:`cudafix.app.TargetArgs`, :class:`cudafix.app.FactArgs` or :class:`PlanFlags`)
instead of a bag of keywords, so a command body reads as: call one flow, render it.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NoReturn, TypeVar, cast

import click
from click.core import ParameterSource

from cudafix import app
from cudafix.cli.render import plain, render_plan, shown
from cudafix.cli.wording import error_context
from cudafix.model.commands import cudafix_line, venv_flags
from cudafix.model.errors import (
    CudafixError,
    ExitCode,
    LockedError,
    PlanRefused,
    RollbackIncomplete,
    StalePlan,
    TransactionFailed,
    UsageError,
)
from cudafix.model.sources import Sources
from cudafix.model.transaction import DEFAULT_PROBE_TIMEOUT

if TYPE_CHECKING:
    from cudafix.model.plan import Plan
    from cudafix.model.transaction import TransactionResult, UndoPreview

EXIT_CODES_HELP = (
    "Exit codes: 0 ok/healthy, 1 problems found or failed (rolled back), 2 usage or input "
    "error, 3 plan refused or stale, 4 locked or unfinished transaction (run cudafix recover)."
)

F = TypeVar("F", bound=Callable[..., Any])


ColorMode = Literal["auto", "always", "never"]


@dataclass
class Output:
    """How much to say and whether to colour it: ``-q``/``-v``, ``--color``, ``NO_COLOR``.

    One value per process, set by the options wherever they appear on the command line
    (``cudafix -q doctor`` and ``cudafix doctor -q`` mean the same).
    """

    verbosity: int = 0
    """-1 quiet, 0 default, 1 verbose."""
    color: ColorMode = "auto"
    as_json: bool = False
    """``--json``: stdout is one JSON object, so progress stays off."""

    def colours(self, stream_is_tty: bool) -> bool:
        if self.color != "auto":
            return self.color == "always"
        return stream_is_tty and not os.environ.get("NO_COLOR")


OUTPUT = Output()


def style_for(stream_is_tty: bool) -> Callable[..., str]:
    """Colour only a terminal (``--color always|never`` and ``NO_COLOR`` decide otherwise)."""
    return click.style if OUTPUT.colours(stream_is_tty) else plain


def echo_err(message: str) -> None:
    """Warnings go to stderr, so stdout stays the report (or the JSON); progress (a
    :class:`cudafix.app.Progress` line) only to a terminal, or anywhere under ``-v``, and
    never under ``-q`` or ``--json``. Each message is one line, escaped with
    :func:`~cudafix.cli.render.shown`: it carries paths and the command's argv, and a name
    holding a newline or an ESC sequence must not forge a line or drive the terminal."""
    if isinstance(message, app.Progress) and not _shows_progress():
        return
    click.echo(shown(message), err=True, color=OUTPUT.colours(sys.stderr.isatty()))


def _shows_progress() -> bool:
    if OUTPUT.verbosity < 0 or OUTPUT.as_json:
        return False
    return OUTPUT.verbosity > 0 or sys.stderr.isatty()


def echo_out(message: str) -> None:
    """The report on stdout, coloured as ``--color`` says."""
    click.echo(message, color=OUTPUT.colours(sys.stdout.isatty()))


@dataclass
class _Events:
    """A flow's events to stderr, noting whether any said more than progress: such an
    answer (a warning, a note) is not remembered, so it is given freshly every time."""

    more_than_progress: bool = False

    def __call__(self, message: str) -> None:
        if not isinstance(message, app.Progress):
            self.more_than_progress = True
        echo_err(message)


@dataclass(frozen=True)
class Computed:
    """A read-only command's answer, computed."""

    answer: app.Answer
    keep: bool = True
    """Whether it may be remembered (not when it depended on an index)."""
    also: Mapping[str, app.Answer] = field(default_factory=dict)
    """Other answers read from the same state, remembered with it by key (doctor's
    findings, for ``run``)."""


def answer_once(
    facts: app.FactArgs,
    command: Sequence[object],
    compute: Callable[[Callable[[str], None]], Computed],
) -> NoReturn:
    """Print a read-only command's answer and exit with its code: the one remembered for
    the same ``command`` when nothing it was read from has changed since, else
    ``compute``'s (given the event sink).

    Only what stdout says is remembered; progress is said afresh.
    """
    started = time.time_ns()
    colour = OUTPUT.colours(sys.stdout.isatty())
    key = app.answer_key(command, {"verbosity": OUTPUT.verbosity, "colour": colour})
    hit = app.recall_answer(facts.target, key)
    if hit is not None:
        prefix, answer = hit
        echo_err(
            app.Progress(
                f"Environment: {prefix}: nothing it was read from changed since the last "
                "run, so its answer is given again"
            )
        )
    else:
        events = _Events()
        computed = compute(events)
        answer = computed.answer
        if computed.keep and not events.more_than_progress:
            app.remember_answer(facts, {key: answer, **computed.also}, since_ns=started)
    echo_out(answer.out)
    raise click.exceptions.Exit(answer.code)


def _set_verbosity(level: int) -> Callable[[click.Context, click.Parameter, bool], None]:
    def callback(_ctx: click.Context, _param: click.Parameter, value: bool) -> None:
        if value:
            OUTPUT.verbosity = level

    return callback


def _set_color(_ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        OUTPUT.color = cast(ColorMode, value)


def output_option_list() -> list[Callable[[Any], Any]]:
    """``-q``, ``-v`` and ``--color``: accepted by the group and by every command."""
    return [
        click.option(
            "-q",
            "--quiet",
            is_flag=True,
            expose_value=False,
            callback=_set_verbosity(-1),
            help="Say only the verdict and the next command; no progress.",
        ),
        click.option(
            "-v",
            "--verbose",
            is_flag=True,
            expose_value=False,
            callback=_set_verbosity(1),
            help="Say everything: every finding, progress even off a terminal.",
        ),
        click.option(
            "--color",
            type=click.Choice(["auto", "always", "never"]),
            expose_value=False,
            callback=_set_color,
            help="Colour output: auto (a terminal, unless NO_COLOR is set), always, never.",
        ),
    ]


def stdout_style() -> Callable[..., str]:
    """The style for what goes to stdout."""
    return style_for(sys.stdout.isatty())


def _collect(func: F, names: tuple[str, ...], into: str, build: Callable[..., Any]) -> F:
    """Wrap ``func`` so the options ``names`` arrive as one value, keyword ``into``."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kw: Any) -> Any:
        picked = {name: kw.pop(name) for name in names}
        kw[into] = build(**picked)
        return func(*args, **kw)

    return cast(F, wrapper)


def _decorate(func: F, options: list[Callable[[Any], Any]]) -> F:
    for option in reversed(options):
        func = option(func)
    return func


def source_option_list() -> list[Callable[[Any], Any]]:
    """Where wheels to reinstall or install come from: uv's options, by uv's names, and
    uv's environment variables for its index."""
    return [
        click.option(
            "-i",
            "--index-url",
            metavar="URL",
            envvar=["UV_DEFAULT_INDEX", "UV_INDEX_URL"],
            help="The index in place of PyPI (default: $UV_DEFAULT_INDEX, $UV_INDEX_URL).",
        ),
        click.option(
            "--extra-index-url",
            "extra_index_urls",
            multiple=True,
            metavar="URL",
            envvar="UV_EXTRA_INDEX_URL",
            help="Another index to search as well (default: $UV_EXTRA_INDEX_URL).",
        ),
        click.option(
            "-f",
            "--find-links",
            multiple=True,
            metavar="DIR|URL",
            help="Also look for wheels (to reinstall or install) in this directory or page.",
        ),
        click.option(
            "--offline",
            is_flag=True,
            help="Fetch wheels (to reinstall or install) only from uv's cache or --find-links.",
        ),
    ]


def lock_timeout_option() -> Callable[[F], F]:
    """``--lock-timeout``: how long to wait for another cudafix run on the same environment."""
    return click.option(
        "--lock-timeout",
        type=float,
        default=app.DEFAULT_LOCK_TIMEOUT,
        show_default=True,
        metavar="SECONDS",
        help="How long to wait for another cudafix run on this environment (then exit 4).",
    )


def probe_timeout_option() -> Callable[[F], F]:
    """``--probe-timeout``: how long each import/dlopen probe may take."""
    return click.option(
        "--probe-timeout",
        type=float,
        default=DEFAULT_PROBE_TIMEOUT,
        show_default=True,
        metavar="SECONDS",
        help="How long each probe may run before it counts as failed.",
    )


def output_options(func: F) -> F:
    """``-q``, ``-v`` and ``--color`` on a command or group (they set :data:`OUTPUT`)."""
    return _decorate(func, output_option_list())


def _target_option_list() -> list[Callable[[Any], Any]]:
    return [
        *output_option_list(),
        click.option(
            "--venv",
            "venv",
            metavar="DIR",
            help="Target venv, or its interpreter (default: $VIRTUAL_ENV, then .venv in this "
            "directory or a parent).",
        ),
        click.option(
            "-p",
            "--python",
            "python",
            metavar="PATH",
            help="Target interpreter, or a venv directory, as uv takes it (default: $UV_PYTHON).",
        ),
    ]


def _facts_option_list() -> list[Callable[[Any], Any]]:
    return [
        *_target_option_list(),
        click.option(
            "--dlopen-table",
            "dlopen_tables",
            multiple=True,
            type=click.Path(exists=True, dir_okay=False, path_type=Path),
            help='Extra TOML table of dlopen-only edges: [dlopen] "libx.so.1" = ["libpart.so.1"].',
        ),
    ]


def _target_args(venv: str | None, python: str | None) -> app.TargetArgs:
    return app.TargetArgs(venv, python)


def _fact_args(
    venv: str | None, python: str | None, dlopen_tables: tuple[Path, ...]
) -> app.FactArgs:
    return app.FactArgs(app.TargetArgs(venv, python), tuple(dlopen_tables))


def target_options(func: F) -> F:
    """``--venv`` / ``--python``, as uv spells them; the command receives ``target``."""
    func = _collect(func, ("venv", "python"), "target", _target_args)
    return _decorate(func, _target_option_list())


def facts_options(func: F) -> F:
    """Target options plus extra dlopen-only edges; the command receives ``facts``."""
    func = _collect(func, ("venv", "python", "dlopen_tables"), "facts", _fact_args)
    return _decorate(func, _facts_option_list())


# -- plan and apply --------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanFlags:
    """Every option of a command that plans and may apply, parsed."""

    facts: app.FactArgs
    sources: Sources
    backend: app.BackendName
    backend_given: bool
    """``--backend`` was on the command line (it then overrides a script's or plan's)."""
    dry_run: bool
    as_json: bool
    out: Path | None
    yes: bool
    run: app.RunArgs

    @property
    def mutating(self) -> bool:
        """The plan will be applied (a pending transaction then blocks, not warns)."""
        return not self.dry_run


_PLAN_OPTION_NAMES = (
    "venv",
    "python",
    "dlopen_tables",
    "dry_run",
    "as_json",
    "out",
    "offline",
    "find_links",
    "index_url",
    "extra_index_urls",
    "no_fetch",
    "backend",
    "yes",
    "probe_code",
    "probe_cmd",
    "no_probe",
    "probe_timeout",
    "lock_timeout",
    "force",
)


def _plan_flags(**kw: Any) -> PlanFlags:
    ctx = click.get_current_context()
    return PlanFlags(
        facts=_fact_args(kw["venv"], kw["python"], kw["dlopen_tables"]),
        sources=Sources(
            kw["offline"],
            tuple(kw["find_links"]),
            fetch=not kw["no_fetch"],
            index_url=kw["index_url"] or None,
            extra_index_urls=tuple(kw["extra_index_urls"]),
            progress_fd=sys.stderr.fileno() if _shows_progress() and sys.stderr.isatty() else None,
        ),
        backend=kw["backend"],
        backend_given=ctx.get_parameter_source("backend") == ParameterSource.COMMANDLINE,
        dry_run=kw["dry_run"],
        as_json=kw["as_json"],
        out=kw["out"],
        yes=kw["yes"],
        run=app.RunArgs(
            auto_probes=not kw["no_probe"],
            probe_code=tuple(kw["probe_code"]),
            probe_commands=tuple(kw["probe_cmd"]),
            probe_timeout=kw["probe_timeout"],
            lock_timeout=kw["lock_timeout"],
            force=kw["force"],
            command=tuple(sys.argv),
        ),
    )


def plan_options(func: F) -> F:
    """Options of every command that plans and applies; the command receives ``flags``.

    With ``--json``, a failure is also one JSON object on stdout (for fleet controllers).
    """

    @functools.wraps(func)
    def emitting_errors(*args: Any, **kw: Any) -> Any:
        try:
            return func(*args, **kw)
        except CudafixError as err:
            if kw["flags"].as_json:
                emit_json_error(err)
            raise

    wrapped = _collect(cast(F, emitting_errors), _PLAN_OPTION_NAMES, "flags", _plan_flags)
    opts = [
        *_facts_option_list(),
        click.option("--dry-run", is_flag=True, help="Show the plan; change nothing."),
        click.option("--json", "as_json", is_flag=True, help="Emit the plan (or result) as JSON."),
        click.option(
            "--out",
            type=click.Path(dir_okay=False, path_type=Path),
            help="Write the plan JSON here.",
        ),
        *source_option_list(),
        click.option(
            "--no-fetch",
            is_flag=True,
            help="Do not stage (download) wheels while planning; the plan says it did not "
            "check them. For air-gapped dry runs.",
        ),
        click.option(
            "--backend",
            type=click.Choice(["uv", "pip"]),
            default="uv",
            show_default=True,
            help="The installer that applies the plan (pip: the target's, else one cudafix runs).",
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
        probe_timeout_option(),
        lock_timeout_option(),
        click.option(
            "--force",
            is_flag=True,
            help="Apply a refused plan anyway; probes still decide commit or rollback.",
        ),
    ]
    return _decorate(wrapped, opts)


def present_and_apply(plan: Plan, flags: PlanFlags) -> None:
    """Render (or emit) the plan; unless it is a dry run, confirm and run the transaction."""
    if flags.out:
        try:
            flags.out.write_text(plan.model_dump_json(indent=2) + "\n", encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot write the plan to {flags.out}: {exc.strerror}") from exc
    if flags.dry_run:
        answer = dry_run_answer(plan, flags.as_json)
        echo_out(answer.out)
        raise click.exceptions.Exit(answer.code)
    if not flags.as_json:
        click.echo(render_plan(plan, stdout_style(), dry_run=False, verbosity=OUTPUT.verbosity))
    app.refuse_unless_allowed(plan, flags.run.force)
    confirm(flags.yes)
    result = app.execute(plan, flags.run, on_event=echo_err)
    if flags.as_json:
        click.echo(json.dumps(result_json(plan, result), indent=2))
        return
    click.echo(
        f"Committed transaction {result.txid}: removed {len(result.removed)}, reinstalled "
        f"{len(result.reinstalled)}, installed {len(result.installed)}; probes passed: "
        f"{len(result.probes)}.\n{undo_line(result.txid, result.prefix)}"
    )


def dry_run_answer(plan: Plan, as_json: bool) -> app.Answer:
    """What a dry run prints (the plan, rendered or as JSON) and its exit code."""
    if as_json:
        out = plan.model_dump_json(indent=2)
    else:
        out = render_plan(plan, stdout_style(), dry_run=True, verbosity=OUTPUT.verbosity)
    return app.Answer(out, ExitCode.OK if plan.verdict == "pass" else ExitCode.REFUSED)


def undo_line(txid: str, prefix: Path) -> str:
    """How to go back, as a command that runs as printed."""
    return "Undo with: " + shown(cudafix_line("undo", txid, target=venv_flags(prefix)))


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
        if OUTPUT.as_json:
            click.echo(json.dumps({"state": "declined", "exit_code": int(ExitCode.FAILURE)}))
        echo_err("Nothing changed.")
        raise click.exceptions.Exit(ExitCode.FAILURE)


def result_json(plan: Plan, result: TransactionResult) -> dict[str, Any]:
    """What a fleet controller aggregates from a node that committed."""
    return {
        "state": "committed",
        "exit_code": int(ExitCode.OK),
        **result_fields(result),
        "plan": plan.model_dump(mode="json"),
    }


def result_fields(result: TransactionResult) -> dict[str, Any]:
    """A committed transaction's outcome, as JSON fields."""
    return {
        "target": str(result.prefix),
        "transaction": result.txid,
        "removed": list(result.removed),
        "reinstalled": list(result.reinstalled),
        "installed": list(result.installed),
        "probes": list(result.probes),
    }


def undo_json(preview: UndoPreview) -> dict[str, Any]:
    """``undo --dry-run --json``: what would be undone, and whether it can be."""
    refused = bool(preview.conflicts)
    return {
        "state": "refused" if refused else "pass" if preview.readable else "not-checked",
        "exit_code": int(ExitCode.REFUSED if refused else ExitCode.OK),
        "transaction": preview.entry.txid,
        "entry": preview.entry.__dict__,
        "paths": preview.paths,
        "conflicts": list(preview.conflicts),
        "readable": preview.readable,
    }


_STATES: tuple[tuple[type[CudafixError], str], ...] = (
    (StalePlan, "stale"),
    (PlanRefused, "refused"),
    (LockedError, "locked"),
    (RollbackIncomplete, "rollback-incomplete"),
    (TransactionFailed, "rolled-back"),
)


def error_json(err: CudafixError) -> dict[str, Any]:
    """What a fleet controller aggregates from a node that did not commit."""
    return {
        "state": next((s for kind, s in _STATES if isinstance(err, kind)), "error"),
        "exit_code": int(err.exit_code),
        "error": err.message,
        "context": error_context(err),
        "hint": err.hint,
    }


def emit_json_error(err: CudafixError) -> None:
    """One JSON object on stdout for a failure, beside the one-line message on stderr."""
    if not err.json_emitted:
        click.echo(json.dumps(error_json(err), indent=2))
    err.json_emitted = True
