"""Read everything the planner and doctor need, once, into one value of plain data.

This is the only read-side orchestration: the target's interpreter is asked once, the tree
is walked once, ELF objects and hashes come from caches under ``.cudafix/`` when unchanged.
Anything that needs I/O (hashes for preconditions, staged wheels) is gathered here or by
:func:`with_staging` before planning, so the planner is a function of data.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

from cudafix.env.distinfo import direct_url
from cudafix.env.hashing import HashCache
from cudafix.env.inventory import Inventory, changed_since_record, read_inventory
from cudafix.env.scripts import Shebang, read_shebangs
from cudafix.env.statedir import StateDir
from cudafix.env.target import (
    InterpreterInfo,
    TargetEnv,
    guess_extension_suffixes,
    query_interpreter,
)
from cudafix.env.treecache import TreeCache
from cudafix.fetch.staging import Staging
from cudafix.linker.elfindex import ElfIndex, index_environment
from cudafix.linker.hostcache import HOST
from cudafix.linker.linkage import Root, entry_roots
from cudafix.linker.loader import DlopenTable, SearchConfig, split_ld_library_path
from cudafix.linker.runtime import BoundLoads, RuntimeTable, bind
from cudafix.model.names import DistName, EnvPath, normalize_name
from cudafix.plan.requirements import requested_extras

Mismatches = dict[DistName, list[tuple[EnvPath, str]]]
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

    @cached_property
    def extras(self) -> Mapping[DistName, frozenset[str]]:
        """The extras each distribution was installed with (:func:`requested_extras`),
        derived once: doctor and the planner ask per finding."""
        return requested_extras(self.inventory.distributions, self.marker_env)

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
                    why = f"{st.size} bytes, RECORD says {e.size}"
                    out.setdefault(name, []).append((e.path, why))
                elif e.path in self.path_hashes and self.path_hashes[e.path] != e.sha256:
                    out.setdefault(name, []).append((e.path, "sha256 differs from RECORD"))
        return out

    shebangs: Mapping[EnvPath, Shebang] = field(default_factory=dict)
    """The ``#!`` line of the ``bin/`` scripts of ELF-providing distributions: a relocated
    venv rewrites them (:mod:`cudafix.env.scripts`)."""

    hashed_files: int = field(default=0, compare=False)
    """Files :func:`gather` read whole to hash them (0 when the hash cache answered)."""


def gather(
    target: TargetEnv,
    *,
    dlopen_tables: Sequence[Path] = (),
    ld_library_path: str | None = None,
) -> Facts:
    """Read the target; caches are saved only where cudafix may write (``.cudafix/``)."""
    state = StateDir(target.prefix)
    HOST.use(state.host_cache)
    info = query_interpreter(target)
    hashes = HashCache.load(target.prefix, state.hash_cache)
    tree = TreeCache.load(state.tree_cache)
    inventory = read_inventory(
        target.prefix, info.site_packages, target.python, hasher=hashes, cache=tree
    )
    elf = index_environment(target.prefix, inventory.files, state.elf_cache)
    tree.watch([*elf.objects, *elf.problems])  # an in-place overwrite keeps the dir's mtime
    tree.save(state.tree_cache)
    suspects = changed_since_record(inventory, elf_providers(inventory, elf))
    path_hashes = {p: hashes(p) for p in [*(s.path for s in inventory.shared), *suspects]}
    hashes.save(state.hash_cache)
    table, runtime = DlopenTable.default(), RuntimeTable.default()
    for extra in dlopen_tables:
        table = table.merged(DlopenTable.load(extra))
        runtime = runtime.merged(RuntimeTable.load(extra))
    objects = [p for p in elf.objects if p not in elf.foreign]
    loads = bind(runtime, str(inventory.prefix), inventory.site_packages, objects, inventory.owners)
    table = table.merged(DlopenTable(by_object=loads.sonames, preload=loads.paths))
    lib_path = os.environ.get("LD_LIBRARY_PATH", "") if ld_library_path is None else ld_library_path
    return Facts(
        inventory=inventory,
        elf=elf,
        search=SearchConfig.for_host(split_ld_library_path(lib_path)),
        dlopen=table,
        marker_env=dict(info.marker_env),
        self_dependencies=own_dependencies(target.prefix),
        path_hashes=path_hashes,
        interpreter=info,
        runtime=loads,
        shebangs=read_shebangs(target.prefix, _scripts(inventory, elf)),
        hashed_files=hashes.hashed,
    )


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
        Root(path, "run-time", facts.runtime.source(path))
        for path in sorted(facts.runtime.objects)
        if path not in known and EnvPath(path[len(prefix) + 1 :]) not in gone
    )
    return entries + run_time


def _scripts(inventory: Inventory, elf: ElfIndex) -> list[EnvPath]:
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


def with_hashes(facts: Facts, paths: Iterable[EnvPath]) -> Facts:
    """``facts`` that also know the sha256 of ``paths`` (cached by stat under ``.cudafix/``)."""
    wanted = [p for p in paths if p not in facts.path_hashes]
    if not wanted:
        return facts
    prefix = facts.inventory.prefix
    cache = StateDir(prefix).hash_cache
    hashes = HashCache.load(prefix, cache)
    known = {**facts.path_hashes, **{p: hashes(p) for p in wanted}}
    hashes.save(cache)
    return replace(facts, path_hashes=known)


def with_staging(facts: Facts, staging: Staging) -> Facts:
    """``facts`` with what staging found (:func:`cudafix.fetch.staging.stage`, run by the
    caller) and the paths the staged wheels would overwrite hashed, for the preconditions."""
    inv = facts.inventory
    recorded = {
        name: url
        for name, _ in {*staging.wheels, *staging.problems}
        if (dist := inv.distributions.get(name)) is not None
        and (url := direct_url(inv.prefix, dist.dist_info)) is not None
    }
    staging = replace(staging, recorded=recorded)
    overwritten = [p for w in staging.wheels.values() for p in w.files if p in inv.files]
    return replace(with_hashes(facts, overwritten), staging=staging)


def own_dependencies(prefix: Path) -> frozenset[DistName]:
    """cudafix and everything it imports, when it runs from inside the target."""
    if Path(sys.prefix).resolve() != prefix.resolve():
        return frozenset()
    seen: set[DistName] = set()
    todo = ["cudafix"]
    while todo:
        name = normalize_name(todo.pop())
        if name in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        seen.add(name)
        for raw in dist.requires or []:
            req = Requirement(raw)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return frozenset(seen)
