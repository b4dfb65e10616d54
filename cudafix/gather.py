"""Read everything the planner and doctor need, once, into their facts (``plan.facts.Facts``).

The one read-side orchestration above ``env/`` and ``linker/``, so ``plan/`` stays pure:
the target's interpreter is asked once, the tree is walked once, ELF objects, literals and
hashes come from the index of facts under ``.cudafix/`` when unchanged, and the host is
read through one view per target (``Facts.host``). What a plan needs besides (hashes for
preconditions, what staging found, the live state under the lock) is read here too, and
handed over as data.
"""

from __future__ import annotations

import os
import posixpath
import sys
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path

from packaging.requirements import Requirement

from cudafix.env import lastseen
from cudafix.env.distinfo import direct_url
from cudafix.env.hashing import HashCache
from cudafix.env.inventory import Inventory, changed_since_record
from cudafix.env.memo.index import FactIndex
from cudafix.env.memo.treecache import TreeCache
from cudafix.env.pysources import python_literals
from cudafix.env.reading import (
    find_dist_info,
    installed_versions,
    read_distribution,
    read_inventory,
)
from cudafix.env.scripts import read_shebangs
from cudafix.env.statedir import StateDir
from cudafix.env.target import TargetEnv, query_interpreter
from cudafix.fetch.staged import Staging
from cudafix.linker.elfindex import ElfIndex, index_environment
from cudafix.linker.hostview import HostView
from cudafix.linker.loader import DlopenTable, SearchConfig, split_ld_library_path
from cudafix.linker.runtime import RUNTIME_TABLE_VARIABLE, BoundLoads, RuntimeTable, bind
from cudafix.model.errors import CudafixError
from cudafix.model.names import DistName, EnvPath, Soname, normalize_name
from cudafix.model.plan import Plan
from cudafix.plan.facts import Facts, elf_providers, scripts_of
from cudafix.plan.literals import bind_literals
from cudafix.plan.preconditions import quick_differences, record_digest


def gather(
    target: TargetEnv,
    *,
    dlopen_tables: Sequence[Path] = (),
    ld_library_path: str | None = None,
    host: HostView | None = None,
) -> Facts:
    """Read the target; caches are saved only where cudafix may write (``.cudafix/``).

    ``host`` is the view of the host the ELF index and the loader consult, carried in the
    facts; by default one remembered in the target's host cache, which the caller saves
    (:meth:`HostView.save`) once its decisions are made.
    """
    state = StateDir(target.prefix)
    host = host if host is not None else HostView(state.host_cache)
    info = query_interpreter(target)
    index = FactIndex.open(target.prefix)
    hashes = HashCache(target.prefix, index)
    tree = TreeCache.load(state.tree_cache)
    inventory = read_inventory(
        target.prefix, info.site_packages, target.python, hasher=hashes, cache=tree
    )
    elf = index_environment(target.prefix, inventory.files, index, expected=host.arch())
    python = python_literals(target.prefix, inventory, index)
    tree.watch([*elf.objects, *elf.problems, *python])  # in-place overwrites keep dir mtimes
    tree.save(state.tree_cache)
    suspects = changed_since_record(inventory, elf_providers(inventory, elf))
    path_hashes = {p: hashes(p) for p in [*(s.path for s in inventory.shared), *suspects]}
    hashes.save()
    index.close()
    table, runtime = DlopenTable.default(), runtime_table()
    for extra in dlopen_tables:
        table = table.merged(DlopenTable.load(extra))
        runtime = runtime.merged(RuntimeTable.load(extra))
    objects = [p for p in elf.objects if p not in elf.foreign]
    loads = bind(runtime, str(inventory.prefix), inventory.site_packages, objects, inventory.owners)
    lib_path = os.environ.get("LD_LIBRARY_PATH", "") if ld_library_path is None else ld_library_path
    search = SearchConfig.for_host(host, split_ld_library_path(lib_path))
    last_seen = lastseen.load(inventory.prefix)
    loads = loads.merged(
        bind_literals(
            inventory, elf, python, info.marker_env, search,
            system=host.provided_by_system(),
            skip={r.framework for r in runtime.rows if not r.optional},
            dlopen_edges=table.edges, remembered=last_seen,
        )
    )  # fmt: skip
    table = table.merged(DlopenTable(by_object=loads.sonames, preload=loads.paths))
    remember_libraries(inventory, elf, last_seen, loaded_names(loads))
    return Facts(
        inventory=inventory,
        elf=elf,
        search=search,
        dlopen=table,
        marker_env=dict(info.marker_env),
        self_dependencies=own_dependencies(target.prefix),
        path_hashes=path_hashes,
        interpreter=info,
        runtime=loads,
        shebangs=read_shebangs(target.prefix, scripts_of(inventory, elf)),
        hashed_files=hashes.hashed,
        read_paths=tuple(tree.read_paths()),
        host=host,
        last_seen=last_seen,
    )


def runtime_table() -> RuntimeTable:
    """The shipped run-time table, or the file ``$CUDAFIX_RUNTIME_TABLE`` names instead (an
    empty file: no rows, to see what soname literals alone protect)."""
    path = os.environ.get(RUNTIME_TABLE_VARIABLE)
    if not path:
        return RuntimeTable.default()
    return RuntimeTable.load(Path(path), f"${RUNTIME_TABLE_VARIABLE}")


def loaded_names(loads: BoundLoads) -> frozenset[Soname]:
    """The library names run-time loads need: sonames, and the file names of paths."""
    names = {n for v in loads.sonames.values() for n in v}
    names |= {Soname(posixpath.basename(p)) for v in loads.paths.values() for p in v}
    return frozenset(n for n in names if "/" not in n)


def remember_libraries(
    inventory: Inventory, elf: ElfIndex, old: lastseen.Memory, loaded: Iterable[Soname] = ()
) -> None:
    """Remember, for the next reading, what provides each library objects need (DT_NEEDED)
    or load at run time (``loaded``), in place of ``old`` (:mod:`cudafix.env.lastseen`)."""
    prefix = inventory.prefix
    present = [p for p in elf.objects if p not in elf.foreign]
    needed = {n for p in present for n in elf.objects[p].needed if "/" not in n} | set(loaded)
    now: dict[Soname, list[lastseen.Seen]] = {}
    for path in present:
        owners = inventory.owners.get(path, ())
        dist = inventory.distributions.get(owners[0]) if owners else None
        name = Soname(elf.objects[path].soname or posixpath.basename(path))
        if dist is not None and name in needed:
            now.setdefault(name, []).append(lastseen.Seen(path, dist.name, dist.version))
    new = lastseen.update(old, {s: tuple(v) for s, v in now.items()}, needed)
    if new != old:
        lastseen.save(prefix, new)


def with_hashes(facts: Facts, paths: Iterable[EnvPath]) -> Facts:
    """``facts`` that also know the sha256 of ``paths`` (cached by stat under ``.cudafix/``)."""
    wanted = [p for p in paths if p not in facts.path_hashes]
    if not wanted:
        return facts
    prefix = facts.inventory.prefix
    index = FactIndex.open(prefix)
    hashes = HashCache(prefix, index)
    known = {**facts.path_hashes, **{p: hashes(p) for p in wanted}}
    hashes.save()
    index.close()
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
    from importlib import metadata  # 7 ms, asked only where cudafix runs inside the target

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


def live_differences(plan: Plan) -> list[str]:
    """:func:`~cudafix.plan.preconditions.quick_differences` over the environment as it is
    now: versions, shared-path hashes and RECORD digests, read without a full walk (under
    the transaction lock, just before applying)."""
    prefix = Path(plan.target.prefix)
    sites = [EnvPath(s) for s in plan.target.site_packages]
    index = FactIndex.open(prefix)
    hashes = HashCache(prefix, index, strict=True)
    records = {n: _live_record_digest(prefix, plan, n) for n in plan.preconditions.records}
    try:
        return quick_differences(plan, installed_versions(prefix, sites), hashes, records)
    finally:
        index.close()


def _live_record_digest(prefix: Path, plan: Plan, name: str) -> str | None:
    """The RECORD digest of installed ``name`` read from disk now (None: no such RECORD)."""
    want = plan.preconditions.distributions.get(DistName(name))
    info = find_dist_info(prefix, plan.target.site_packages, name, want) if want else None
    if info is None:
        return None
    try:
        dist = read_distribution(prefix, EnvPath(posixpath.dirname(info)), info, requires=False)
    except CudafixError:
        return None
    return record_digest(dist) if dist is not None else None
