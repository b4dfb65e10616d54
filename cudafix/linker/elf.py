"""ELF facts cudafix needs: class, machine, SONAME, NEEDED, RPATH, RUNPATH.

Parsing is separate from search (``loader``): this module only reads one file's dynamic
segment and returns frozen, tuple-valued facts, or a problem value saying why it could not.
"""

from __future__ import annotations

import functools
import os
import struct
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from cudafix.model.names import Soname

ELF_MAGIC = b"\x7fELF"


@dataclass(frozen=True)
class ElfInfo:
    """The dynamic-linking facts of one ELF object."""

    elf_class: int
    """32 or 64."""
    machine: str
    """pyelftools' e_machine name, e.g. ``EM_X86_64``."""
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
_OS_OR_PROC_TAGS = (0x6000000D, 0x7FFFFFFF)
"""DT_LOOS..DT_HIPROC: tags pyelftools may not name but a valid object may carry."""
_SNIFF = 512
_LINKER_SCRIPT_WORDS = (b"GROUP", b"INPUT", b"OUTPUT_FORMAT", b"SEARCH_DIR", b"/*")
_BUILTIN_PARSE_ERRORS: tuple[type[BaseException], ...] = (
    struct.error,
    ValueError,
    KeyError,
    IndexError,
    TypeError,
    AttributeError,
    OverflowError,
    UnicodeDecodeError,
    AssertionError,
)


@functools.cache
def _pyelftools() -> tuple[Any, tuple[type[BaseException], ...]]:
    """``ELFFile`` and every error a parse may raise; imported on first use, since a warm
    run (every verdict cached) parses nothing and should not pay for the import."""
    from elftools.common.exceptions import ELFError, ELFParseError
    from elftools.elf.elffile import ELFFile

    return ELFFile, (ELFError, ELFParseError, *_BUILTIN_PARSE_ERRORS)


def read_elf(path: Path, *, follow_symlinks: bool = True) -> ElfInfo | ElfProblem:
    """Parse ``path``'s dynamic segment (never the whole file).

    pyelftools reads lazily from the open file object, so only the ELF header, the
    program and section headers and the dynamic segment's strings are read. No parse
    error escapes: every failure is an :class:`ElfProblem`. ``follow_symlinks=False``
    refuses to open a symlink (the index must never read through one).
    """
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)
    if not follow_symlinks:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        return ElfProblem("unreadable", f"{path}: {exc.strerror}")
    try:
        with os.fdopen(fd, "rb") as stream:
            return _read_stream(path, stream)
    except OSError as exc:
        return ElfProblem("unreadable", f"{path}: {exc.strerror}")


def _read_stream(path: Path, stream: IO[bytes]) -> ElfInfo | ElfProblem:
    head = stream.read(_SNIFF)
    if not is_elf(head):
        if head and len(head) < len(ELF_MAGIC) and ELF_MAGIC.startswith(head):
            return ElfProblem("truncated", f"{path}: {len(head)} bytes, cut inside the ELF magic")
        return _not_elf(path, head)
    size = os.fstat(stream.fileno()).st_size
    elf_file, parse_errors = _pyelftools()
    try:
        elf = elf_file(stream)
        truncated = _declared_end(elf) > size
        info = None if truncated else _dynamic_facts(elf, path.name)
    except parse_errors as exc:
        reason = "truncated" if size < 64 or _header_says_truncated(stream, size) else "corrupt"
        return ElfProblem(reason, f"{path}: {exc}")
    if truncated:
        return ElfProblem("truncated", f"{path}: {_past_the_end(elf, size)}")
    if info is None:
        return ElfProblem("not-dynamic", f"{path}: no PT_DYNAMIC segment")
    return info


def _past_the_end(elf: Any, size: int) -> str:
    """Which table runs past the end, in words (a broken section table alone is named)."""
    hdr = elf.header
    sections_end = hdr["e_shoff"] + hdr["e_shnum"] * hdr["e_shentsize"]
    if hdr["e_shoff"] and sections_end > size:
        return (
            f"its section header table lies past the end of the file ({size} bytes): "
            "the file is damaged or cut short"
        )
    return f"headers describe data past the end ({size} bytes)"


def _not_elf(path: Path, head: bytes) -> ElfProblem:
    text = head.lstrip()
    if any(word in text for word in _LINKER_SCRIPT_WORDS):
        return ElfProblem("linker-script", f"{path}: a GNU ld linker script, not an ELF object")
    return ElfProblem("not-elf", f"{path}: no ELF magic")


def _header_says_truncated(stream: IO[bytes], size: int) -> bool:
    """Best effort after a parse error: did the failure come from running off the end?"""
    elf_file, parse_errors = _pyelftools()
    try:
        elf = elf_file(stream)
        return _declared_end(elf) > size
    except parse_errors:
        return size < 52


def _declared_end(elf: Any) -> int:
    """The furthest byte the headers promise: program/section tables and loaded segments.

    Read from the raw program headers, so a truncated file is named before pyelftools
    trips over a section past the end.
    """
    hdr = elf.header
    end = hdr["e_phoff"] + hdr["e_phnum"] * hdr["e_phentsize"]
    if hdr["e_shoff"]:
        end = max(end, hdr["e_shoff"] + hdr["e_shnum"] * hdr["e_shentsize"])
    if end > elf.stream_len:
        return int(end)
    for index in range(hdr["e_phnum"]):
        seg = elf._get_segment_header(index)
        if seg["p_type"] in ("PT_LOAD", "PT_DYNAMIC"):
            end = max(end, seg["p_offset"] + seg["p_filesz"])
    return int(end)


def _dynamic_facts(elf: Any, name: str) -> ElfInfo | None:
    dyn = next(iter(elf.iter_segments(type="PT_DYNAMIC")), None)
    if dyn is None:
        return None
    soname: Soname | None = None
    needed: list[Soname] = []
    rpath: tuple[str, ...] = ()
    runpath: tuple[str, ...] = ()
    nodeflib = False
    for tag in _tags(dyn):
        kind = tag.entry.d_tag
        if isinstance(kind, int) and not _OS_OR_PROC_TAGS[0] <= kind <= _OS_OR_PROC_TAGS[1]:
            tag_value = kind & (2**64 - 1)
            raise ValueError(
                f"its dynamic section holds garbage (tag {tag_value:#x}); ld.so cannot load it"
            )
        if kind == "DT_NEEDED" and not tag.needed:
            raise ValueError("it needs a library with an empty name (DT_NEEDED); ld.so refuses it")
        if kind == "DT_SONAME":
            soname = Soname(tag.soname)
        elif kind == "DT_NEEDED":
            needed.append(Soname(tag.needed))
        elif kind == "DT_RPATH":
            rpath = _split_path(tag.rpath)
        elif kind == "DT_RUNPATH":
            runpath = _split_path(tag.runpath)
        elif kind == "DT_FLAGS_1":
            nodeflib = bool(tag.entry.d_val & DF_1_NODEFLIB)
    machine = str(elf.header["e_machine"])
    interp = next(iter(elf.iter_segments(type="PT_INTERP")), None)
    interpreter = interp.get_interp_name() if interp is not None else None
    module = _python_module(elf, dyn, name)
    return ElfInfo(
        elf.elfclass, machine, soname, tuple(needed), rpath, runpath, nodeflib, interpreter, module
    )


def _python_module(elf: Any, dyn: Any, name: str) -> str | None:
    """``name``'s module when the object defines ``PyInit_<module>``, else None.

    CPython imports ``<module><suffix>`` by calling ``PyInit_<module>`` (the file name up to
    its first dot), so that export, not the ABI tag, is what makes an extension module. One
    lookup through the object's own hash table (as ld.so's ``dlsym``), never a symbol scan.
    """
    module = name.split(".", 1)[0]
    if not name.endswith(".so") or not module.isidentifier():
        return None
    from elftools.elf.hash import ELFHashTable, GNUHashTable

    _, gnu = dyn.get_table_offset("DT_GNU_HASH")
    _, sysv = dyn.get_table_offset("DT_HASH")
    if gnu is not None:
        table: Any = GNUHashTable(elf, gnu, dyn)
    elif sysv is not None:
        table = ELFHashTable(elf, sysv, None, dyn)
    else:
        return None
    symbol = table.get_symbol(f"PyInit_{module}")
    if symbol is None or symbol["st_shndx"] == "SHN_UNDEF":
        return None
    return module


def _tags(dyn: Any) -> Iterator[Any]:
    for tag in dyn.iter_tags():
        if tag.entry.d_tag == "DT_NULL":
            return
        yield tag


def _split_path(value: str) -> tuple[str, ...]:
    """ld.so splits on ``:``; an empty element means the current directory, kept as ``""``."""
    return tuple(value.split(":")) if value else ()
