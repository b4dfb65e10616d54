"""ELF facts cudafix needs: class, machine, SONAME, NEEDED, RPATH, RUNPATH.

Parsing is separate from search (``loader``): this module only reads one file's dynamic
segment and returns frozen, tuple-valued facts, or a problem value saying why it could not.
It reads what ld.so reads (the ELF header, the program headers, the dynamic segment and what
that points to) with ``struct`` in a few page-sized ``os.pread`` calls: a general ELF library
made thousands of small reads per object and dominated an uncached ``doctor`` run.
"""

from __future__ import annotations

import os
import posixpath
import re
import struct
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

from cudafix.linker.literals import read_literals
from cudafix.model.names import Soname

ELF_MAGIC = b"\x7fELF"


@dataclass(frozen=True)
class ElfInfo:
    """The dynamic-linking facts of one ELF object."""

    elf_class: int
    """32 or 64."""
    machine: str
    """The e_machine name, e.g. ``EM_X86_64`` (pyelftools' spelling, kept for cached
    verdicts); a machine :data:`_MACHINES` does not name is its decimal number."""
    soname: Soname | None
    needed: tuple[Soname, ...]
    rpath: tuple[str, ...]
    """DT_RPATH entries, split on ``:``, unexpanded (``$ORIGIN`` kept)."""
    runpath: tuple[str, ...]
    """DT_RUNPATH entries, split on ``:``, unexpanded."""
    nodeflib: bool = False
    """DF_1_NODEFLIB: the ld.so cache and default dirs are not searched for this object's needs."""
    interpreter: str | None = None
    """PT_INTERP (executables only): the ld.so that is loaded before anything else."""
    python_module: str | None = None
    """The module name when the object exports ``PyInit_<name>`` for its own file name
    (``_jax`` for ``_jax.so``): what CPython's import looks up, so an extension module's
    mark whatever suffix it carries. Only names ending in ``.so`` are asked."""
    literals: tuple[Soname, ...] = ()
    """Sonames its read-only data spells (:mod:`cudafix.linker.literals`): what it may
    ``dlopen()`` by name. Read only when asked (the environment's objects, not the host's)."""

    @property
    def is_executable(self) -> bool:
        """PT_INTERP: a program (PIE or not), a root of load chains, never ``dlopen``-ed."""
        return self.interpreter is not None

    @property
    def effective_rpath(self) -> tuple[str, ...]:
        """glibc ignores DT_RPATH when DT_RUNPATH is present (get-dynamic-info.h)."""
        return () if self.runpath else self.rpath


@dataclass(frozen=True)
class ElfProblem:
    """A file that looks like a shared library but cannot be used as one."""

    reason: str
    """``linker-script``, ``not-elf``, ``truncated``, ``corrupt``, ``unreadable``, ``not-dynamic``.

    ``not-elf`` is a file without the ELF magic that does not look like a linker script;
    ``not-dynamic`` is a valid ELF without a PT_DYNAMIC segment (a static executable or a
    ``.o``), which ld.so refuses to load as a library.
    """
    detail: str


def verdict_to_json(verdict: ElfInfo | ElfProblem) -> list[Any]:
    """``["elf", fields]`` or ``["problem", [reason, detail]]``: how caches store a verdict."""
    if isinstance(verdict, ElfInfo):
        return ["elf", asdict(verdict)]
    return ["problem", [verdict.reason, verdict.detail]]


def verdict_from_json(kind: Any, body: Any) -> ElfInfo | ElfProblem | None:
    """The inverse of :func:`verdict_to_json`; None for anything malformed (re-read it)."""
    try:
        if kind == "elf":
            return ElfInfo(
                elf_class=int(body["elf_class"]),
                machine=str(body["machine"]),
                soname=Soname(body["soname"]) if body["soname"] is not None else None,
                needed=tuple(Soname(str(n)) for n in body["needed"]),
                rpath=tuple(str(p) for p in body["rpath"]),
                runpath=tuple(str(p) for p in body["runpath"]),
                nodeflib=bool(body["nodeflib"]),
                interpreter=body.get("interpreter"),
                python_module=body.get("python_module"),
                literals=tuple(Soname(str(n)) for n in body.get("literals", ())),
            )
        if kind == "problem":
            return ElfProblem(str(body[0]), str(body[1]))
    except (KeyError, TypeError, IndexError, ValueError, AttributeError):
        return None
    return None


def is_elf(head: bytes) -> bool:
    """Sniff the magic; extensions lie (``libfoo.so`` may be a linker script)."""
    return head[:4] == ELF_MAGIC


DF_1_NODEFLIB = 0x800
DT_NULL, DT_NEEDED, DT_HASH, DT_STRTAB, DT_SYMTAB = 0, 1, 4, 5, 6
DT_SONAME, DT_RPATH, DT_RUNPATH = 14, 15, 29
DT_GNU_HASH, DT_FLAGS_1 = 0x6FFFFEF5, 0x6FFFFFFB
PT_LOAD, PT_DYNAMIC, PT_INTERP = 1, 2, 3
SHN_UNDEF = 0
_OS_OR_PROC_TAGS = (0x6000000D, 0x7FFFFFFF)
"""DT_LOOS..DT_HIPROC: tags a valid object may carry, whatever they mean."""
_GENERIC_TAGS = frozenset((*range(31), *range(32, 39), 53))
"""DT_NULL..DT_FLAGS, DT_ENCODING..DT_RELRENT, DT_NUM, DT_PROCNUM (31 is unassigned): the
generic tags pyelftools named, kept so that no cached verdict changes meaning."""
_MACHINES = {
    0: "EM_NONE",
    2: "EM_SPARC",
    3: "EM_386",
    4: "EM_68K",
    8: "EM_MIPS",
    10: "EM_MIPS_RS3_LE",
    15: "EM_PARISC",
    18: "EM_SPARC32PLUS",
    20: "EM_PPC",
    21: "EM_PPC64",
    22: "EM_S390",
    40: "EM_ARM",
    41: "EM_ALPHA",
    42: "EM_SH",
    43: "EM_SPARCV9",
    50: "EM_IA_64",
    62: "EM_X86_64",
    183: "EM_AARCH64",
    190: "EM_CUDA",
    224: "EM_AMDGPU",
    243: "EM_RISCV",
    247: "EM_BPF",
    258: "EM_LOONGARCH",
}
"""pyelftools' e_machine names for what Linux runs on (and GPU code); any other value is
shown as its decimal number, as pyelftools shows one it does not name."""
_SNIFF = 512
_PAGE = 4096
_MAX_STRING = 1 << 16
"""Longer than any path or symbol name: a string running on this far is damage."""
_LINKER_SCRIPT_WORDS = (b"GROUP", b"INPUT", b"OUTPUT_FORMAT", b"SEARCH_DIR", b"/*")
_LINKER_SCRIPT = re.compile(b"|".join(map(re.escape, _LINKER_SCRIPT_WORDS)))
"""Any of the words, in one search (no word begins with blank space: leading blanks are
no matter)."""


class _Layout(NamedTuple):
    """The fields read, per ELF class and byte order (``x`` pads skip the others)."""

    elf_class: int
    header: struct.Struct
    """e_machine, e_phoff, e_shoff, e_phentsize, e_phnum, e_shentsize, e_shnum."""
    phdr: struct.Struct
    """p_type, p_offset, p_vaddr, p_filesz."""
    dyn: struct.Struct
    """d_tag (signed), d_val."""
    sym: struct.Struct
    """st_name, st_shndx."""
    word: struct.Struct
    bloom: struct.Struct
    """One GNU hash bloom filter word: an address wide."""


def _layout(elf_class: int, order: str) -> _Layout:
    def make(fmt: str) -> struct.Struct:
        return struct.Struct(order + fmt)

    if elf_class == 64:
        header, phdr, dyn, sym, bloom = "18xH12xQQ6xHHHH2x", "I4xQQ8xQ16x", "qQ", "I2xH16x", "Q"
    else:
        header, phdr, dyn, sym, bloom = "18xH8xII6xHHHH2x", "III4xI12x", "iI", "I10xH", "I"
    return _Layout(
        elf_class, make(header), make(phdr), make(dyn), make(sym), make("I"), make(bloom)
    )


_LAYOUTS = {
    bytes((ei_class, ei_data)): _layout(bits, order)
    for ei_class, bits in ((1, 32), (2, 64))
    for ei_data, order in ((1, "<"), (2, ">"))
}
"""By the two bytes after the magic, EI_CLASS and EI_DATA."""


class _Segment(NamedTuple):
    type: int
    offset: int
    vaddr: int
    filesz: int


class _Damaged(Exception):
    """Why the bytes cannot be an object ld.so loads; becomes an :class:`ElfProblem`."""


class _File:
    """An open file read a page at a time with ``os.pread``, each page at most once."""

    def __init__(self, fd: int, first_page: bytes) -> None:
        self.fd = fd
        self.size = os.fstat(fd).st_size
        self.pages = {0: first_page}

    def page(self, index: int) -> bytes:
        page = self.pages.get(index)
        if page is None:
            page = self.pages[index] = os.pread(self.fd, _PAGE, index * _PAGE)
        return page

    def unpack(self, layout: struct.Struct, offset: int, what: str) -> tuple[int, ...]:
        """``layout`` at ``offset``, which must lie inside the file."""
        if offset + layout.size > self.size:
            raise _Damaged(f"its {what} lies past the end of the file ({self.size} bytes)")
        index, start = divmod(offset, _PAGE)
        page = self.page(index)
        chunk = page[start : start + layout.size]
        if len(chunk) < layout.size and len(page) == _PAGE:  # it straddles two pages
            chunk += self.page(index + 1)[: layout.size - len(chunk)]
        if len(chunk) < layout.size:
            raise _Damaged(f"its {what} lies past the end of the file (it shrank while read)")
        return layout.unpack(chunk)

    def cstring(self, offset: int, what: str) -> bytes | None:
        """The bytes at ``offset`` up to a NUL; None when the file ends first."""
        parts: list[bytes] = []
        begin = offset
        while offset < self.size:
            index, start = divmod(offset, _PAGE)
            page = self.page(index)
            end = page.find(b"\0", start)
            if end >= 0:
                parts.append(page[start:end])
                return b"".join(parts)
            if start >= len(page):
                break
            parts.append(page[start:])
            offset += len(page) - start
            if offset - begin > _MAX_STRING:
                raise _Damaged(f"its {what} at {begin:#x} runs on past {_MAX_STRING} bytes")
        return None


NO_MAGIC = ElfProblem("not-elf", "no ELF magic")
"""What :func:`read_elf` gives, with ``scripts=False``, for a file without ELF magic."""


def read_elf(
    path: str | Path, *, follow_symlinks: bool = True, literals: bool = False, scripts: bool = True
) -> ElfInfo | ElfProblem:
    """Read ``path``'s dynamic facts (never the whole file).

    Only the pages holding the headers, the dynamic segment, its strings and one hash
    lookup are read. No parse error escapes: every failure is an :class:`ElfProblem`.
    ``follow_symlinks=False`` refuses to open a symlink (the index must never read
    through one). ``literals`` also reads the sonames its ``.rodata`` spells.
    ``scripts=False`` gives :data:`NO_MAGIC` for any file without ELF magic, never looking
    for a linker script in it: for a file no linker would look for by name (an executable,
    a shell script in ``bin/`` most often), where a script would be no finding.
    """
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)
    if not follow_symlinks:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        return ElfProblem("unreadable", f"{path}: {exc.strerror}")
    try:
        verdict = _read_fd(path, fd, scripts)
        if literals and isinstance(verdict, ElfInfo):
            verdict = replace(verdict, literals=read_literals(fd, os.pread(fd, _SNIFF, 0)))
        return verdict
    except OSError as exc:
        return ElfProblem("unreadable", f"{path}: {exc.strerror}")
    finally:
        os.close(fd)


def _read_fd(path: str | Path, fd: int, scripts: bool = True) -> ElfInfo | ElfProblem:
    head = os.pread(fd, _PAGE, 0)
    if not is_elf(head):
        if head and len(head) < len(ELF_MAGIC) and ELF_MAGIC.startswith(head):
            return ElfProblem("truncated", f"{path}: {len(head)} bytes, cut inside the ELF magic")
        return _not_elf(path, head[:_SNIFF]) if scripts else NO_MAGIC
    file = _File(fd, head)
    try:
        layout = _LAYOUTS.get(head[4:6])
        if layout is None:
            raise _Damaged("its ELF class or byte order (EI_CLASS, EI_DATA) is invalid")
        return _parse(path, file, layout)
    except _Damaged as exc:
        # Shorter than an ELF64 header: cut short, whatever tripped first.
        reason = "truncated" if file.size < 64 else "corrupt"
        return ElfProblem(reason, f"{path}: {exc}")


def _not_elf(path: str | Path, head: bytes) -> ElfProblem:
    if _LINKER_SCRIPT.search(head) is not None:
        return ElfProblem("linker-script", f"{path}: a GNU ld linker script, not an ELF object")
    return ElfProblem("not-elf", f"{path}: no ELF magic")


def _parse(path: str | Path, file: _File, layout: _Layout) -> ElfInfo | ElfProblem:
    machine, phoff, shoff, phentsize, phnum, shentsize, shnum = file.unpack(
        layout.header, 0, "ELF header"
    )
    sections_end = shoff + shnum * shentsize if shoff else 0
    if max(phoff + phnum * phentsize, sections_end) > file.size:
        return _cut_short(path, file.size, sections_end)
    if phnum and phoff and phentsize < layout.phdr.size:
        raise _Damaged(f"its program headers are smaller than ELF's (e_phentsize {phentsize})")
    segments = [
        _Segment(*file.unpack(layout.phdr, phoff + i * phentsize, "program headers"))
        for i in range(phnum)
    ]
    if any(s.offset + s.filesz > file.size for s in segments if s.type in (PT_LOAD, PT_DYNAMIC)):
        return _cut_short(path, file.size, sections_end)
    loads = [s for s in segments if s.type == PT_LOAD]
    dynamic = next((s for s in segments if s.type == PT_DYNAMIC), None)
    if dynamic is None:
        return ElfProblem("not-dynamic", f"{path}: no PT_DYNAMIC segment")
    tags = _dynamic_tags(file, layout, dynamic)
    first: dict[int, int] = {}
    for tag, value in tags:
        first.setdefault(tag, value)
    strtab = _file_offset(loads, first.get(DT_STRTAB))

    def string(offset: int) -> bytes:
        if strtab is None:
            raise _Damaged("its dynamic string table (DT_STRTAB) is missing or not loaded")
        return file.cstring(strtab + offset, "dynamic string") or b""

    soname: Soname | None = None
    needed: list[Soname] = []
    rpath: tuple[str, ...] = ()
    runpath: tuple[str, ...] = ()
    nodeflib = False
    for tag, value in tags:
        if tag not in _GENERIC_TAGS and not _OS_OR_PROC_TAGS[0] <= tag <= _OS_OR_PROC_TAGS[1]:
            raise _Damaged(
                f"its dynamic section holds garbage (tag {tag & (2**64 - 1):#x}); "
                "ld.so cannot load it"
            )
        if tag == DT_NEEDED:
            name = _text(string(value))
            if not name:
                raise _Damaged(
                    "it needs a library with an empty name (DT_NEEDED); ld.so refuses it"
                )
            needed.append(Soname(name))
        elif tag == DT_SONAME:
            soname = Soname(_text(string(value)))
        elif tag == DT_RPATH:
            rpath = _split_path(_text(string(value)))
        elif tag == DT_RUNPATH:
            runpath = _split_path(_text(string(value)))
        elif tag == DT_FLAGS_1:
            nodeflib = bool(value & DF_1_NODEFLIB)
    interp = next((s for s in segments if s.type == PT_INTERP), None)
    return ElfInfo(
        layout.elf_class,
        _MACHINES.get(machine, str(machine)),
        soname,
        tuple(needed),
        rpath,
        runpath,
        nodeflib,
        _interpreter(file, interp.offset) if interp is not None else None,
        _python_module(file, layout, loads, first, string, posixpath.basename(path)),
    )


def _cut_short(path: str | Path, size: int, sections_end: int) -> ElfProblem:
    """Which table runs past the end, in words (a broken section table alone is named)."""
    if sections_end > size:
        return ElfProblem(
            "truncated",
            f"{path}: its section header table lies past the end of the file ({size} bytes): "
            "the file is damaged or cut short",
        )
    return ElfProblem("truncated", f"{path}: headers describe data past the end ({size} bytes)")


def _dynamic_tags(file: _File, layout: _Layout, dynamic: _Segment) -> list[tuple[int, int]]:
    """``(d_tag, d_val)`` up to DT_NULL, which ld.so looks for past the segment's stated size
    too (it walks the loaded image); none at all when that size is 0."""
    tags: list[tuple[int, int]] = []
    at = dynamic.offset
    while dynamic.filesz:
        tag, value = file.unpack(layout.dyn, at, "dynamic section")
        if tag == DT_NULL:
            break
        tags.append((tag, value))
        at += layout.dyn.size
    return tags


def _file_offset(loads: list[_Segment], address: int | None) -> int | None:
    """Where the byte ld.so maps at ``address`` lies in the file; None if no PT_LOAD holds it."""
    if address is None:
        return None
    return next(
        (address - s.vaddr + s.offset for s in loads if s.vaddr <= address < s.vaddr + s.filesz),
        None,
    )


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _interpreter(file: _File, offset: int) -> str:
    raw = file.cstring(offset, "interpreter name (PT_INTERP)")
    if raw is None:
        raise _Damaged("its interpreter name (PT_INTERP) runs past the end of the file")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _Damaged("its interpreter name (PT_INTERP) is not UTF-8") from None


def _python_module(
    file: _File,
    layout: _Layout,
    loads: list[_Segment],
    first: dict[int, int],
    string: Callable[[int], bytes],
    name: str,
) -> str | None:
    """``name``'s module when the object defines ``PyInit_<module>``, else None.

    CPython imports ``<module><suffix>`` by calling ``PyInit_<module>`` (the file name up to
    its first dot), so that export, not the ABI tag, is what makes an extension module. One
    lookup through the object's own hash table (as ld.so's ``dlsym``), never a symbol scan;
    the first symbol of that name decides.
    """
    module = name.split(".", 1)[0]
    if not name.endswith(".so") or not module.isidentifier():
        return None
    symbol = f"PyInit_{module}".encode()
    gnu = _file_offset(loads, first.get(DT_GNU_HASH))
    sysv = _file_offset(loads, first.get(DT_HASH))
    if gnu is not None:
        candidates = _gnu_hash_chain(file, layout, gnu, symbol)
    elif sysv is not None:
        candidates = _sysv_hash_chain(file, layout, sysv, symbol)
    else:
        return None
    symtab = _file_offset(loads, first.get(DT_SYMTAB))
    for index in candidates:
        if symtab is None:
            raise _Damaged("its dynamic symbol table (DT_SYMTAB) is missing or not loaded")
        st_name, st_shndx = file.unpack(
            layout.sym, symtab + index * layout.sym.size, "dynamic symbol table"
        )
        if string(st_name) == symbol:
            return module if st_shndx != SHN_UNDEF else None
    return None


def _gnu_hash_chain(file: _File, layout: _Layout, offset: int, symbol: bytes) -> Iterator[int]:
    """The symbol indices whose DT_GNU_HASH chain entry matches ``symbol``'s hash, after the
    bloom filter lets it through (glibc's ``do_lookup_x``, as pyelftools reads it)."""
    what = "GNU hash table (DT_GNU_HASH)"

    def word(at: int) -> int:
        return file.unpack(layout.word, at, what)[0]

    nbuckets, symoffset, bloom_size, bloom_shift = (word(offset + 4 * i) for i in range(4))
    buckets = offset + 16 + bloom_size * layout.bloom.size
    chain = buckets + 4 * nbuckets
    if chain > file.size:
        raise _Damaged(f"its {what} lies past the end of the file ({file.size} bytes)")
    if not nbuckets or not bloom_size:  # holds nothing (ld.so would divide by zero)
        return
    bits = layout.elf_class
    hashed = _gnu_hash(symbol)
    (bloom,) = file.unpack(
        layout.bloom, offset + 16 + hashed // bits % bloom_size * layout.bloom.size, what
    )
    mask = 1 << hashed % bits | 1 << (hashed >> bloom_shift) % bits
    if bloom & mask != mask:
        return
    index = word(buckets + 4 * (hashed % nbuckets))
    if index < symoffset:
        return
    while True:
        entry = word(chain + 4 * (index - symoffset))
        if entry | 1 == hashed | 1:
            yield index
        if entry & 1:
            return
        index += 1


def _sysv_hash_chain(file: _File, layout: _Layout, offset: int, symbol: bytes) -> Iterator[int]:
    """The symbol indices on ``symbol``'s DT_HASH chain."""
    what = "hash table (DT_HASH)"

    def word(at: int) -> int:
        return file.unpack(layout.word, at, what)[0]

    nbuckets, nchains = word(offset), word(offset + 4)
    chain = offset + 8 + 4 * nbuckets
    if chain + 4 * nchains > file.size:
        raise _Damaged(f"its {what} lies past the end of the file ({file.size} bytes)")
    if not nbuckets:
        return
    index = word(offset + 8 + 4 * (_sysv_hash(symbol) % nbuckets))
    for _ in range(nchains + 1):  # a longer walk has gone round a loop
        if index == 0:
            return
        yield index
        if index >= nchains:
            raise _Damaged(f"its {what} chains to symbol {index}, past its {nchains}")
        index = word(chain + 4 * index)


def _gnu_hash(name: bytes) -> int:
    hashed = 5381
    for byte in name:
        hashed = (hashed * 33 + byte) & 0xFFFFFFFF
    return hashed


def _sysv_hash(name: bytes) -> int:
    """The ELF ABI's hash, in 32-bit arithmetic as ld.so computes it."""
    hashed = 0
    for byte in name:
        hashed = (hashed << 4) + byte
        hashed ^= (hashed & 0xF0000000) >> 24
        hashed &= 0x0FFFFFFF
    return hashed


def _split_path(value: str) -> tuple[str, ...]:
    """ld.so splits on ``:``; an empty element means the current directory, kept as ``""``."""
    return tuple(value.split(":")) if value else ()
