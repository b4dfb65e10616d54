"""Soname literals in an ELF object's read-only data: the libraries its code names.

A framework that ``dlopen()``s its CUDA libraries by name (XLA's ``dso_loader``, a
``_versions.so`` asking each library for its version) lists none of them in DT_NEEDED, but
the names are in its ``.rodata`` as NUL-terminated strings. Scanning what an object contains
for such names is how nix finds run-time references; here the names found are candidates,
which :mod:`cudafix.plan.literals` keeps only where the environment provides them.

Only sections named ``.rodata*`` are read (never a fat binary's GPU code), at most
:data:`MAX_SCAN` bytes of them per object, in a few large ``os.pread`` calls.
"""

from __future__ import annotations

import os
import re
import struct

from cudafix.model.names import SONAME_LITERAL, Soname

MAX_SCAN = 32 << 20
"""Bytes of read-only data read per object: more than any loader's strings need."""
MAX_LITERALS = 256
"""Distinct names kept per object (a table of every library of a toolkit is still read)."""
_CHUNK = 4 << 20
_OVERLAP = 256
SHT_PROGBITS = 1
_SHN_XINDEX = 0xFFFF
_PATTERN = re.compile(SONAME_LITERAL)
_BEFORE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_+-./")
"""A byte that makes the match part of a longer word or of a path (``/usr/lib/libc.so.6``:
a full path is a load by path of a system file, not a name the loader searches for)."""
_AFTER = _BEFORE - {ord(".")}
_WORD = bytes(sorted(_BEFORE - {ord("/")}))
"""The bytes a match is made of: every match lies in one run of them."""
_ANCHOR = re.compile(rb"\.so")
"""What every match holds (a regex search: faster here than ``bytes.find``)."""

# e_shoff, e_shentsize, e_shnum, e_shstrndx: offsets and formats per ELF class
_HEADERS = {1: (0x20, "I", 0x2E), 2: (0x28, "Q", 0x3A)}
_SECTION = {1: "IIIIII", 2: "IIQQQQ"}
"""sh_name, sh_type, sh_flags, sh_addr, sh_offset, sh_size."""


def soname_literals(data: bytes) -> list[Soname]:
    """Every soname spelled as a word of its own in ``data``, first occurrence order."""
    return _literals(data, len(data))


def _literals(data: bytes | bytearray, size: int) -> list[Soname]:
    """:func:`soname_literals` of ``data[:size]``, read in place.

    Exactly the matches of one pattern scan of the whole, found faster: a match holds
    ``.so`` and only :data:`_WORD` bytes, so it lies inside the run of such bytes around
    some ``.so``; only those runs are matched, each once.
    """
    out: dict[Soname, None] = {}
    at = 0
    while (hit := _ANCHOR.search(data, at, size)) is not None:
        first, at = _run(data, hit.start(), size)
        for match in _PATTERN.finditer(data, first, at):
            start, end = match.span()
            if start and data[start - 1] in _BEFORE:
                continue
            if end < size and data[end] in _AFTER:
                continue
            out.setdefault(Soname(match.group().decode("ascii")), None)
            if len(out) >= MAX_LITERALS:
                return list(out)
    return list(out)


def _run(data: bytes | bytearray, at: int, size: int) -> tuple[int, int]:
    """``[first, end)``: the longest run of :data:`_WORD` bytes in ``data[:size]`` holding
    ``data[at]``, read through windows that grow fourfold (a run costs its own length)."""
    step, first = 64, at
    while first:
        low = max(0, first - step)
        kept = len(data[low:first].rstrip(_WORD))
        first = low + kept
        if kept:
            break
        step *= 4
    step, end = 64, at
    while end < size:
        window = data[end : min(end + step, size)]
        left = len(window.lstrip(_WORD))
        end += len(window) - left
        if left:
            break
        step *= 4
    return first, end


def read_literals(fd: int, head: bytes) -> tuple[Soname, ...]:
    """The soname literals of the ``.rodata*`` sections of the ELF object open on ``fd``.

    ``head`` is the file's first bytes (its ELF header). Damage (a section table past the
    end, a stripped table) yields what could be read, never an error: literals are
    evidence, and an object whose sections cannot be read simply gives none.
    """
    try:
        sections = _rodata(fd, head)
    except (struct.error, OSError, ValueError):
        return ()
    found: dict[Soname, None] = {}
    budget = MAX_SCAN
    # One buffer per object, read into again for each chunk: a fresh one per chunk costs
    # the kernel a page fault for each of its pages.
    buffer = bytearray(min(max((s for _, s in sections), default=0), MAX_SCAN, _CHUNK + _OVERLAP))
    view = memoryview(buffer)
    for offset, size in sections:
        at, end = offset, offset + min(size, budget)
        budget -= end - offset
        while at < end:
            got = os.preadv(fd, [view[: min(_CHUNK + _OVERLAP, end - at)]], at)
            if not got:
                break
            for name in _literals(buffer, got):
                found.setdefault(name, None)
            at += _CHUNK
        if budget <= 0 or len(found) >= MAX_LITERALS:
            break
    return tuple(list(found)[:MAX_LITERALS])


def _rodata(fd: int, head: bytes) -> list[tuple[int, int]]:
    """(offset, size) of each ``.rodata*`` PROGBITS section, from the section headers."""
    elf_class, order = head[4], "<" if head[5] == 1 else ">"
    if elf_class not in _HEADERS or len(head) < 0x40:
        return []
    at, word, rest = _HEADERS[elf_class]
    (shoff,) = struct.unpack_from(order + word, head, at)
    shentsize, shnum, shstrndx = struct.unpack_from(order + "HHH", head, rest)
    layout = struct.Struct(order + _SECTION[elf_class])
    size = os.fstat(fd).st_size
    if not shoff or not shnum or shstrndx in (0, _SHN_XINDEX) or shentsize < layout.size:
        return []
    if shoff + shnum * shentsize > size or shstrndx >= shnum:
        return []
    table = os.pread(fd, shnum * shentsize, shoff)
    rows = [layout.unpack_from(table, i * shentsize) for i in range(shnum)]
    _n, _t, _f, _a, names_at, names_size = rows[shstrndx]
    names = os.pread(fd, min(names_size, 1 << 20), names_at)
    out = []
    for name, kind, _flags, _addr, offset, length in rows:
        stop = names.find(b"\0", name)
        label = names[name:stop] if stop >= 0 else b""
        if kind == SHT_PROGBITS and label.startswith(b".rodata") and offset + length <= size:
            out.append((offset, length))
    return out
