"""The ``#!`` line of scripts in ``bin/``: what a relocated environment changes.

venv-pack, conda-pack and multi-stage Docker builds copy a venv elsewhere and rewrite each
console script's shebang to the new interpreter; the script's RECORD hash (of the whole
file, old shebang included) then disagrees although nothing else changed. Reading the
first line lets doctor tell a relocation (an interpreter that exists) from a broken script
(one that does not) instead of calling either another build's bytes.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cudafix.model.names import EnvPath

_FIRST_LINE = 512
"""Bytes read of each script: a shebang longer than this is not one the kernel runs."""


@dataclass(frozen=True)
class Shebang:
    """A script's interpreter, as its first line names it."""

    interpreter: str
    """As shown: bytes that are not UTF-8 escaped (``\\xff``), so every report can carry it."""
    exists: bool
    """Whether that file exists (an executable the kernel could start)."""


def read_shebangs(prefix: Path, paths: Iterable[EnvPath]) -> dict[EnvPath, Shebang]:
    """The shebang of each of ``paths`` that starts with ``#!`` (others are left out).

    Each file is opened without following a symlink; an unreadable one has no shebang. The
    line ends at its first NUL byte, as the kernel reads it (the interpreter is a C string):
    a NUL planted in a script names the interpreter the kernel would start, never a path
    no system call can take."""
    out: dict[EnvPath, Shebang] = {}
    for path in paths:
        try:
            fd = os.open(prefix / path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            head = os.read(fd, _FIRST_LINE)
        except OSError:
            continue
        finally:
            os.close(fd)
        line = head.split(b"\n", 1)[0].split(b"\0", 1)[0]
        words = line[2:].split() if line.startswith(b"#!") else []
        if words:
            shown = words[0].decode("utf-8", "backslashreplace")
            out[path] = Shebang(shown, os.access(words[0], os.X_OK))
    return out
