"""Where the CLI's words go, and how many: stdout and stderr, verbosity, colour, events, JSON.

stdout is the report (or one JSON object); stderr carries warnings and, on a terminal or
under ``-v``, progress. Every line the CLI writes goes through one of the writers here,
so ``-q``/``-v``/``--color``/``--json`` are decided in one place.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, cast

import click

from cudafix.cli.render import plain, shown
from cudafix.model.transaction import RunEvent, RunEventKind

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
    argv: tuple[str, ...] = ()
    """cudafix's arguments as given: the commands it prints to run next start from them."""

    def colours(self, stream_is_tty: bool) -> bool:
        if self.color != "auto":
            return self.color == "always"
        return stream_is_tty and not os.environ.get("NO_COLOR")


OUTPUT = Output()


def reset_output(argv: tuple[str, ...], *, as_json: bool) -> None:
    """A fresh :data:`OUTPUT` for one command line (``main`` may run more than once in a
    process)."""
    OUTPUT.verbosity, OUTPUT.color, OUTPUT.as_json, OUTPUT.argv = 0, "auto", as_json, argv


def style_for(stream_is_tty: bool) -> Callable[..., str]:
    """Colour only a terminal (``--color always|never`` and ``NO_COLOR`` decide otherwise)."""
    return click.style if OUTPUT.colours(stream_is_tty) else plain


def stdout_style() -> Callable[..., str]:
    """The style for what goes to stdout."""
    return style_for(sys.stdout.isatty())


def echo_err(message: str) -> None:
    """A line for stderr, so stdout stays the report (or the JSON). Each message is one
    line, escaped with :func:`~cudafix.cli.render.shown`: it carries paths and the
    command's argv, and a name holding a newline or an ESC sequence must not forge a line
    or drive the terminal."""
    _echo(shown(message), err=True)


_LEAD: dict[RunEventKind, str] = {
    "progress": "",
    "info": "",
    "note": "note: ",
    "warning": "warning: ",
    "probe-note": "probe note: ",
}
"""How each kind of event is introduced on stderr."""


def echo_event(event: RunEvent) -> None:
    """A flow's event on stderr (:func:`echo_err`); progress only to a terminal, or
    anywhere under ``-v``, and never under ``-q`` or ``--json``."""
    if event.kind == "progress" and not shows_progress():
        return
    echo_err(_LEAD[event.kind] + event.text)


def shows_progress() -> bool:
    """Whether progress is shown: never under ``-q`` or ``--json``; else under ``-v``, or
    on a terminal."""
    if OUTPUT.verbosity < 0 or OUTPUT.as_json:
        return False
    return OUTPUT.verbosity > 0 or sys.stderr.isatty()


def echo_out(message: str) -> None:
    """The report on stdout, coloured as ``--color`` says."""
    _echo(message, err=False)


def echo_json(value: object, *, indent: int | None = 2) -> None:
    """One JSON value on stdout (``indent`` None: on one line); tuples and other iterables
    as lists."""
    _echo(json.dumps(value, indent=indent, default=list), err=False, color=False)


def echo_rendered(text: str) -> None:
    """An error rendered already (its values escaped) for stderr."""
    _echo(text, err=True)


def _echo(message: str, *, err: bool, color: bool | None = None) -> None:
    """``click.echo``; a reader that went away (``cudafix ... | head -1``) ends the output,
    never the command: a transaction under way commits or rolls back as it would have,
    and what it says after is dropped (the stream is pointed at ``/dev/null``)."""
    stream = sys.stderr if err else sys.stdout
    if color is None:
        color = OUTPUT.colours(stream.isatty())
    try:
        click.echo(message, err=err, color=color)
    except BrokenPipeError:
        gone(stream)


def gone(stream: Any) -> None:
    """Point ``stream``'s descriptor at ``/dev/null``: its reader went away, and what is
    still to be said (a flush at exit included) must not fail the process."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        return
    try:
        os.dup2(devnull, stream.fileno())
    except (OSError, ValueError):
        pass
    finally:
        os.close(devnull)


def _set_verbosity(level: int) -> Callable[[click.Context, click.Parameter, bool], None]:
    """``-q`` or ``-v``, wherever given; both at once is a usage error (as in uv), not
    whichever click read last."""

    def callback(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
        if not value:
            return
        if OUTPUT.verbosity not in (0, level):
            raise click.UsageError("--quiet and --verbose cannot be used together", ctx)
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


def output_options(func: F) -> F:
    """``-q``, ``-v`` and ``--color`` on a command or group (they set :data:`OUTPUT`)."""
    for option in reversed(output_option_list()):
        func = option(func)
    return func
