"""The fast scans find exactly what one plain pattern scan of the whole input finds.

Each scan skips most of its input (an ELF object's ``.rodata`` is read only around each
``.so``, a Python source is matched only when it holds a ``.so`` that a literal could end
with); the straightforward scans are written out here and both run on generated inputs
that put names, quotes, templates and long runs of name bytes everywhere, chunk and
window edges included. A linker script's words are looked for in one search, not one
search a word.
"""

from __future__ import annotations

import os
import random
import re
import struct
from pathlib import Path

from cudafix.env.pysources import _QUOTED, _TEMPLATE, ANY_VERSION, source_literals
from cudafix.linker.elf import _LINKER_SCRIPT_WORDS, ElfProblem, _not_elf, read_elf
from cudafix.linker.literals import (
    _AFTER,
    _BEFORE,
    _CHUNK,
    _OVERLAP,
    _PATTERN,
    MAX_LITERALS,
    _literals,
    read_literals,
    soname_literals,
)
from cudafix.model.names import Soname

NAMES = (b"libfoo.so.1", b"libcufft.so.11", b"libnvrtc-builtins.so", b"libc++.so.1.2", b"libx.so")
PIECES = (
    *NAMES,
    b"lib",
    b".so",
    b".so.",
    b"so",
    b".",
    b"/",
    b"\0",
    b"\n",
    b"'",
    b'"',
    b"{v}",
    b"{",
    b"}",
    b"%s",
    b"%d",
    b"1",
    b"a",
    b"Z_-+",
    b" ",
    b"libfoo.so.{major}",
    b"libbar.so.%s",
    b"xlib",
    b"rary",
)


TEMPLATES = (b"libfoo.so.{major}", b"libbar.so.%s")
QUOTED = tuple(q + n + q for n in (*NAMES, *TEMPLATES) for q in (b"'", b'"'))


def plain_soname_literals(data: bytes) -> list[Soname]:
    """One pattern scan of the whole of ``data``: what the fast scan must equal."""
    out: dict[Soname, None] = {}
    for match in _PATTERN.finditer(data):
        start, end = match.span()
        if start and data[start - 1] in _BEFORE:
            continue
        if end < len(data) and data[end] in _AFTER:
            continue
        out.setdefault(Soname(match.group().decode("ascii")), None)
        if len(out) >= MAX_LITERALS:
            break
    return list(out)


def plain_source_literals(data: bytes) -> tuple[Soname, ...]:
    if b".so" not in data:
        return ()
    found = dict.fromkeys(Soname(m.group(2).decode("ascii")) for m in _QUOTED.finditer(data))
    for m in _TEMPLATE.finditer(data):
        found.setdefault(Soname(m.group(2).decode("ascii") + ANY_VERSION))
    return tuple(found)


def _text(rng: random.Random, pieces: int, extra: tuple[bytes, ...] = ()) -> bytes:
    return b"".join(rng.choice(PIECES + extra) for _ in range(pieces))


def test_the_rodata_scan_finds_what_a_whole_scan_finds() -> None:
    rng = random.Random(7)
    found = 0
    for _ in range(3000):
        data = _text(rng, rng.randrange(0, 40))
        fast = soname_literals(data)
        assert fast == plain_soname_literals(data), data
        found += bool(fast)
    assert found > 1000  # the inputs do hold names: a scan that dropped them would fail


def test_long_runs_of_name_bytes_are_read_whole() -> None:
    """Runs longer than the first windows (64, 256, 1024 bytes) on either side of a ``.so``."""
    rng = random.Random(11)
    for size in (63, 64, 65, 255, 256, 257, 1500, 5000):
        for name in NAMES:
            sides = ((b"a" * size, b""), (b"", b".b" * size), (b"x" * size, b"y" * size))
            for left, right in sides:
                for data in (
                    b"\0lib" + left + b".so.1\0",
                    b"\0libx.so" + b".1" * size + b"\0",
                    b"\0libx" + b".a" * size + b".so\0",
                    left + name + right,
                    name + b"." + right,
                    left + b"\0" + name + b"\0" + right,
                    left + b"." + name + b"." + name,
                    rng.randbytes(size) + name + rng.randbytes(7),
                ):
                    assert soname_literals(data) == plain_soname_literals(data), data


def test_a_buffer_is_read_only_to_its_size() -> None:
    """What an earlier, longer chunk left past ``size`` in a reused buffer is never seen."""
    rng = random.Random(3)
    for _ in range(2000):
        data = _text(rng, rng.randrange(1, 30))
        stale = bytearray(data + _text(rng, rng.randrange(1, 10)))
        assert _literals(stale, len(data)) == plain_soname_literals(data), data
    for data, rest in ((b"\0libx.so", b".1\0"), (b"\0libx.so.1", b"2\0"), (b"\0lib", b"y.so\0")):
        plain = plain_soname_literals(data)
        assert _literals(bytearray(data + rest), len(data)) == plain
        assert _literals(bytearray(data + b"." * 100 + rest), len(data)) == plain


def test_the_names_kept_stop_at_the_limit_in_the_same_order() -> None:
    data = b"\0".join(b"lib%d.so.1" % i for i in range(MAX_LITERALS + 50)) + b"\0libz.so"
    assert soname_literals(data) == plain_soname_literals(data)
    assert len(soname_literals(data)) == MAX_LITERALS


def test_python_sources_give_what_a_whole_scan_gives() -> None:
    rng = random.Random(5)
    found = 0
    for _ in range(4000):
        data = _text(rng, rng.randrange(0, 30), QUOTED)
        fast = source_literals(data)
        assert fast == plain_source_literals(data), data
        found += bool(fast)
    assert found > 500


def test_quotes_shared_by_two_literals_are_matched_as_a_whole_scan_matches_them() -> None:
    for data in (
        b'"libfoo.so.1"libx.so"',
        b"'libfoo.so.1','libx.so'",
        b'"libbar.so.%s"libx.so"',
        b"'libfoo.so.{v}'libx.so.2'",
        b'"libx.so.1.2"',
        b'"libx.so.{a{b}"',
    ):
        assert source_literals(data) == plain_source_literals(data), data


def _elf_with_rodata(path: Path, rodata: bytes) -> None:
    """An ELF64 little-endian file whose only PROGBITS section is ``.rodata``."""
    names = b"\0.rodata\0.shstrtab\0"
    data_at = 0x40
    names_at = data_at + len(rodata)
    table_at = names_at + len(names)
    header = bytearray(0x40)
    header[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", header, 0x28, table_at)
    struct.pack_into("<HHH", header, 0x3A, 64, 3, 2)
    row = struct.Struct("<IIQQQQIIQQ")  # Elf64_Shdr
    table = (
        row.pack(0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        + row.pack(1, 1, 2, 0, data_at, len(rodata), 0, 0, 1, 0)
        + row.pack(9, 3, 0, 0, names_at, len(names), 0, 0, 1, 0)
    )
    path.write_bytes(bytes(header) + rodata + names + table)


def plain_read_literals(rodata: bytes) -> tuple[Soname, ...]:
    """The chunks :func:`read_literals` reads, each scanned whole."""
    found: dict[Soname, None] = {}
    for at in range(0, len(rodata), _CHUNK):
        for name in plain_soname_literals(rodata[at : at + _CHUNK + _OVERLAP]):
            found.setdefault(name, None)
    return tuple(list(found)[:MAX_LITERALS])


def test_an_objects_chunks_are_scanned_as_whole_chunks(tmp_path: Path) -> None:
    """Names across, inside and just past the overlap of two chunks; the last chunk shorter
    than the buffer the first one filled."""
    rng = random.Random(9)
    rodata = bytearray(rng.randbytes(2 * _CHUNK + 1000))
    for edge in (0, _CHUNK, _CHUNK + _OVERLAP, 2 * _CHUNK, 2 * _CHUNK + _OVERLAP):
        for shift in (-70, -45, -10, 20, 200, 236, 248):
            at = max(0, min(edge + shift, len(rodata) - 40))
            name = b"libn%d.so.%d" % (edge, shift + 100)  # each placement its own name
            rodata[at : at + len(name) + 2] = b"\0" + name + rng.choice((b"\0", b".", b"x"))
    # The last chunk is 1000 bytes; past them the buffer still holds the chunk before it,
    # whose ".7" would make the last name another one.
    rodata[-11:] = b"\0libtail.so"
    rodata[_CHUNK + 1000 : _CHUNK + 1003] = b".7\0"
    path = tmp_path / "libobj.so"
    _elf_with_rodata(path, bytes(rodata))
    fd = os.open(path, os.O_RDONLY)
    try:
        fast = read_literals(fd, os.pread(fd, 512, 0))
    finally:
        os.close(fd)
    assert fast == plain_read_literals(bytes(rodata))
    assert len(fast) >= 12
    assert "libtail.so" in fast
    assert all(re.fullmatch(rb"lib.*\.so[.0-9]*", n.encode()) for n in fast)


def _plain_is_script(head: bytes) -> bool:
    text = head[:512].lstrip()
    return any(word in text for word in _LINKER_SCRIPT_WORDS)


def test_a_linker_script_is_told_by_one_search_as_by_each_word(tmp_path: Path) -> None:
    """Words whole, cut, after blank space, at either end of the 512 bytes sniffed."""
    rng = random.Random(13)
    pieces = (*_LINKER_SCRIPT_WORDS, b"GROU", b"NPUT", b"/", b"*", b" ", b"\n\t", b"x", b"\0")
    scripts = 0
    for _ in range(3000):
        head = b"".join(rng.choice(pieces) for _ in range(rng.randrange(0, 12)))
        verdict = _not_elf("f", head)
        assert (verdict.reason == "linker-script") == _plain_is_script(head), head
        scripts += verdict.reason == "linker-script"
    assert scripts > 1000
    for word in _LINKER_SCRIPT_WORDS:
        for at in (0, 1, 512 - len(word), 512 - len(word) + 1, 600):
            path = tmp_path / "libx.so"
            head = b" " * at + word + b"\n"
            path.write_bytes(head)
            verdict = read_elf(path)
            assert isinstance(verdict, ElfProblem)
            assert (verdict.reason == "linker-script") == _plain_is_script(head), (word, at)
