"""The tree cache's parsed dist-infos, kept in a file of lines that is read a line at a time.

A dist-info's parsed value (``reading._parse_one``) holds every row of its RECORD, and a
RECORD may list millions. Kept as one JSON text, a warm run held the whole file's text
beside the rows parsed from it, and every size as a Python integer before it became a
64-bit array: about 115 bytes a row more than the rows themselves. Here each value is one
line with its long lists hollowed out (each replaced by its length), then those lists a
few thousand items a line, which the reader appends to the columns as it goes; the sizes
as the base64 of their bytes, so that none is ever a Python integer.

A line ``[dist_info, key, value]`` is followed, where ``value`` is ``["dist", ...]``, by
the lines of its long lists (:func:`_long`) in that order. A file cut short, or whose
counts do not add up, is no cache at all.
"""

from __future__ import annotations

import base64
import json
import sys
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence, Sized
from itertools import chain
from pathlib import Path
from typing import Any

from cudafix.env.statedir import compact_json, load_cache_lines, save_cache_lines

FORMAT = "cudafix-dist-infos"
VERSION = 10
"""9 and before: one JSON object (versions shared with the tree cache's listings);
10: a line per dist-info, then its long lists a few thousand items a line (sizes packed)."""

_ITEMS = 4096
"""Items of a long list written on one line (a RECORD's paths, sizes, odd rows)."""
_SIZES = 2
"""Where the sizes are among :func:`_long`'s lists: written packed (:func:`_packed`)."""
_CHARS = _ITEMS * 43
"""Characters of the hashes' column written on one line: a line's worth of rows."""
_HEADER_BYTES = 1 << 12
"""The longest header line read: an older file is one line of every row, never read whole."""

Parsed = tuple[Any, Any]
"""A dist-info's cache key and its parsed value, as :class:`TreeCache` keeps them."""


def save(path: Path, dists: Mapping[str, Parsed]) -> bool:
    """Write ``dists`` to ``path`` (``statedir.save_cache_file``'s rules); False if not."""
    return save_cache_lines(path, FORMAT, VERSION, {"dists": len(dists)}, _lines(dists))


def load(path: Path) -> dict[str, Parsed]:
    """What :func:`save` wrote to ``path``; empty where there is none, or it is foreign,
    corrupt or cut short."""
    found = load_cache_lines(path, FORMAT, VERSION, header_bytes=_HEADER_BYTES)
    if found is None:
        return {}
    header, lines = found
    out: dict[str, Parsed] = {}
    try:
        for line in lines:
            info, key, value = json.loads(line)
            if value[0] == "dist":
                value = _filled(value, lines)
            out[str(info)] = (key, value)
        if len(out) != header["dists"]:
            raise ValueError("cut short")
    except (OSError, ValueError, KeyError, TypeError, IndexError, OverflowError):
        return {}
    return out


def _lines(dists: Mapping[str, Parsed]) -> Iterator[str]:
    """The file's lines after its header, made as they are written (never all at once)."""
    for info, (key, value) in dists.items():
        if value[0] != "dist":
            yield compact_json([info, key, value])
            continue
        long = _long(value)
        yield compact_json([info, key, _hollow(value, [len(seq) for seq in long])])
        for i, seq in enumerate(long):
            step = _CHARS if isinstance(seq, str) else _ITEMS
            for start in range(0, len(seq), step):
                part = seq[start : start + step]
                yield compact_json(_packed(part) if i == _SIZES else part)


def _long(value: Sequence[Any]) -> list[Any]:
    """The lists of ``["dist", dist, unsafe, issues, unreadable]`` that grow with its
    RECORD: the columns ``dist[6]`` (paths, hashes, sizes, moved, odd), unsafe, issues."""
    return [*value[1][6], value[2], value[3]]


def _hollow(value: Sequence[Any], fill: Sequence[Any]) -> list[Any]:
    """``value`` with :func:`_long`'s lists replaced by ``fill``'s items, in their order."""
    dist = value[1]
    return [value[0], [*dist[:6], list(fill[:5]), *dist[7:]], fill[5], fill[6], *value[4:]]


def _filled(value: Sequence[Any], lines: Iterator[str]) -> list[Any]:
    """``value``, read hollow, with its long lists read from the ``lines`` that follow it."""
    counts = [int(n) for n in _long(value)]
    paths = list(chain.from_iterable(_column(lines, counts[0], list)))
    hashes = "".join(_column(lines, counts[1], str))
    sizes = array("q")
    for part in _column(lines, counts[2], str, _unpacked):
        sizes.extend(part)
    rest = [list(chain.from_iterable(_column(lines, n, list))) for n in counts[3:]]
    return _hollow(value, [paths, hashes, sizes, *rest])


def _column(
    lines: Iterator[str], count: int, kind: type, parse: Callable[[Any], Sized] = lambda c: c
) -> Iterator[Any]:
    """The parts of one long list, from the lines that hold its ``count`` items: each line
    a non-empty JSON ``kind``, made a part by ``parse``. ValueError where they do not add up."""
    read = 0
    while read < count:
        line = next(lines, None)
        if line is None:
            raise ValueError("cut short")
        chunk = json.loads(line)
        if not isinstance(chunk, kind) or not chunk:
            raise ValueError("not a line of this list")
        part = parse(chunk)
        read += len(part)
        yield part
    if read != count:
        raise ValueError("miscounted")


def _packed(sizes: Sequence[int]) -> str:
    """Sizes as the base64 of their 64-bit little-endian bytes: read back with no integer
    object per row (a list of millions of them cost as much as the paths)."""
    packed = array("q", sizes)
    if sys.byteorder == "big":
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode("ascii")


def _unpacked(text: str) -> array[int]:
    """The sizes :func:`_packed` wrote as ``text``."""
    sizes = array("q")
    sizes.frombytes(base64.b64decode(text, validate=True))
    if sys.byteorder == "big":
        sizes.byteswap()
    return sizes
