"""RECORD read fast reads as RECORD read row by row, field by field.

Text with no quote and no line break but line feeds and carriage returns skips the search
of each field for a break; ``_plain`` paths skip normalisation. Both are compared with the
straightforward reading on generated text holding quotes, every break, commas and odd
paths.
"""

from __future__ import annotations

import csv
import posixpath
import random

from cudafix.env import record
from cudafix.env.record import (
    _BREAK,
    _BREAKS,
    RecordProblem,
    _parse_row,
    _plain,
    _rows,
    resolve_record_path,
    scan_record,
)
from cudafix.model.names import EnvPath

SP = EnvPath("lib/python3.11/site-packages")
PIECES = (
    "a/b.py",
    "pkg/",
    ",",
    ",sha256=AbC,12",
    ",sha256=x,",
    ",md5=q,3",
    ",,",
    ",,-1",
    "\n",
    "\r\n",
    '"',
    '"a,b"',
    '""',
    "../../bin/x",
    "./a",
    "a//b",
    "a/./b",
    "c:\\x",
    "\ufeff",
    "é",
    *sorted(_BREAKS),
)


def plain_scan(text: str) -> tuple[list[tuple[object, ...]], tuple[RecordProblem, ...], str | None]:
    """The reading before the fast path: every field searched for a break."""
    entries: list[tuple[object, ...]] = []
    problems: list[RecordProblem] = []
    line = 0
    try:
        for line, row in _rows(record._Lines((text,))):
            if not row or not row[0]:
                continue
            if any(_BREAK.search(field) for field in row):
                return entries, (), f"line {line}: a field holds a line break or NUL"
            raw, reasons = _parse_row(row)
            entries.append(raw)
            problems.extend(RecordProblem(line, ",".join(row), r) for r in reasons)
    except csv.Error as exc:
        return entries, (), f"line {line + 1}: {exc}"
    return entries, tuple(problems), None


def _scan(
    text: str, rng: random.Random | None = None
) -> tuple[list[tuple[object, ...]], tuple[RecordProblem, ...], str | None]:
    """``scan_record`` of ``text``, given whole or (with ``rng``) in pieces cut after
    line feeds picked at random, as a RECORD file is read."""
    entries: list[tuple[object, ...]] = []
    pieces = [text] if rng is None else _in_pieces(text, rng)
    problems, unreadable = scan_record(pieces, lambda *row: entries.append(row))
    return entries, problems, unreadable


def _in_pieces(text: str, rng: random.Random) -> list[str]:
    cuts = [i + 1 for i, c in enumerate(text) if c == "\n" and rng.random() < 0.5]
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True) if a < b]


def test_records_read_fast_read_as_row_by_row() -> None:
    rng = random.Random(17)
    plain = unreadable = 0
    clean = tuple(p for p in PIECES if record._QUOTE_OR_ODD_BREAK.search(p) is None)
    for trial in range(4000):
        pieces = clean if trial % 2 else PIECES
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(0, 25)))
        fast = _scan(text)
        assert fast == plain_scan(text) == _scan(text, rng), repr(text)
        plain += record._QUOTE_OR_ODD_BREAK.search(text) is None and bool(fast[0])
        unreadable += fast[2] is not None and "a field holds" in fast[2]
    assert plain > 300  # both readings are exercised
    assert unreadable > 300


def test_line_feeds_and_returns_in_unquoted_text_are_never_in_a_field() -> None:
    for text in ("a,b,c\r\nd,e,f\n", "a\r,b,c\n", "a,b\rc,d\n", "\ra,,\n", "a,,\r", "a,,\n\r\n"):
        assert _scan(text) == plain_scan(text), repr(text)


def _plain_path(raw: str) -> bool:
    return (
        bool(raw)
        and not raw.startswith((".", "/"))
        and not raw.endswith("/")
        and not any(c in raw for c in ("\\", "//", "/.", ":"))
    )


def test_plain_paths_are_told_as_before_and_are_already_normal() -> None:
    rng = random.Random(19)
    pieces = ("a", "b.py", "/", ".", "..", "\\", ":", "c:", "//", "/.", "./", "x")
    for _ in range(5000):
        raw = "".join(rng.choice(pieces) for _ in range(rng.randrange(0, 8)))
        assert _plain(raw) == _plain_path(raw), raw
        if _plain(raw):
            assert resolve_record_path(SP, raw) == posixpath.normpath(f"{SP}/{raw}")
