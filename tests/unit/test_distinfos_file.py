"""The parsed dist-infos' file: read back exactly as written, a line at a time, or not at all."""

from __future__ import annotations

import json
import os
from array import array
from pathlib import Path
from typing import Any

import pytest

from cudafix.env.memo import distinfos
from cudafix.env.statedir import compact_json


def _dist(rows: int) -> list[Any]:
    """A parsed dist-info (``reading._parse_one``'s shape) with every long list ``rows`` long."""
    paths = [f"lib/site-packages/pkg/m{i}é.py" for i in range(rows)]
    columns = [
        paths,
        "".join(chr(65 + i % 26) * 43 for i in range(rows)),
        array("q", [2**63 - 1 if i == 5 else i * 7 - 1 for i in range(rows)]),
        [[i, f"../../../bin/t{i}"] for i in range(rows)],
        [[i, "short", 2**70] for i in range(rows)],
    ]
    dist = ["pkg", "1.0", "lib/pkg-1.0.dist-info", "lib", "uv\n", ["numpy>=1"], columns, ["pkg"]]
    unsafe = [[f"/etc/x{i}", "absolute"] for i in range(rows)]
    issues = [[i + 1, f'a,"b{i}', "bad quoting"] for i in range(rows)]
    return ["dist", dist, unsafe, issues, None if rows % 2 else "not UTF-8 at byte 3"]


def _written(path: Path) -> dict[str, tuple[Any, Any]]:
    dists = {
        f"lib/pkg{rows}-1.0.dist-info": ([["lib", [[1, 2, 3, 4]], 0]], _dist(rows))
        for rows in (0, 1, 7, 12)
    }
    dists["lib/bare-1.0.dist-info"] = (None, ["no-record", "bare"])
    assert distinfos.save(path, dists)
    return dists


@pytest.fixture(autouse=True)
def _short_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three items and five characters a line: every list of the values spans lines."""
    monkeypatch.setattr(distinfos, "_ITEMS", 3)
    monkeypatch.setattr(distinfos, "_CHARS", 5)


def _cache(tmp_path: Path) -> Path:
    path = tmp_path / ".cudafix" / "cache" / "dist-infos.json"
    path.parent.mkdir(parents=True)
    return path


def test_dist_infos_read_back_as_written_a_few_items_a_line(tmp_path: Path) -> None:
    path = _cache(tmp_path)
    dists = _written(path)
    lines = path.read_text(encoding="utf-8").split("\n")
    assert max(len(json.loads(line)) for line in lines[6:-1] if line.startswith("[[")) <= 3
    back = distinfos.load(path)
    assert list(back) == list(dists)
    for info, (key, value) in dists.items():
        assert compact_json(back[info]) == compact_json((key, value))
        if value[0] == "dist":
            assert isinstance(back[info][1][1][6][2], array)  # the sizes, as the columns keep them


def test_a_file_cut_short_anywhere_is_no_cache(tmp_path: Path) -> None:
    path = _cache(tmp_path)
    _written(path)
    data = path.read_bytes()
    assert distinfos.load(path)
    for end in range(len(data) - 1, 0, -37):
        path.write_bytes(data[:end])
        assert distinfos.load(path) == {}, end
    newlines = [i + 1 for i, byte in enumerate(data) if byte == ord("\n")]
    for end in newlines[:-1]:  # cut after a whole line: the counts tell
        path.write_bytes(data[:end])
        assert distinfos.load(path) == {}, end


def test_counts_that_do_not_add_up_or_bytes_not_utf8_are_no_cache(tmp_path: Path) -> None:
    path = _cache(tmp_path)
    _written(path)
    lines = path.read_text(encoding="utf-8").split("\n")
    head = json.loads(lines[1])
    head[2][1][6][0] += 1  # one path more than its lines hold
    path.write_text("\n".join([lines[0], compact_json(head), *lines[2:]]), encoding="utf-8")
    assert distinfos.load(path) == {}
    _written(path)
    data = path.read_bytes()
    assert b"m0\\u00e9" in data  # the cache is ASCII: JSON escapes the rest
    path.write_bytes(data.replace(b"m0\\u00e9", b"m0\xff", 1))
    assert distinfos.load(path) == {}


def test_an_older_file_or_a_symlink_is_no_cache(tmp_path: Path) -> None:
    path = _cache(tmp_path)
    body = {"dists": {"lib/pkg-1.0.dist-info": [None, _dist(3)]}}
    path.write_text(compact_json({"format": distinfos.FORMAT, "version": 9, **body}))
    assert distinfos.load(path) == {}  # version 9: one JSON object, no header line
    real = tmp_path / "elsewhere.json"
    _written(real.parent / ".cudafix" / "cache" / "dist-infos.json")
    path.unlink()
    os.symlink(real.parent / ".cudafix" / "cache" / "dist-infos.json", path)
    assert distinfos.load(path) == {}
