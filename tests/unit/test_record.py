"""RECORD read as uv reads it, hostile rows included: bad rows are problems that keep their
path, text two installers would read differently is unreadable, and paths resolve lexically
inside the environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from cudafix.env.record import (
    NAMES_A_DIRECTORY,
    Refusal,
    env_path_of,
    is_inside,
    parse_record,
    resolve_record_path,
    without_entries,
)
from cudafix.model.names import EnvPath

SP = EnvPath("lib/python3.11/site-packages")


@pytest.mark.parametrize(
    ("row", "entry", "reason"),
    [
        ("a.py,sha256=AbC,12", ("a.py", "AbC", 12), None),
        ("a.py,,", ("a.py", None, None), None),
        ("a.py,sha256=AbC,", ("a.py", "AbC", None), None),
        ("a.py,sha512=xyz,5", ("a.py", None, 5), None),
        ("a.py,blake2b=xyz,5", ("a.py", None, 5), None),
        ("a.py,md5=xyz,5", ("a.py", None, 5), "hash algorithm 'md5' is too weak for RECORD"),
        ("a.py,sha1=xyz,5", ("a.py", None, 5), "hash algorithm 'sha1' is too weak for RECORD"),
        ("a.py,crc32=xyz,5", ("a.py", None, 5), "unknown hash algorithm 'crc32'"),
        ("a.py,sha256,5", ("a.py", None, 5), "malformed hash 'sha256'"),
        ("a.py,sha256=,5", ("a.py", None, 5), "malformed hash 'sha256='"),
        ("a.py,sha256=AbC,big", ("a.py", "AbC", None), "size 'big' is not an integer"),
        ("a.py,sha256=AbC,-1", ("a.py", "AbC", None), "size '-1' is negative"),
        ("a.py,sha256=AbC,1.5", ("a.py", "AbC", None), "size '1.5' is not an integer"),
        ("a.py", ("a.py", None, None), "expected 3 columns, found 1"),
        ("a.py,sha256=AbC", ("a.py", None, None), "expected 3 columns, found 2"),
        ("a.py,sha256=AbC,1,extra", ("a.py", None, None), "expected 3 columns, found 4"),
    ],
)
def test_one_row(row: str, entry: tuple[str, str | None, int | None], reason: str | None) -> None:
    """Every row yields its path (the backend deletes what RECORD names, parsable or not)."""
    parsed = parse_record(f"ok.py,,\n{row}\n")
    assert parsed.unreadable is None
    assert [(e.path, e.sha256, e.size) for e in parsed.entries] == [("ok.py", None, None), entry]
    assert [(p.line, p.row, p.reason) for p in parsed.problems] == (
        [(2, row, reason)] if reason else []
    )


def test_a_row_can_hold_two_problems_and_later_rows_are_still_read() -> None:
    parsed = parse_record("a.py,md5=x,-3\nb.py,sha256=B,2\n")
    assert [p.reason for p in parsed.problems] == [
        "hash algorithm 'md5' is too weak for RECORD",
        "size '-3' is negative",
    ]
    assert [e.path for e in parsed.entries] == ["a.py", "b.py"]


def test_blank_rows_and_empty_paths_are_skipped_with_line_numbers_kept() -> None:
    parsed = parse_record("\n,sha256=X,1\n\nc.py,md5=x,1\n")
    assert [e.path for e in parsed.entries] == ["c.py"]
    assert [p.line for p in parsed.problems] == [4]


def test_a_leading_bom_is_dropped_as_uv_drops_it() -> None:
    parsed = parse_record("\ufeffa.py,sha256=A,1\n")
    assert [e.path for e in parsed.entries] == ["a.py"]


def test_quoted_commas_and_doubled_quotes_are_one_field() -> None:
    parsed = parse_record('"we,ird.py",sha256=A,1\n"say ""hi"".py",,\n')
    assert [e.path for e in parsed.entries] == ["we,ird.py", 'say "hi".py']
    assert parsed.problems == ()


def test_a_field_over_pythons_csv_limit_is_read_and_the_limit_restored() -> None:
    import csv

    limit = csv.field_size_limit()
    long = "d/" * 100_000 + "x.py"
    parsed = parse_record(f"{long},sha256=A,1\nb.py,,\n")
    assert [e.path for e in parsed.entries] == [long, "b.py"]
    assert csv.field_size_limit() == limit


@pytest.mark.parametrize(
    "text",
    [
        '"a\nb.py",sha256=A,1\n',
        '"a\rb.py",,\n',
        '"a\x0bb.py",,\n',
        '"a\x0cb.py",,\n',
        '"a\x1cb.py",,\n',
        '"a\x85b.py",,\n',
        '"a\u2028b.py",,\n',
        "a\x00b.py,,\n",
        'ok.py,,\n"tail.py",,"2\n3"\n',
    ],
)
def test_a_field_holding_a_line_break_or_nul_makes_the_record_unreadable(text: str) -> None:
    """pip cuts RECORD with splitlines before csv sees it, uv does not: each would read
    other rows, so none is trusted."""
    parsed = parse_record(text)
    assert parsed.entries == () and parsed.problems == ()
    assert parsed.unreadable is not None
    assert "line break or NUL" in parsed.unreadable


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ('ok.py,,\n"open.py,,\n', 2),
        ('"a.py"x,,\n', 1),
        ('ok.py,,\nok2.py,,\n"b.py"junk,sha256=A,1\n', 3),
    ],
)
def test_broken_quoting_is_unreadable_naming_the_line(text: str, line: int) -> None:
    parsed = parse_record(text)
    assert parsed.entries == ()
    assert parsed.unreadable is not None and parsed.unreadable.startswith(f"line {line}:")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("a.py", f"{SP}/a.py"),
        ("pkg/sub/m.py", f"{SP}/pkg/sub/m.py"),
        ("pkg/./m.py", f"{SP}/pkg/m.py"),
        ("pkg\\win\\m.py", f"{SP}/pkg/win/m.py"),
        ("../../../bin/tool", "bin/tool"),
        ("./../../../bin/tool", "bin/tool"),
        ("../../../share/x/y", "share/x/y"),
        ("../site-packages/a.py", f"{SP}/a.py"),
        ("..", Refusal(NAMES_A_DIRECTORY)),
        ("../..", Refusal(NAMES_A_DIRECTORY)),
        ("../../../..", Refusal("escapes the environment")),
        ("C:\\x", Refusal("absolute path")),
        ("\\\\server\\share", Refusal("absolute path")),
        ("/", Refusal("absolute path")),
        ("pkg/..", Refusal("'..' after a directory name")),
        ("pkg/../x.py", Refusal("'..' after a directory name")),
        ("pkg/", Refusal(NAMES_A_DIRECTORY)),
        ("pkg/.", Refusal(NAMES_A_DIRECTORY)),
        ("./", Refusal(NAMES_A_DIRECTORY)),
        (".", Refusal(NAMES_A_DIRECTORY)),
        ("pkg//m.py", f"{SP}/pkg/m.py"),
    ],
)
def test_resolve_record_path_edge_cases(raw: str, expected: str | Refusal) -> None:
    assert resolve_record_path(SP, raw) == expected


@pytest.mark.parametrize(
    "raw",
    ["a.py", "nvidia/cudnn/lib/libcudnn.so.9", "x.dist-info/RECORD", "a b/c d.py", "é/ü.py"],
)
def test_plain_paths_join_under_site_packages(raw: str) -> None:
    assert resolve_record_path(SP, raw) == f"{SP}/{raw}"


def test_without_entries_drops_named_rows_from_a_bom_record_and_requotes() -> None:
    text = '\ufeffa.py,sha256=A,1\n"b,c.py",,\nd.py,,\n\n'
    assert without_entries(text, {"a.py"}) == '"b,c.py",,\nd.py,,\n'
    assert without_entries(text, ()) == 'a.py,sha256=A,1\n"b,c.py",,\nd.py,,\n'
    assert without_entries(text, {"a.py", "b,c.py", "d.py"}) == ""


def test_without_entries_matches_the_path_as_parse_record_reads_it() -> None:
    text = '"x.py",sha256=A,1\ny.py,,\n'
    parsed = {e.path for e in parse_record(text).entries}
    assert without_entries(text, parsed) == ""


@pytest.mark.parametrize(
    ("root", "path", "inside"),
    [
        ("/venv", "/venv/lib/x", True),
        ("/venv", "/venv", True),
        ("/venv", "/venv2/x", False),
        ("/venv", "/other", False),
        ("/venv", "/venv/../etc", True),  # lexical: the caller resolves
    ],
)
def test_is_inside_is_lexical(root: str, path: str, inside: bool) -> None:
    assert is_inside(Path(root), Path(path)) is inside


@pytest.mark.parametrize(
    ("path", "env_path"),
    [
        ("/venv/lib/x.so", "lib/x.so"),
        ("/venv/bin", "bin"),
        ("/venv", None),
        ("/venvx/lib", None),
        ("/elsewhere/lib", None),
    ],
)
def test_env_path_of(path: str, env_path: str | None) -> None:
    assert env_path_of(Path("/venv"), Path(path)) == env_path
