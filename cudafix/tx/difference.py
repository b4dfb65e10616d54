"""How the live tree differs from a snapshot, as values; words only where they are written.

The snapshot's checks (:func:`cudafix.tx.snapshot.mismatch`, :func:`~cudafix.tx.snapshot.verify`)
return :class:`Difference` values, so a caller decides on fields (a rollback drops the ones a
failed restore already explains) instead of parsing sentences back. :func:`difference_text`
makes the one sentence each has where it is written: a journal record, a step's failure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

DifferenceKind = Literal[
    "missing",
    "appeared",
    "not-a-directory",
    "not-the-symlink",
    "not-the-fifo",
    "not-a-regular-file",
    "content-or-mode",
    "missing-directory",
    "mode-differs",
    "unexpected-names",
    "missing-names",
]
"""``missing`` .. ``content-or-mode``: one path against its entry; ``missing-directory`` ..
``missing-names``: a touched directory against its listing."""


@dataclass(frozen=True)
class Difference:
    """One way a snapshotted path (or a touched directory's names) differs from the snapshot."""

    path: str
    """The EnvPath of the entry, or of the directory whose names differ."""
    kind: DifferenceKind
    names: tuple[str, ...] = ()
    """For ``unexpected-names`` and ``missing-names``: the names, sorted."""
    target: str | None = None
    """For ``not-the-symlink``: the target the snapshot's symlink had."""


_WORDS: dict[DifferenceKind, str] = {
    "missing": "missing",
    "appeared": "exists, but did not before",
    "not-a-directory": "not a directory",
    "not-the-fifo": "not the FIFO it was",
    "not-a-regular-file": "not a regular file",
    "content-or-mode": "content or mode differs from the snapshot",
    "missing-directory": "missing directory",
    "mode-differs": "mode differs",
}


def difference_text(d: Difference) -> str:
    """The sentence a journal record or a step's failure carries (``lib/x.so: missing``)."""
    if d.kind == "not-the-symlink":
        return f"{d.path}: not the symlink -> {d.target}"
    if d.kind == "unexpected-names":
        return f"{d.path}: unexpected {', '.join(d.names)}"
    if d.kind == "missing-names":
        return f"{d.path}: missing {', '.join(d.names)}"
    return f"{d.path}: {_WORDS[d.kind]}"
