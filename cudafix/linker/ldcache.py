"""Parse ``/etc/ld.so.cache`` the way glibc's ``dl-cache.c`` reads it.

ld.so consults this cache before the default directories; a resolver that skipped it
would call system libraries "not found" that ld.so finds. The format (``dl-cache.h``):
an optional old ``ld.so-1.7.0`` block, then the new ``glibc-ld.so.cache1.1`` block whose
string offsets count from the new header, plus an extension listing glibc-hwcaps
subdirectories. Parsing is a pure function over bytes.
"""

from __future__ import annotations

import struct
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

OLD_MAGIC = b"ld.so-1.7.0"
NEW_MAGIC = b"glibc-ld.so.cache1.1"
EXTENSION_MAGIC = 0xEAA42174
EXTENSION_TAG_HWCAPS = 1
HWCAP_EXTENSION = 1 << 62

FLAG_ELF_LIBC6 = 0x0003
FLAGS_FOR: dict[tuple[int, str], int] = {
    (64, "EM_X86_64"): 0x0300 | FLAG_ELF_LIBC6,
    (32, "EM_X86_64"): 0x0800 | FLAG_ELF_LIBC6,  # x32
    (32, "EM_386"): FLAG_ELF_LIBC6,
    (64, "EM_AARCH64"): 0x0A00 | FLAG_ELF_LIBC6,
    (64, "EM_PPC64"): 0x0500 | FLAG_ELF_LIBC6,
}
"""``_dl_cache_check_flags`` per (class, machine): the only flags ld.so accepts."""

_OLD_HEADER = struct.Struct("<12sI")
_OLD_ENTRY = struct.Struct("<iII")
_NEW_HEADER = struct.Struct("<20sIIB3xI12x")
_NEW_ENTRY = struct.Struct("<iIIIQ")
_EXT_HEADER = struct.Struct("<II")
_EXT_SECTION = struct.Struct("<IIII")


class CacheFormatError(ValueError):
    """The bytes are not an ld.so cache cudafix understands."""


@dataclass(frozen=True)
class CacheEntry:
    """One library the cache knows: ``key`` is the soname ld.so compares against."""

    key: str
    path: str
    flags: int
    hwcap: int
    hwcaps_subdir: str | None = None
    """For glibc-hwcaps entries (``x86-64-v3``); None for ordinary ones."""


def parse_ld_cache(data: bytes) -> tuple[CacheEntry, ...]:
    """All entries of the new-format block, in file order (ld.so's search order)."""
    start = _new_block_offset(data)
    if start is None:
        raise CacheFormatError("no glibc-ld.so.cache1.1 block")
    try:
        return _parse_new(data, start)
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise CacheFormatError(f"malformed ld.so cache: {exc}") from exc


LD_CACHE = Path("/etc/ld.so.cache")


def read_ld_cache(path: Path = LD_CACHE) -> tuple[CacheEntry, ...]:
    """Read and parse; missing or unreadable is empty, as ld.so then skips it (a run reads
    it through :meth:`cudafix.linker.hostview.HostView.ld_cache`, remembered by its stat)."""
    try:
        return parse_ld_cache(path.read_bytes())
    except (OSError, CacheFormatError):
        return ()


def entries_to_json(entries: tuple[CacheEntry, ...]) -> list[Any]:
    return [[e.key, e.path, e.flags, e.hwcap, e.hwcaps_subdir] for e in entries]


def entries_from_json(rows: Any) -> tuple[CacheEntry, ...] | None:
    try:
        return tuple(CacheEntry(str(k), str(p), int(f), int(h), s) for k, p, f, h, s in rows)
    except (TypeError, ValueError):
        return None


def entries_for(
    entries: tuple[CacheEntry, ...], elf_class: int, machine: str
) -> tuple[CacheEntry, ...]:
    """Only the entries ld.so of this class/machine would accept (``_dl_cache_check_flags``)."""
    wanted = FLAGS_FOR.get((elf_class, machine))
    return tuple(e for e in entries if e.flags == wanted)


def _new_block_offset(data: bytes) -> int | None:
    if data.startswith(NEW_MAGIC):
        return 0
    if not data.startswith(OLD_MAGIC) or len(data) < _OLD_HEADER.size:
        return None
    _, nlibs = _OLD_HEADER.unpack_from(data, 0)
    offset = _OLD_HEADER.size + nlibs * _OLD_ENTRY.size
    offset = (offset + 7) & ~7  # the new block is aligned like struct cache_file_new
    return offset if data.startswith(NEW_MAGIC, offset) else None


def _parse_new(data: bytes, start: int) -> tuple[CacheEntry, ...]:
    _, nlibs, _strings, _endian, ext_offset = _NEW_HEADER.unpack_from(data, start)
    subdirs = _hwcaps_subdirs(data, start, ext_offset)
    entries = []
    base = start + _NEW_HEADER.size
    for index in range(nlibs):
        flags, key, value, _osv, hwcap = _NEW_ENTRY.unpack_from(
            data, base + index * _NEW_ENTRY.size
        )
        subdir = None
        if hwcap & HWCAP_EXTENSION:
            slot = hwcap & 0xFFFFFFFF
            subdir = subdirs[slot] if slot < len(subdirs) else "?"
        entries.append(
            CacheEntry(_cstr(data, start + key), _cstr(data, start + value), flags, hwcap, subdir)
        )
    return tuple(entries)


def _hwcaps_subdirs(data: bytes, start: int, ext_offset: int) -> tuple[str, ...]:
    if not ext_offset or start + ext_offset + _EXT_HEADER.size > len(data):
        return ()
    magic, count = _EXT_HEADER.unpack_from(data, start + ext_offset)
    if magic != EXTENSION_MAGIC:
        return ()
    for index in range(count):
        pos = start + ext_offset + _EXT_HEADER.size + index * _EXT_SECTION.size
        tag, _flags, offset, size = _EXT_SECTION.unpack_from(data, pos)
        if tag == EXTENSION_TAG_HWCAPS:
            offsets = struct.unpack_from(f"<{size // 4}I", data, start + offset)
            return tuple(_cstr(data, start + o) for o in offsets)
    return ()


def _cstr(data: bytes, offset: int) -> str:
    end = data.index(b"\0", offset)
    return data[offset:end].decode()


@dataclass(frozen=True)
class HostLoader:
    """What the host's ld.so says about its own search (``ld.so --help``, glibc >= 2.33)."""

    default_dirs: tuple[str, ...]
    hwcaps: tuple[str, ...]
    """Supported glibc-hwcaps subdirectory names, best first (``x86-64-v3``)."""
    legacy: tuple[str, ...]
    """Legacy HWCAP subdirectory components in path order: ``tls``, the platform, the hwcaps."""
    platform: str | None


DEBIAN_X86_64 = HostLoader(
    default_dirs=("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib", "/usr/lib"),
    hwcaps=(),
    legacy=(),
    platform=None,
)
"""Fallback when ld.so cannot be asked: Debian's multiarch dirs, no hwcaps subdirectories."""


_HWCAPS_HEADING = "Subdirectories of glibc-hwcaps directories, in priority order"
_LEGACY_HEADING = "Legacy HWCAP subdirectories under library search path directories"


def parse_ldso_help(text: str) -> HostLoader | None:
    """Read the search path and capability subdirectories from ``ld.so --help``."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line and not line[0].isspace():
            current = sections.setdefault(line.split(":")[0].strip(), [])
        elif current is not None and line.strip():
            current.append(line.strip())
    dirs = [
        item.split(" (")[0]
        for item in sections.get("Shared library search path", [])
        if "(system search path)" in item
    ]
    if not dirs:
        return None
    hwcaps = _searched(sections.get(_HWCAPS_HEADING))
    legacy_lines = sections.get(_LEGACY_HEADING) or []
    platform_lines = [i for i in legacy_lines if "AT_PLATFORM" in i]
    platform = platform_lines[0].split(" (")[0] if platform_lines else None
    # glibc 2.36 joins the components tls, then the platform, then the hwcap names from the
    # highest bit down, which is the order --help lists them in (an LD_DEBUG=libs trace on a
    # haswell/avx512_1 host: tls/haswell/avx512_1/x86_64 first). A hwcap may share the
    # platform's name (x86_64 twice), so lines are told apart, not names.
    others = [i for i in legacy_lines if i not in platform_lines]
    ordered = [n for n in _searched(others) if n == "tls"]
    ordered += _searched(platform_lines)
    ordered += [n for n in _searched(others) if n != "tls"]
    return HostLoader(tuple(dirs), tuple(hwcaps), tuple(ordered), platform)


def _searched(lines: list[str] | None) -> list[str]:
    return [line.split(" (")[0] for line in lines or [] if "searched)" in line]


def hwcap_subdirs(host: HostLoader) -> tuple[str, ...]:
    """Subdirectories ld.so tries inside every search directory, in order, ending with ``""``.

    glibc 2.36 (``_dl_important_hwcaps``): the glibc-hwcaps names by priority, then every
    subset of the legacy components, largest first (``tls/haswell/avx512_1/x86_64`` ...).
    """
    subdirs = [f"glibc-hwcaps/{name}" for name in host.hwcaps]
    n = len(host.legacy)
    for mask in range((1 << n) - 1, -1, -1):
        parts = [host.legacy[i] for i in range(n) if mask & (1 << (n - 1 - i))]
        subdirs.append("/".join(parts))
    return tuple(subdirs)


def probe_host_loader(interpreter: str) -> HostLoader:
    """Ask the host ld.so (read-only, through ``process.run``); fall back to Debian x86-64
    (a run asks through :meth:`cudafix.linker.hostview.HostView.loader`, remembered)."""
    from cudafix.process import run

    done = run([interpreter, "--help"], timeout=10)
    parsed = parse_ldso_help(done.stdout) if done.returncode == 0 else None
    return parsed or DEBIAN_X86_64


def host_loader_to_json(loader: HostLoader) -> dict[str, Any]:
    return asdict(loader)


def host_loader_from_json(d: Any) -> HostLoader | None:
    try:
        return HostLoader(
            tuple(map(str, d["default_dirs"])),
            tuple(map(str, d["hwcaps"])),
            tuple(map(str, d["legacy"])),
            d["platform"],
        )
    except (KeyError, TypeError):
        return None
