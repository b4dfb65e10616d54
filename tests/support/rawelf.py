"""Minimal shared objects for any ELF class, byte order and machine, built byte by byte.

gcc here only makes little-endian x86 objects; this writes the rest (ppc64, s390x, mips,
arm...) so ``read_elf`` can be checked against pyelftools on all four class/byte-order
layouts. One PT_LOAD maps the headers at ``BASE``, a second the rest at ``DATA`` plus its
file offset (so every DT_* address needs the vaddr-to-offset translation); there is no
section table, as in a stripped object.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from elftools.elf.hash import ELFHashTable, GNUHashTable

BASE, DATA = 0x10000, 0x200000
_DT = {"NEEDED": 1, "HASH": 4, "STRTAB": 5, "SYMTAB": 6, "STRSZ": 10, "SYMENT": 11}
_DT |= {"SONAME": 14, "RUNPATH": 29, "GNU_HASH": 0x6FFFFEF5, "FLAGS_1": 0x6FFFFFFB}


def raw_elf(
    *,
    elf_class: int = 64,
    big_endian: bool = False,
    machine: int = 62,
    soname: str | None = None,
    needed: Sequence[str] = (),
    runpath: str | None = None,
    flags_1: int = 0,
    interp: str | None = None,
    defined: Sequence[str] = (),
    undefined: Sequence[str] = (),
    gnu_hash: bool = True,
) -> bytes:
    """A shared object with these facts, exporting ``defined`` and importing ``undefined``."""
    order = ">" if big_endian else "<"
    wide = elf_class == 64
    strtab = bytearray(b"\0")

    def string(text: str) -> int:
        strtab.extend(text.encode() + b"\0")
        return len(strtab) - len(text.encode()) - 1

    def addr(value: int) -> bytes:
        return struct.pack(order + ("Q" if wide else "I"), value)

    tags = [("NEEDED", string(n)) for n in needed]
    tags += [("SONAME", string(soname))] if soname is not None else []
    tags += [("RUNPATH", string(runpath))] if runpath is not None else []
    tags += [("FLAGS_1", flags_1)] if flags_1 else []
    names = [*defined, *undefined]
    if gnu_hash:
        names.sort(key=lambda n: GNUHashTable.gnu_hash(n) % 2)
    sym_fmt = order + ("IBBHQQ" if wide else "IIIBBH")
    symtab = bytes(struct.calcsize(sym_fmt))
    for name in names:
        shndx = 7 if name in defined else 0
        fields = (
            (string(name), 0x12, 0, shndx, 0x100, 0)
            if wide
            else (string(name), 0x100, 0, 0x12, 0, shndx)
        )
        symtab += struct.pack(sym_fmt, *fields)
    hashes = _gnu_table(names, order, elf_class) if gnu_hash else _sysv_table(names, order)
    interp_bytes = interp.encode() + b"\0" if interp is not None else b""

    phnum = 4 if interp is not None else 3
    ehdr_size, phdr_size, dyn_fmt = (64, 56, "qQ") if wide else (52, 32, "iI")
    blobs = [interp_bytes, bytes(strtab), symtab, hashes]
    offsets, at = [], ehdr_size + phnum * phdr_size
    for blob in blobs:
        at += -at % 8
        offsets.append(at)
        at += len(blob)
    dyn_at = at + (-at % 8)
    tags += [("STRTAB", DATA + offsets[1]), ("STRSZ", len(strtab)), ("SYMTAB", DATA + offsets[2])]
    tags += [
        ("SYMENT", struct.calcsize(sym_fmt)),
        ("GNU_HASH" if gnu_hash else "HASH", DATA + offsets[3]),
    ]
    dynamic = b"".join(struct.pack(order + dyn_fmt, _DT[t], v) for t, v in tags) + bytes(
        struct.calcsize(dyn_fmt)
    )
    size = dyn_at + len(dynamic)

    def phdr(p_type: int, offset: int, filesz: int) -> bytes:
        vaddr = (DATA if offset else BASE) + offset
        if wide:
            return struct.pack(
                order + "IIQQQQQQ", p_type, 6, offset, vaddr, vaddr, filesz, filesz, 8
            )
        return struct.pack(order + "IIIIIIII", p_type, offset, vaddr, vaddr, filesz, filesz, 6, 8)

    headers = ehdr_size + phnum * phdr_size
    phdrs = phdr(1, 0, headers) + phdr(1, headers, size - headers) + phdr(2, dyn_at, len(dynamic))
    phdrs += phdr(3, offsets[0], len(interp_bytes)) if interp is not None else b""
    ident = b"\x7fELF" + bytes((1 + wide, 1 + big_endian, 1)) + bytes(9)
    ehdr = ident + struct.pack(order + "HHI", 3, machine, 1) + addr(0) + addr(ehdr_size) + addr(0)
    ehdr += struct.pack(order + "IHHHHHH", 0, ehdr_size, phdr_size, phnum, 0, 0, 0)
    out = bytearray(size)
    for offset, blob in [(0, ehdr + phdrs), *zip(offsets, blobs, strict=True), (dyn_at, dynamic)]:
        out[offset : offset + len(blob)] = blob
    return bytes(out)


def _gnu_table(names: Sequence[str], order: str, bits: int) -> bytes:
    """Two buckets, one bloom word, symbols from index 1 sorted by bucket (as ld sorts them)."""
    shift, bloom, buckets, chain = 5, 0, [0, 0], []
    hashes = [GNUHashTable.gnu_hash(n) for n in names]
    for index, value in enumerate(hashes, start=1):
        bloom |= 1 << value % bits | 1 << (value >> shift) % bits
        buckets[value % 2] = buckets[value % 2] or index
        last = index == len(hashes) or hashes[index] % 2 != value % 2
        chain.append(value & ~1 | last)
    word = "Q" if bits == 64 else "I"
    return struct.pack(f"{order}4I{word}2I{len(chain)}I", 2, 1, 1, shift, bloom, *buckets, *chain)


def _sysv_table(names: Sequence[str], order: str) -> bytes:
    """Three buckets, chains linked through every symbol (index 0 is the null symbol)."""
    buckets, chain = [0, 0, 0], [0] * (len(names) + 1)
    for index, name in enumerate(names, start=1):
        bucket = ELFHashTable.elf_hash(name) % 3
        chain[index], buckets[bucket] = buckets[bucket], index
    return struct.pack(f"{order}2I3I{len(chain)}I", 3, len(chain), *buckets, *chain)
