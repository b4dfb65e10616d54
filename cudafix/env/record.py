"""RECORD parsing and path validation, pure.

RECORD paths are relative to the site-packages directory the dist-info lives in, and may
legitimately climb out of it (``../../../bin/tool``) but never out of the environment
(pip's ``_permitted``, uv's ``is_path_in_scheme``). Bad rows are collected, not raised
(installer's ``RecordEntry`` validation): one broken line must not hide the others.
"""

from __future__ import annotations

import csv
import hashlib
import io
import posixpath
import re
import sys
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from cudafix.model.names import EnvPath

_WEAK = frozenset({"md5", "sha1"})
"""Refused by the wheel spec (PEP 427: sha256 or stronger)."""


@dataclass(frozen=True, slots=True)
class RawEntry:
    """One RECORD row as written: path relative to site-packages, digest and size if usable."""

    path: str
    sha256: str | None
    """urlsafe-base64, unpadded; None when absent or recorded with another algorithm."""
    size: int | None


@dataclass(frozen=True)
class RecordProblem:
    """A RECORD row that could not be fully parsed."""

    line: int
    row: str
    reason: str


@dataclass(frozen=True)
class ParsedRecord:
    """Entries and problems of one RECORD file.

    A row with a bad hash or size still yields an entry (path only): the backend deletes
    every path RECORD names, so ownership must not forget it.
    """

    entries: tuple[RawEntry, ...]
    problems: tuple[RecordProblem, ...]
    unreadable: str | None = None
    """Why the RECORD as a whole cannot be read exactly (then ``entries`` is empty)."""


@dataclass(frozen=True)
class Refusal:
    """Why a RECORD path will not be acted on."""

    reason: str


NAMES_A_DIRECTORY = "names a directory"
"""A row naming a directory (``nvidia/cudnn/``, ``./``): RECORD lists files, and uv removes
a directory row with everything under it, other distributions' files included."""


_BOM = "\ufeff"
_BREAKS = frozenset("\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029\x00")
"""Characters that end a line for ``str.splitlines`` (how pip's ``importlib.metadata`` cuts
RECORD before csv sees it) but not for uv's csv reader, and NUL, which no path holds: a
field holding one is read differently by the two installers."""
_BREAK = re.compile("[" + re.escape("".join(sorted(_BREAKS))) + "]")
"""Any of :data:`_BREAKS`: one search per field, not a generator step per character."""
_ODD_BREAKS = "".join(sorted(_BREAKS - {"\n", "\r"}))
_QUOTE_OR_ODD_BREAK = re.compile("[" + re.escape(_ODD_BREAKS + '"') + "]")
"""Where RECORD text holds none of these, no field can hold a break: a field never quoted
never holds the line feed or carriage return that end its row (csv ends the row there, or
fails), and every other character of a field is one of the text's."""


_LINE = re.compile(r"[^\n]*\n|[^\n]+")
"""One line of RECORD text and its newline, cut where ``io.StringIO`` cuts it (at each line
feed only), without the copy of the whole text, four bytes a character, a StringIO holds."""


class _Lines:
    """The lines of RECORD text given in pieces, each piece but the last ending at a line
    feed (a file read a few megabytes at a time); and whether any piece handed out so far
    holds a quote or an odd line break (:data:`_QUOTE_OR_ODD_BREAK`), which a field may
    then hold. csv takes a row's lines before it gives the row, so a row's pieces have all
    been looked at by then."""

    def __init__(self, pieces: Iterable[str]) -> None:
        self.pieces = pieces
        self.odd = False

    def __iter__(self) -> Iterator[str]:
        start = 0
        for i, piece in enumerate(self.pieces):
            if i == 0 and piece.startswith(_BOM):
                start = len(_BOM)
            self.odd = self.odd or _QUOTE_OR_ODD_BREAK.search(piece, start) is not None
            yield from map(re.Match.group, _LINE.finditer(piece, start))
            start = 0


def _rows(lines: _Lines) -> Iterator[tuple[int, list[str]]]:
    """``(line, fields)`` of RECORD text, read as uv reads it: a leading UTF-8 BOM dropped,
    no field-size limit (Python's csv stops at 131,072 characters, uv does not).

    Strict quoting: text after a closing quote, or a quote never closed, raises
    :class:`csv.Error` instead of being glued into one long field.
    """
    reader = csv.reader(lines, strict=True)
    limit = csv.field_size_limit(sys.maxsize)
    try:
        for row in reader:
            yield reader.line_num, row
    finally:
        csv.field_size_limit(limit)


def parse_record(text: str) -> ParsedRecord:
    """Parse RECORD CSV text; never raises.

    A bad row is a problem and the rows after it are still read. A RECORD that cannot be
    read *exactly* (broken quoting, a field holding a line break or NUL) sets
    ``unreadable``: pip and uv would each see other rows, so nothing about it is trusted.
    """
    entries: list[RawEntry] = []
    problems, unreadable = scan_record((text,), lambda *row: entries.append(RawEntry(*row)))
    if unreadable is not None:
        return ParsedRecord((), (), unreadable)
    return ParsedRecord(tuple(entries), problems)


def scan_record(
    pieces: Iterable[str], entry: Callable[[str, str | None, int | None], object]
) -> tuple[tuple[RecordProblem, ...], str | None]:
    """:func:`parse_record` one row at a time: ``entry(path, sha256, size)`` for each entry
    as it is read, so no row outlives the caller's own use of it. ``pieces``: the RECORD's
    text, whole or in pieces that each end at a line feed (all but the last), so that a
    RECORD of millions of rows is never one string. Returns the problems and why the
    RECORD cannot be read exactly (None when it can); when it cannot, the entries already
    given are not to be trusted and the problems are empty."""
    problems: list[RecordProblem] = []
    line = 0
    lines = _Lines(pieces)
    try:
        for line, row in _rows(lines):
            if not row or not row[0]:
                continue
            if lines.odd and any(_BREAK.search(field) for field in row):  # rarely searched
                return (), f"line {line}: a field holds a line break or NUL"
            raw, reasons = _parse_row(row)
            entry(*raw)
            if reasons:  # rarely: no generator for the others
                problems.extend(RecordProblem(line, ",".join(row), r) for r in reasons)
    except csv.Error as exc:
        return (), f"line {line + 1}: {exc}"
    return tuple(problems), None


def _parse_row(row: list[str]) -> tuple[tuple[str, str | None, int | None], list[str]]:
    if len(row) != 3:
        return (row[0], None, None), [f"expected 3 columns, found {len(row)}"]
    digest, reasons = _parse_hash(row[1])
    size, size_reason = _parse_size(row[2])
    if size_reason:
        reasons.append(size_reason)
    return (row[0], digest, size), reasons


def _parse_hash(field: str) -> tuple[str | None, list[str]]:
    if not field:
        return None, []
    algo, sep, value = field.partition("=")
    if not sep or not value:
        return None, [f"malformed hash {field!r}"]
    if algo == "sha256":
        return value, []
    if algo in _WEAK:
        return None, [f"hash algorithm {algo!r} is too weak for RECORD"]
    if algo in hashlib.algorithms_guaranteed:
        return None, []
    return None, [f"unknown hash algorithm {algo!r}"]


def _parse_size(field: str) -> tuple[int | None, str | None]:
    if not field:
        return None, None
    try:
        size = int(field)
    except ValueError:
        return None, f"size {field!r} is not an integer"
    if size < 0:
        return None, f"size {field!r} is negative"
    return size, None


def without_entries(text: str, paths: Collection[str]) -> str:
    """RECORD text with the rows naming ``paths`` dropped, every other row re-quoted as csv.

    Read as :func:`parse_record` reads it (BOM, no size limit), so a row is dropped exactly
    when the planner saw that path; only readable RECORDs reach here.
    """
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerows(row for _, row in _rows(_Lines((text,))) if row and row[0] not in paths)
    return out.getvalue()


def resolve_record_path(site_packages: EnvPath, raw: str) -> EnvPath | Refusal:
    """Make a RECORD path relative to the prefix, lexically; refuse absolute or escaping ones.

    ``..`` is accepted only as a leading run (``../../../bin/tool``): a ``..`` after a
    directory name would resolve differently on disk when that directory is a symlink.
    The symlink check itself reads the filesystem and lives in the inventory.
    """
    if _plain(raw):
        return EnvPath(f"{site_packages}/{raw}")  # already normal: the common, fast case
    if _is_absolute(raw):
        return Refusal("absolute path")
    parts = raw.replace("\\", "/").split("/")
    if ".." in _after_leading_dotdots(parts):
        return Refusal("'..' after a directory name")
    joined = posixpath.normpath(posixpath.join(site_packages, *parts))
    if joined == ".":
        return Refusal("names the environment itself")
    if joined == ".." or joined.startswith("../"):
        return Refusal("escapes the environment")
    if parts[-1] in ("", ".", "..") or f"{site_packages}/".startswith(f"{joined}/"):
        return Refusal(NAMES_A_DIRECTORY)  # uv deletes a directory row's whole tree
    return EnvPath(joined)


def _plain(raw: str) -> bool:
    """Relative, no ``.``/``..``/empty component, no backslash or drive: normal as written.

    Four ``in`` tests, written out: a generator over them costs twice as much (a torch
    environment's RECORDs list 22k rows)."""
    return (
        bool(raw)
        and not raw.startswith((".", "/"))
        and not raw.endswith("/")
        and "\\" not in raw
        and "//" not in raw
        and "/." not in raw
        and ":" not in raw
    )


def _is_absolute(raw: str) -> bool:
    return raw.startswith(("/", "\\")) or (len(raw) > 1 and raw[1] == ":")


def _after_leading_dotdots(parts: list[str]) -> list[str]:
    i = 0
    while i < len(parts) and parts[i] in ("..", "."):
        i += 1
    return parts[i:]


def is_inside(root: Path, path: Path) -> bool:
    """Lexical containment of two absolute paths (the caller resolves symlinks if it must)."""
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True


def env_path_of(prefix: Path, path: Path) -> EnvPath | None:
    """The EnvPath of an absolute ``path`` lexically under ``prefix``, or None."""
    if not is_inside(prefix, path):
        return None
    rel = path.relative_to(prefix).as_posix()
    return None if rel == "." else EnvPath(rel)
