"""ELF facts cudafix needs: class, machine, SONAME, NEEDED, RPATH, RUNPATH.

Parsing is separate from search (``loader``): this module only reads one file's dynamic
segment and returns frozen, tuple-valued facts, or a problem value saying why it could not.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cudafix.names import Soname

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

    @property
    def effective_rpath(self) -> tuple[str, ...]:
        """glibc ignores DT_RPATH when DT_RUNPATH is present (get-dynamic-info.h)."""
        return () if self.runpath else self.rpath


@dataclass(frozen=True)
class ElfProblem:
    """A file that looks like a shared library but cannot be used as one."""

    reason: str
    """``linker-script``, ``truncated``, ``corrupt``, ``unreadable`` or ``not-dynamic``."""
    detail: str


def is_elf(head: bytes) -> bool:
    """Sniff the magic; extensions lie (``libfoo.so`` may be a linker script)."""
    return head[:4] == ELF_MAGIC


def read_elf(path: Path) -> ElfInfo | ElfProblem:
    """Parse ``path``'s dynamic segment (never the whole file)."""
    raise NotImplementedError
