"""What reading a RECORD of many rows keeps in memory, and the columns it keeps them in.

A RECORD may list millions of rows (hundreds of megabytes): each row must cost little more
than its own text, while it is read, saved in the tree cache and read back from it.
"""

from __future__ import annotations

import functools
import json
import tracemalloc
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cudafix.env import reading, statedir
from cudafix.env.inventory import RecordEntry, RecordFiles
from cudafix.env.memo.treecache import TreeCache, dists_file
from cudafix.env.reading import read_distribution, read_inventory
from cudafix.env.record import parse_record
from cudafix.env.statedir import json_parts
from cudafix.model.errors import InputError
from cudafix.model.names import DistName, EnvPath
from tests.support.loadertree import backdate

SP = EnvPath("lib/python3.11/site-packages")
ROWS = 30_000
SHA = "A" * 43


def _big_record(prefix: Path, rows: int, present: int = 100) -> None:
    """One distribution whose RECORD lists ``rows`` files, the first ``present`` on disk."""
    site = prefix / SP
    info = site / "big-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: big\nVersion: 1.0\n")
    lines = []
    for i in range(rows):
        rel = f"big/d{i % 50}/module_with_a_long_name_{i}.py"
        if i < present:
            (site / rel).parent.mkdir(parents=True, exist_ok=True)
            (site / rel).write_text("x = 1\n")
        lines.append(f"{rel},sha256={SHA},{i}")
    (info / "RECORD").write_text("\n".join([*lines, "big-1.0.dist-info/RECORD,,"]) + "\n")
    backdate(info)  # settled: the tree cache keeps it


def _peak(work: Callable[[], Any]) -> tuple[Any, int]:
    """``work()`` and the most memory it held at once beyond what it started with."""
    tracemalloc.start()
    try:
        start, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        value = work()
        return value, tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()


def test_a_large_record_costs_a_few_hundred_bytes_a_row_cold_saved_and_warm(
    tmp_path: Path,
) -> None:
    _big_record(tmp_path, ROWS)
    cache_file = tmp_path / ".cudafix" / "cache" / "tree-cache.json"
    tree = TreeCache()
    inv, cold = _peak(functools.partial(read_inventory, tmp_path, [SP], None, cache=tree))
    assert len(inv.missing["big"]) == ROWS - 100  # every row was read, its path kept once
    _, saved = _peak(functools.partial(tree.save, cache_file))
    assert dists_file(cache_file).stat().st_size > ROWS * 80  # every row's path and hash
    inv_missing = inv.missing["big"]
    del inv, tree
    warm_inv, warm = _peak(
        lambda: read_inventory(tmp_path, [SP], None, cache=TreeCache.load(cache_file))
    )
    assert len(warm_inv.distributions["big"].files) == ROWS + 1
    assert warm_inv.missing == {"big": tuple(sorted(inv_missing))}
    per_row = {"cold": cold / ROWS, "saved": saved / ROWS, "warm": warm / ROWS}
    # The RECORD's text is read a megabyte at a time; each row's path (about 130), hash (43
    # characters of one string), size (8 bytes of an array) and place in the ownership
    # index about 230 more. An entry object per row, a second path string or a string per
    # hash would each add fifty or more; the cache read whole, not a line at a time, ninety.
    assert per_row["cold"] < 380, per_row
    assert per_row["saved"] < 45, per_row
    assert per_row["warm"] < 265, per_row


def test_record_files_are_the_rows_as_entries(tmp_path: Path) -> None:
    info = tmp_path / SP / "tool-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tool\nVersion: 1.0\n")
    (info / "RECORD").write_text(
        "tool/__init__.py,sha256=AAA,3\n"
        "../../../bin/tool,sha256=BBB,\n"
        "./tool/x.py,,\n"
        "/etc/passwd,,\n"
        "tool-1.0.dist-info/RECORD,,\n"
    )
    dist = read_distribution(tmp_path, SP, EnvPath(f"{SP}/tool-1.0.dist-info"))
    assert dist is not None
    want = (
        RecordEntry(EnvPath(f"{SP}/tool/__init__.py"), "tool/__init__.py", "AAA", 3),
        RecordEntry(EnvPath("bin/tool"), "../../../bin/tool", "BBB", None),
        RecordEntry(EnvPath(f"{SP}/tool/x.py"), "./tool/x.py", None, None),
        RecordEntry(
            EnvPath(f"{SP}/tool-1.0.dist-info/RECORD"), "tool-1.0.dist-info/RECORD", None, None
        ),
    )
    files = dist.files
    assert isinstance(files, RecordFiles)
    assert tuple(files) == want and files == want and want == files
    assert hash(files) == hash(want) and len(files) == 4
    assert [files[i] for i in range(-4, 4)] == [*want, *want]
    assert files[1:3] == want[1:3]
    assert dist.top_level == ("tool",)
    assert dist.record_by_path[EnvPath("bin/tool")].raw == "../../../bin/tool"


SHAPES: list[Any] = [
    {},
    [],
    'é\u2028"',
    list(range(10)),
    {"a": list(range(10)), "b": [1, 2], "c": {"d": [["x"] * 7, "y"]}},
    {f"k{i}": i for i in range(10)},
    {f"k{i}": (list(range(i * 3)) if i % 3 else i) for i in range(10)},
    ["dist", ["n", "1", [[f"p{i}" for i in range(9)], [None] * 9, list(range(9)), []]], [], None],
    {1: [0] * 10, "x": 2},
    [(1, 2), (3,) * 9, {"z": (0,) * 9}],
    [[[[[[["deep"] * 9]]]]]],
]


@pytest.mark.parametrize("value", SHAPES)
def test_json_parts_are_json_dumps_a_few_items_at_a_time(
    value: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(statedir, "_ITEMS_AT_ONCE", 3)
    parts = list(json_parts(value))
    assert "".join(parts) == json.dumps(value, separators=(",", ":"))
    assert json.loads("".join(parts)) == json.loads(json.dumps(value))


def test_json_parts_split_a_long_array_deep_in_a_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(statedir, "_ITEMS_AT_ONCE", 3)
    long = [f"row{i:02}" for i in range(30)]
    parts = list(json_parts({"dists": {"a": ["k", ["dist", [long, [None] * 2]]]}}))
    assert max(len(p) for p in parts) < 3 * len('"row00",') + 2  # no part holds 4 rows


def test_json_parts_write_a_long_string_and_an_array_a_piece_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A RECORD's hashes are one string and its sizes one array: each written in pieces,
    cut anywhere (JSON escapes a character at a time), the array as the JSON array it is."""
    monkeypatch.setattr(statedir, "_ITEMS_AT_ONCE", 3)
    monkeypatch.setattr(statedir, "_CHARS_AT_ONCE", 4)
    text = 'ab"c\\né\u2028\x00' * 5 + "\udc80"
    sizes = array("q", range(-1, 9))
    parts = list(json_parts({"h": text, "p": ["p"] * 5, "cols": [text, sizes, "short"]}))
    expected = {"h": text, "p": ["p"] * 5, "cols": [text, list(range(-1, 9)), "short"]}
    assert "".join(parts) == json.dumps(expected, separators=(",", ":"))
    assert max(len(p) for p in parts) <= 4 * len("\\u2028")  # no part holds 5 characters


def _no_parse(*_args: object, **_kw: object) -> None:
    raise AssertionError("parsed again")


def test_a_row_the_columns_cannot_hold_is_read_back_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hashes of another length, a hash spelt like the column's own blank, one that is not
    ASCII, a size past 64 bits: each row reads back as written, cold and from the cache."""
    info = tmp_path / SP / "odd-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: odd\nVersion: 1.0\n")
    rows = [
        ("odd/plain.py", SHA, 7),
        ("odd/short.py", "AAA", 3),
        ("odd/blank.py", "*" * 43, 1),
        ("odd/accent.py", "é" * 43, 2),
        ("odd/huge.py", SHA, 2**64),
        ("odd/none.py", None, None),
        ("odd/max.py", SHA, 2**63 - 1),
    ]
    text = "".join(
        f"{p},{'sha256=' + h if h else ''},{'' if n is None else n}\n" for p, h, n in rows
    )
    (info / "RECORD").write_text(text + "odd-1.0.dist-info/RECORD,,\n", encoding="utf-8")
    backdate(info)
    want = [(EnvPath(f"{SP}/{p}"), h, n) for p, h, n in rows]
    cache_file = tmp_path / ".cudafix" / "cache" / "tree-cache.json"
    tree = TreeCache()
    cold = read_inventory(tmp_path, [SP], None, cache=tree)
    tree.save(cache_file)
    monkeypatch.setattr(reading, "_parse_one", _no_parse)  # the warm read parses nothing
    warm = read_inventory(tmp_path, [SP], None, cache=TreeCache.load(cache_file))
    for inv in (cold, warm):
        files = inv.distributions[DistName("odd")].files
        assert [(e.path, e.sha256, e.size) for e in files][:-1] == want
        assert [(files[i].sha256, files[i].size) for i in range(len(rows))] == [
            (h, n) for _, h, n in rows
        ]


@pytest.mark.parametrize("piece", [1, 7, 64, 1 << 20])
def test_a_record_read_in_pieces_reads_as_the_whole_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, piece: int
) -> None:
    """Pieces cut wherever the bytes fall are cut again after a line feed: a BOM, a
    character of several bytes and a quoted field holding a comma read as in one piece; a
    byte that is not UTF-8 is named at its offset in the file."""
    monkeypatch.setattr(reading, "_PIECE", piece)
    info = tmp_path / SP / "pieces-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pieces\nVersion: 1.0\n")
    text = '\ufeffpieces/é.py,sha256=AAA,3\n"pieces/a,b.py",,\n' + "pieces/long.py,,\n" * 9
    record = info / "RECORD"
    record.write_text(text + "pieces-1.0.dist-info/RECORD,,", encoding="utf-8")
    dist = read_distribution(tmp_path, SP, EnvPath(f"{SP}/pieces-1.0.dist-info"))
    assert dist is not None
    want = parse_record(record.read_text(encoding="utf-8")).entries
    assert [(e.raw, e.sha256, e.size) for e in dist.files] == [
        (e.path, e.sha256, e.size) for e in want
    ]
    data = record.read_bytes()
    record.write_bytes(data[:40] + b"\xff" + data[40:])
    with pytest.raises(InputError, match="not UTF-8 at byte 40"):
        read_distribution(tmp_path, SP, EnvPath(f"{SP}/pieces-1.0.dist-info"))
