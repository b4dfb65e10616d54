"""The host as one target's run sees it: system libraries, the ld.so cache and the host loader.

Every lookup outside the environment goes through one :class:`HostView`, which
:func:`cudafix.gather.gather` creates for the target and hands over in the facts
(``Facts.host``), so the planner and doctor read the host only through a value they were
given, and a test can give them one of its own. It memoises as a run needs: directories
listed once (probing many absent candidates costs a set lookup), ELF facts, the parsed
``/etc/ld.so.cache`` and ``ld.so --help`` remembered across runs by their files' stat
(:class:`~cudafix.linker.hostcache.HostCache`, written by :meth:`HostView.save` once the
decisions are made), and it says what it consulted, which a remembered answer depends on.
"""

from __future__ import annotations

import os
import posixpath
import sys
from collections.abc import Mapping
from pathlib import Path

from cudafix.linker.elf import ElfInfo, ElfProblem, read_elf, verdict_from_json, verdict_to_json
from cudafix.linker.hostcache import HostCache
from cudafix.linker.hostdeps import provided_by_system
from cudafix.linker.ldcache import (
    LD_CACHE,
    CacheEntry,
    HostLoader,
    entries_from_json,
    entries_to_json,
    host_loader_from_json,
    host_loader_to_json,
    probe_host_loader,
    read_ld_cache,
)

Verdict = ElfInfo | ElfProblem

DEFAULT_INTERPRETER = "/lib64/ld-linux-x86-64.so.2"
"""The x86-64 loader, when cudafix's own interpreter does not name one."""


class HostView:
    """Files outside the environment, read once per view and shared by its before/after views.

    ``cache_file``: where host facts are remembered across runs (the target's
    ``.cudafix/cache/host-cache.json``); None keeps them for this view only.
    """

    def __init__(self, cache_file: Path | None = None) -> None:
        self._cache = HostCache(cache_file)
        self._listings: dict[str, frozenset[str]] = {}
        self._verdicts: dict[str, Verdict | None] = {}
        self._real: dict[str, str] = {}
        self._dirs: dict[str, bool] = {}
        self._loaders: dict[str, HostLoader] = {}
        self._arch: tuple[int, str] | None = None

    # -- system libraries, as the loader looks them up ----------------------------------------

    def lookup(self, path: str) -> Verdict | None:
        """The verdict for ``path``, or None when nothing is there."""
        if path not in self._verdicts:
            directory, name = posixpath.split(path)
            present = name in self._listing(directory) and Path(path).exists()
            self._verdicts[path] = self.read_elf(path) if present else None
        return self._verdicts[path]

    def canonical(self, path: str) -> str:
        if path not in self._real:
            self._real[path] = os.path.realpath(path)
        return self._real[path]

    def dir_exists(self, path: str) -> bool:
        if path not in self._dirs:
            self._dirs[path] = Path(path).is_dir()
        return self._dirs[path]

    def read_elf(self, path: str) -> Verdict:
        """``read_elf`` of a file outside the environment, remembered by its stat."""
        return self._cache.answer(
            "elf",
            path,
            lambda: read_elf(Path(path)),
            verdict_to_json,
            lambda v: verdict_from_json(*v),
        )

    # -- the host's loader ----------------------------------------------------------------------

    def arch(self) -> tuple[int, str]:
        """(class, machine) of ``sys.executable``: what the environment's ld.so can load."""
        if self._arch is None:
            info = self.read_elf(sys.executable)
            self._arch = (
                (info.elf_class, info.machine) if isinstance(info, ElfInfo) else (64, "EM_X86_64")
            )
        return self._arch

    def interpreter(self) -> str:
        """The ld.so cudafix's own interpreter names (``PT_INTERP``)."""
        info = self.read_elf(sys.executable)
        if isinstance(info, ElfInfo) and info.interpreter:
            return info.interpreter
        return DEFAULT_INTERPRETER

    def loader(self, interpreter: str) -> HostLoader:
        """What ``interpreter --help`` says of its search (asked once, remembered by stat)."""
        if interpreter not in self._loaders:
            self._loaders[interpreter] = self._cache.answer(
                "ld.so --help",
                interpreter,
                lambda: probe_host_loader(interpreter),
                host_loader_to_json,
                host_loader_from_json,
            )
        return self._loaders[interpreter]

    def ld_cache(self, path: Path = LD_CACHE) -> tuple[CacheEntry, ...]:
        """The parsed ld.so cache (remembered by the file's stat)."""
        return self._cache.answer(
            "ld.so.cache",
            str(path),
            lambda: read_ld_cache(path),
            entries_to_json,
            entries_from_json,
        )

    def provided_by_system(self) -> Mapping[str, str]:
        """Sonames no wheel ships -> what provides them (:mod:`cudafix.linker.hostdeps`)."""
        return provided_by_system()

    # -- what was read, and remembering it ------------------------------------------------------

    def consulted(self) -> list[str]:
        """Every host file and directory looked at so far: what an answer built on these
        lookups depends on."""
        return [*self._cache.paths(), *self._listings, *self._verdicts, *self._real, *self._dirs]

    def save(self) -> bool:
        """Write the host facts learnt, and what was consulted, to the cache file (when
        either changed); False when it could not be written (never fatal, as for every
        cache). Called once the decisions built on this view are made."""
        return self._cache.save(self.consulted())

    def _listing(self, directory: str) -> frozenset[str]:
        if directory not in self._listings:
            try:
                self._listings[directory] = frozenset(os.listdir(directory))  # noqa: PTH208
            except OSError:
                self._listings[directory] = frozenset()
        return self._listings[directory]
