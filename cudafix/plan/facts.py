"""Read everything the planner and doctor need, once, into one frozen value.

This is the only read-side orchestration: the target's interpreter is asked once, the tree
is walked once, ELF objects and hashes come from caches under ``.cudafix/`` when unchanged.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

from cudafix.env.hashing import HashCache
from cudafix.env.inventory import Inventory, read_inventory
from cudafix.env.statedir import StateDir
from cudafix.env.target import InterpreterInfo, TargetEnv, query_interpreter
from cudafix.linker.elfindex import ElfIndex, index_environment
from cudafix.linker.loader import DlopenTable, SearchConfig, split_ld_library_path
from cudafix.model.names import DistName, EnvPath, normalize_name
from cudafix.model.sources import Sources
from cudafix.process import run
from cudafix.tx import backend


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
    hash_of: Callable[[EnvPath], str | None] = lambda _p: None
    """RECORD-style sha256 of a path on disk, for preconditions."""
    wheel_available: Callable[[DistName, str], bool] = lambda _n, _v: True
    """Whether a wheel for a reinstall can be had under the plan's options."""
    interpreter: InterpreterInfo | None = None
    save_caches: Callable[[], object] = lambda: None
    """Persist what was hashed while planning (preconditions), for the next run."""


def gather(
    target: TargetEnv,
    *,
    dlopen_tables: Sequence[Path] = (),
    ld_library_path: str | None = None,
    sources: Sources = Sources(),  # noqa: B008 - a frozen value
) -> Facts:
    """Read the target; caches are saved only where cudafix may write (``.cudafix/``)."""
    info = query_interpreter(target)
    state = StateDir(target.prefix)
    hashes = HashCache.load(target.prefix, state.cache / "hash-cache.json")
    inventory = read_inventory(target.prefix, info.site_packages, target.python, hasher=hashes)
    elf = index_environment(target.prefix, inventory.files, state.cache / "elf-cache.json")
    hash_file = state.cache / "hash-cache.json"
    hashes.save(hash_file)
    table = DlopenTable.default()
    for extra in dlopen_tables:
        table = table.merged(DlopenTable.load(extra))
    lib_path = os.environ.get("LD_LIBRARY_PATH", "") if ld_library_path is None else ld_library_path
    return Facts(
        inventory=inventory,
        elf=elf,
        search=SearchConfig.for_host(split_ld_library_path(lib_path)),
        dlopen=table,
        marker_env=dict(info.marker_env),
        self_dependencies=own_dependencies(target.prefix),
        hash_of=hashes,
        wheel_available=_wheel_probe(target, sources),
        interpreter=info,
        save_caches=lambda: hashes.save(hash_file),
    )


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


def _wheel_probe(target: TargetEnv, sources: Sources) -> Callable[[DistName, str], bool]:
    """Ask uv, without installing, whether ``name==version`` can be had as configured."""
    if not sources.offline and not sources.find_links:
        return lambda _n, _v: True
    memo: dict[tuple[DistName, str], bool] = {}

    def available(name: DistName, version: str) -> bool:
        if (name, version) not in memo:
            done = run(
                _dry_reinstall_argv(target, f"{name}=={version}", sources),
                timeout=120,
            )
            memo[(name, version)] = done.returncode == 0
        return memo[(name, version)]

    return available


def _dry_reinstall_argv(target: TargetEnv, pin: str, sources: Sources) -> list[str]:
    python = target.python or target.prefix / "bin" / "python"
    uv = backend.UvBackend(python, sources.offline, sources.find_links)
    return uv.reinstall_argv([pin], dry_run=True)
