"""Command lines cudafix prints for the user to run next, as argv values.

Why one place: every hint, ``Next:`` line and ``Undo with:`` is a cudafix command line with
the user's target flags, and each must run as printed when pasted into a shell, whatever
the venv's path holds (spaces, quotes, ``$``). Building argv lists and quoting once, at the
end, with :func:`shlex.join`, is what makes that true everywhere.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Sequence
from pathlib import Path

TargetFlags = tuple[str, ...]
"""``("--venv", DIR)`` or ``("--python", PATH)``: how a printed command names its target."""


def venv_flags(prefix: str | Path) -> TargetFlags:
    """Target flags naming an environment by its prefix."""
    return ("--venv", str(prefix))


def cudafix_argv(*words: str, target: Sequence[str] = (), tail: Iterable[str] = ()) -> list[str]:
    """``cudafix WORDS... TARGET... TAIL...``: the argv of a command to print."""
    return ["cudafix", *words, *target, *tail]


def shell_join(argv: Sequence[str]) -> str:
    """An argv as a shell reads it back: every word quoted where it needs to be."""
    return shlex.join(argv)


def cudafix_line(*words: str, target: Sequence[str] = (), tail: Iterable[str] = ()) -> str:
    """:func:`cudafix_argv`, quoted for a shell."""
    return shell_join(cudafix_argv(*words, target=target, tail=tail))
