"""Follow ``cudafix doctor``'s printed next step the way a user does: copy it, run it.

A user who reads ``Next: cudafix repair ...`` pastes that command into a shell that has no
venv activated (the venv was named with ``--venv``). If it is a ``--dry-run`` preview, the
preview's own advice is to run the same command without ``--dry-run``; a non-interactive
user adds ``--yes``. Shared by the CI test of the ``incident-pip`` scenario and
``make e2e-real``, so both follow the very same words.
"""

from __future__ import annotations

import itertools
import shlex
from collections.abc import Sequence
from pathlib import Path

NEXT = "Next: "


def printed_next(doctor_stdout: str) -> list[str] | None:
    """The words of doctor's ``Next:`` command (its ``# ...`` comment dropped), or None."""
    for line in doctor_stdout.splitlines():
        if line.startswith(NEXT):
            words = shlex.split(line[len(NEXT) :], comments=True)
            return words if words[:1] == ["cudafix"] else None
    return None


def names_target(words: Sequence[str], venv: Path) -> bool:
    """Whether the command points at ``venv`` itself (``--venv DIR`` or ``--python PATH``)."""
    for flag, value in itertools.pairwise(words):
        if flag == "--venv" and Path(value).absolute() == venv.absolute():
            return True
        if flag == "--python" and venv.absolute() in Path(value).absolute().parents:
            return True
    return False


def applying(words: Sequence[str]) -> list[str]:
    """The preview's own next step: the same words without ``--dry-run``, plus ``--yes``."""
    kept = [w for w in words if w != "--dry-run"]
    return kept if "--yes" in kept else [*kept, "--yes"]


def with_target(words: Sequence[str], venv: Path) -> list[str]:
    """``words`` aimed at ``venv`` when they name no target (what the printed line omitted)."""
    return list(words) if names_target(words, venv) else [*words, "--venv", str(venv)]


def as_argv(words: Sequence[str], cudafix: Sequence[str]) -> list[str]:
    """The printed words as a process argv: the leading ``cudafix`` is this cudafix."""
    return [*cudafix, *words[1:]]
