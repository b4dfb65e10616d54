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


def uv_list_argv(python: str | Path) -> list[str]:
    """``uv pip list --python PYTHON``: what is installed in a target, by name and version."""
    return ["uv", "pip", "list", "--python", str(python)]


def shell_join(argv: Sequence[str]) -> str:
    """An argv as a shell reads it back: every word quoted where it needs to be."""
    return shlex.join(argv)


def cudafix_line(*words: str, target: Sequence[str] = (), tail: Iterable[str] = ()) -> str:
    """:func:`cudafix_argv`, quoted for a shell."""
    return shell_join(cudafix_argv(*words, target=target, tail=tail))


_TARGET_OPTIONS = ("--venv", "--python", "-p")


def names_target(args: Sequence[str]) -> bool:
    """Whether cudafix's arguments ``args`` name the target (``--venv``, ``-p``/``--python``,
    before or after the subcommand), rather than leave it to ``$VIRTUAL_ENV`` or ``.venv``."""
    own = args[: args.index("--")] if "--" in args else args
    return any(
        a in _TARGET_OPTIONS
        or a.startswith(("--venv=", "--python="))
        or (a.startswith("-p") and not a.startswith("--"))
        for a in own
    )


def applying_argv(given: Sequence[str], target: TargetFlags, *, ask: bool) -> list[str]:
    """The command that applies what a dry run showed: the dry run's own arguments ``given``
    without ``--dry-run``, naming the target when it was implicit (so it runs as printed
    from anywhere), with ``--yes`` unless a terminal can be ``ask``-ed (off one, cudafix
    refuses to apply without it)."""
    cut = given.index("--") if "--" in given else len(given)
    own, rest = [a for a in given[:cut] if a != "--dry-run"], list(given[cut:])
    added = [] if names_target(own) else list(target)
    added += [] if ask or {"--yes", "-y"} & set(own) else ["--yes"]
    return ["cudafix", *own, *added, *rest]


def apply_file_argv(path: str | Path, target: TargetFlags, tail: Iterable[str] = ()) -> list[str]:
    """``cudafix apply FILE TARGET... TAIL... --yes``: a saved plan, applied as reviewed (the
    file is what was reviewed, so it is not asked again)."""
    return cudafix_argv("apply", str(path), target=target, tail=[*tail, "--yes"])


_VALUE_OPTIONS = frozenset({"--venv", "--python", "-p", "--color"})
"""cudafix's options that may come before the subcommand and take a value."""
_ALIASES = {"uninstall": "remove"}


def subcommand(argv: Sequence[str]) -> str | None:
    """The subcommand a recorded command line ran (``argv[0]`` is the program): the first
    word that is not an option nor an option's value, as click reads it (``cudafix --venv
    V repair`` ran ``repair``); ``uninstall`` is ``remove``. None when there is none."""
    words = iter(argv[1:])
    for word in words:
        if word == "--":
            return None
        if word.startswith("-"):
            if word in _VALUE_OPTIONS:
                next(words, None)
            continue
        return _ALIASES.get(word, word)
    return None
