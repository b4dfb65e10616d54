"""How a result differs from what was expected, as values; words only where they are written.

The snapshot's checks (:func:`cudafix.tx.restore.mismatch`, :func:`~cudafix.tx.restore.verify`)
return :class:`Difference` values, the after-state checks (:mod:`cudafix.tx.verify`, the
built-in ones of ``tx/files.py``) :class:`Deviation` values, so a caller decides on fields (a
rollback drops the differences a failed restore already explains) instead of parsing
sentences back. :func:`difference_text` and :func:`deviation_text` make the one sentence each
has where it is written: a journal record, a step's failure.
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


DeviationKind = Literal[
    "still-installed",
    "not-reinstalled",
    "other-version",
    "disappeared",
    "not-deleted",
    "not-present",
    "still-present",
    "kept-differs",
    "other-holder",
    "not-installed",
    "staged-missing",
    "staged-differs",
    "beyond-staged",
]


@dataclass(frozen=True)
class Deviation:
    """One way the result of a step differs from what the plan predicted
    (:mod:`cudafix.tx.verify`, ``tx/files.py``): any one fails the step."""

    kind: DeviationKind
    subject: str
    """The distribution (``*-installed``, ``not-reinstalled``, ``other-version``,
    ``disappeared``), else the EnvPath."""
    distribution: str = ""
    """Whose bytes the path should hold (``other-holder``), or the install it belongs to
    (``staged-*``, ``beyond-staged``)."""
    version: str = ""
    """The version found (``other-version``), or the install's (``not-installed``,
    ``staged-*``, ``beyond-staged``)."""
    planned: str = ""
    """The version the plan reinstalls (``other-version``)."""
    difference: Difference | None = None
    """How a kept path differs from its snapshot (``kept-differs``)."""


def deviation_text(d: Deviation) -> str:
    """The sentence a step's failure carries (``nvidia-cudnn-cu13 is still installed``)."""
    pin = f"{d.distribution}=={d.version}"
    match d.kind:
        case "still-installed":
            return f"{d.subject} is still installed"
        case "not-reinstalled":
            return f"{d.subject} was to be reinstalled but is not installed"
        case "other-version":
            return f"{d.subject} is at {d.version}, not {d.planned}"
        case "disappeared":
            return f"{d.subject} disappeared"
        case "not-deleted":
            return f"{d.subject} should have been deleted"
        case "not-present":
            return f"{d.subject} should be present"
        case "still-present":
            return f"{d.subject}: still present"
        case "kept-differs":
            assert d.difference is not None
            return f"kept {difference_text(d.difference)}"
        case "other-holder":
            return f"{d.subject} should hold {d.distribution}'s bytes"
        case "not-installed":
            return f"{d.subject}=={d.version} is not installed after the install step"
        case "staged-missing":
            return f"{d.subject}: missing ({pin})"
        case "staged-differs":
            return f"{d.subject}: other bytes than the staged wheel ({pin})"
        case "beyond-staged":
            return f"{d.subject}: written by the install, not in the staged wheel ({pin})"
