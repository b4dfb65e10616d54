"""Everything the planner and doctor need about an environment: one value of plain data.

:mod:`cudafix.gather` reads it, once, before planning (the target's interpreter asked once,
the tree walked once, caches under ``.cudafix/`` reused); what is derived from it here is
pure, so the planner and doctor are functions of data.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

from cudafix.env.inventory import Inventory
from cudafix.env.lastseen import Memory
from cudafix.env.scripts import Shebang
from cudafix.env.target import InterpreterInfo, guess_extension_suffixes
from cudafix.fetch.staged import Staging
from cudafix.linker.elfindex import ElfIndex
from cudafix.linker.hostview import HostView
from cudafix.linker.linkage import Root, entry_roots
from cudafix.linker.loader import DlopenTable, SearchConfig
from cudafix.linker.runtime import BoundLoads
from cudafix.model.doctor import Difference
from cudafix.model.names import DistName, EnvPath
from cudafix.plan.majors import cuda_majors
from cudafix.plan.requirements import requested_extras, requirement_edges

Mismatches = dict[DistName, list[tuple[EnvPath, Difference]]]
"""Per distribution, its files whose bytes are not their RECORD's, with how they differ."""


@dataclass(frozen=True)
class Facts:
    """Everything the planner and doctor may know about an environment, read up front."""

    inventory: Inventory
    elf: ElfIndex
    search: SearchConfig
    dlopen: DlopenTable | None
    marker_env: Mapping[str, str]
    self_dependencies: frozenset[DistName] = frozenset()
    """Distributions cudafix needs while it runs inside the target (empty when outside)."""
    path_hashes: Mapping[EnvPath, str | None] = field(default_factory=dict)
    """RECORD-style sha256 of paths a plan may assume (shared paths, install targets) and of
    files of ELF-providing distributions changed since their install (for doctor)."""
    interpreter: InterpreterInfo | None = None
    staging: Staging = field(default_factory=Staging)
    """The wheels the plan reinstalls or installs, fetched outside the environment."""
    runtime: BoundLoads = field(default_factory=BoundLoads)
    """Run-time loads of the environment's framework objects, with the row saying so;
    ``dlopen`` already holds them as edges."""
    read_paths: tuple[str, ...] = ()
    """The tree these facts were read from: directories listed and files watched
    (:meth:`cudafix.env.memo.treecache.TreeCache.read_paths`); unchanged stats, unchanged facts."""
    host: HostView = field(default_factory=HostView, compare=False)
    """The host outside the environment (system libraries, the ld.so cache, the host
    loader), the only way the planner and doctor look at it; what they consulted is
    :meth:`HostView.consulted`. By default a view of this host remembered nowhere."""

    @cached_property
    def extras(self) -> Mapping[DistName, frozenset[str]]:
        """The extras each distribution was installed with (:func:`requested_extras`),
        derived once: doctor and the planner ask per finding."""
        return requested_extras(self.inventory.distributions, self.marker_env)

    @cached_property
    def requirement_edges(self) -> Mapping[DistName, tuple[DistName, ...]]:
        """What each distribution's requirements name through its requested extras
        (:func:`requirement_edges`), derived once: doctor walks a closure per framework."""
        return requirement_edges(self.inventory.distributions, self.marker_env, self.extras)

    @cached_property
    def cuda_majors(self) -> Mapping[DistName, int]:
        """The CUDA major of each distribution that says one by what it is
        (:func:`~cudafix.plan.majors.cuda_majors`), derived once."""
        return cuda_majors(self.inventory, self.elf)

    @cached_property
    def record_mismatches(self) -> Mismatches:
        """Single-owner files of ELF-providing distributions whose bytes are not their
        RECORD's, with how they differ: a size that disagrees, or a hash where one was
        taken (:data:`path_hashes`). Derived once: doctor's foreign-bytes, script and
        repair judgements all read it."""
        inv = self.inventory
        out: Mismatches = {}
        for name in elf_providers(inv, self.elf):
            for e in inv.distributions[name].files:
                st = inv.files.get(e.path)
                single = len(inv.owners.get(e.path, ())) == 1
                if st is None or st.kind != "file" or not e.sha256 or not single:
                    continue
                if e.size is not None and e.size != st.size:
                    why = Difference(size=st.size, recorded_size=e.size)
                    out.setdefault(name, []).append((e.path, why))
                elif e.path in self.path_hashes and self.path_hashes[e.path] != e.sha256:
                    out.setdefault(name, []).append((e.path, Difference()))
        return out

    shebangs: Mapping[EnvPath, Shebang] = field(default_factory=dict)
    """The ``#!`` line of the ``bin/`` scripts of ELF-providing distributions: a relocated
    venv rewrites them (:mod:`cudafix.env.scripts`)."""

    last_seen: Memory = field(default_factory=dict)
    """What provided each needed soname at the last reading of this environment
    (:mod:`cudafix.env.lastseen`): how a library that went since is named."""

    pending: tuple[str, ...] = ()
    """Unfinished transactions in the environment (their ids), as the flow that opened it
    found them (:func:`cudafix.flows.target.check_pending`): a killed run's half-change."""

    hashed_files: int = field(default=0, compare=False)
    """Files :func:`cudafix.gather.gather` read whole to hash them (0: the hash cache answered)."""


def load_roots(facts: Facts, gone: frozenset[EnvPath] = frozenset()) -> tuple[Root, ...]:
    """Where the environment's load chains start, without the objects in ``gone``.

    The one list doctor and the planner judge needs on: extension modules (by the target
    interpreter's own ``EXTENSION_SUFFIXES``) and executables. Run-time loads, known from
    data rather than from the ELF facts, join them here.
    """
    info = facts.interpreter
    suffixes = (
        info.extension_suffixes
        if info is not None and info.extension_suffixes
        else guess_extension_suffixes(sys.version_info[:2], None)
    )
    prefix = str(facts.inventory.prefix)
    entries = entry_roots(prefix, facts.elf, suffixes, gone)
    known = {r.path for r in entries}
    run_time = tuple(
        Root(path, "run-time", facts.runtime.source(path), path in facts.runtime.inferred)
        for path in sorted(facts.runtime.roots)
        if path not in known and EnvPath(path[len(prefix) + 1 :]) not in gone
    )
    return entries + run_time


def scripts_of(inventory: Inventory, elf: ElfIndex) -> list[EnvPath]:
    """``bin/`` files of the distributions doctor checks for another build's bytes."""
    return [
        e.path
        for name in elf_providers(inventory, elf)
        for e in inventory.distributions[name].files
        if e.path.startswith("bin/")
        and (st := inventory.files.get(e.path)) is not None
        and st.kind == "file"
    ]


def elf_providers(inventory: Inventory, elf: ElfIndex) -> list[DistName]:
    """Distributions that own a shared object: where another build's bytes break loading."""
    return sorted({o for p in elf.objects for o in inventory.owners.get(p, ())})
