"""Options every command shares, each group parsed into one typed value for the command.

Each option group is one decorator that hands the command a single typed value
(:class:`cudafix.model.args.TargetArgs`, :class:`cudafix.model.args.FactArgs` or
:class:`PlanFlags`) instead of a bag of keywords, so a command body reads as: call one
flow, render it.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import click
from click.core import ParameterSource

from cudafix import app
from cudafix.cli.errors import emit_json_error
from cudafix.cli.output import output_option_list, shows_progress
from cudafix.model.errors import CudafixError
from cudafix.model.sources import Sources
from cudafix.model.transaction import DEFAULT_PROBE_TIMEOUT

EXIT_CODES_HELP = (
    "Exit codes: 0 ok/healthy, 1 problems found or failed (rolled back), 2 usage or input "
    "error, 3 plan refused or stale, 4 locked, unfinished transaction (run cudafix recover) "
    "or a rollback that could not restore every path (each is named)."
)

F = TypeVar("F", bound=Callable[..., Any])


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


@dataclass
class _GivenBefore:
    """The target options given before the subcommand (``cudafix --venv V doctor``), as uv
    takes its global options in either place; one given after the subcommand wins."""

    venv: str | None = None
    python: str | None = None


BEFORE = _GivenBefore()


def _remember(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    del ctx
    setattr(BEFORE, str(param.name), value)


def _venv_option(**kw: Any) -> Callable[[F], F]:
    return click.option(
        "--venv",
        "venv",
        metavar="DIR",
        help="Target venv, or its interpreter (default: $VIRTUAL_ENV, then .venv in this "
        "directory or a parent).",
        **kw,
    )


def _python_option(**kw: Any) -> Callable[[F], F]:
    return click.option(
        "-p",
        "--python",
        "python",
        metavar="PATH",
        help="Target interpreter, or a venv directory, as uv takes it (default: $UV_PYTHON).",
        **kw,
    )


def global_target_options(func: F) -> F:
    """``--venv`` and ``-p/--python`` on the group: every command then acts on that target
    unless it names its own."""
    remembered = {"expose_value": False, "callback": _remember}
    return _venv_option(**remembered)(_python_option(**remembered)(func))


def _target_option_list() -> list[Callable[[Any], Any]]:
    return [*output_option_list(), _venv_option(), _python_option()]


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
    """The target options given after the subcommand, else those given before it."""
    return app.TargetArgs(
        venv if venv is not None else BEFORE.venv,
        python if python is not None else BEFORE.python,
    )


def _fact_args(
    venv: str | None, python: str | None, dlopen_tables: tuple[Path, ...]
) -> app.FactArgs:
    return app.FactArgs(_target_args(venv, python), tuple(dlopen_tables))


def target_options(func: F) -> F:
    """``--venv`` / ``--python``, as uv spells them; the command receives ``target``."""
    func = _collect(func, ("venv", "python"), "target", _target_args)
    return _decorate(func, _target_option_list())


def facts_options(func: F) -> F:
    """Target options plus extra dlopen-only edges; the command receives ``facts``."""
    func = _collect(func, ("venv", "python", "dlopen_tables"), "facts", _fact_args)
    return _decorate(func, _facts_option_list())


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
            progress_fd=sys.stderr.fileno() if shows_progress() and sys.stderr.isatty() else None,
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
