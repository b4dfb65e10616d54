"""``python -m scenarios list | build NAME DIR [--stage ready|broken] [--param K=V]``."""

from __future__ import annotations

import shlex
from pathlib import Path

import click

from cudafix.model.errors import CudafixError
from scenarios import build_scenario, list_scenarios


@click.group()
def main() -> None:
    """Build reproducible broken GPU environments from real wheels."""


@main.command("list")
def list_command() -> None:
    """Show every scenario with its one-line description."""
    for info in list_scenarios():
        click.echo(f"{info.name:16} {info.description}")


def _params(values: tuple[str, ...]) -> dict[str, int]:
    parsed: dict[str, int] = {}
    for value in values:
        key, sep, number = value.partition("=")
        if not sep or not number.isdigit():
            raise click.BadParameter(f"expected KEY=INTEGER, got {value!r}", param_hint="--param")
        parsed[key] = int(number)
    return parsed


@main.command()
@click.argument("name")
@click.argument("dest", type=click.Path(path_type=Path))
@click.option("--stage", type=click.Choice(["ready", "broken"]), default="ready", show_default=True)
@click.option("--param", "params", multiple=True, help="Generator parameter, e.g. files=5000.")
def build(name: str, dest: Path, stage: str, params: tuple[str, ...]) -> None:
    """Build scenario NAME into a new venv at DEST."""
    try:
        built = build_scenario(name, dest, stage=stage, params=_params(params) or None)
    except CudafixError as exc:
        detail = "\n".join([exc.message, *exc.context, *([exc.hint] if exc.hint else [])])
        raise click.ClickException(detail) from exc
    click.echo(f"venv:       {built.venv}")
    click.echo(f"python:     {built.python}")
    click.echo(f"wheelhouse: {built.wheelhouse}")
    if built.break_command():
        click.echo(f"break:      {shlex.join(built.break_command())}")


if __name__ == "__main__":
    main()
