"""Facts made by hand, so planner tests need no venv: the planner is a function of data.

A distribution lists its files as ``{site-relative path: label}``; the label stands for the
file's bytes (its RECORD hash is the label). ``disk`` says which label each path holds now
(by default the last distribution listed that claims it, as a later install overwrites).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cudafix.env.inventory import CoOwnedPath, Distribution, FileStat, Inventory, RecordEntry
from cudafix.fetch.staged import StagedWheel, Staging
from cudafix.linker.elf import ElfInfo
from cudafix.linker.elfindex import ElfIndex
from cudafix.linker.loader import SearchConfig
from cudafix.model.names import DistName, EnvPath, Soname, normalize_name
from cudafix.plan.facts import Facts

SITE = EnvPath("lib/python3.12/site-packages")
PREFIX = Path("/nonexistent/hand-made-venv")
NO_HOST = SearchConfig(default_dirs=("/nonexistent/lib",), lib="lib")
"""A loader with no system directories: every need must resolve inside the venv."""


@dataclass(frozen=True)
class Dist:
    name: str
    version: str
    files: Mapping[str, str]
    requires: tuple[str, ...] = ()
    top_level: tuple[str, ...] = ()


@dataclass(frozen=True)
class Lib:
    """An ELF object at a site-relative path."""

    soname: str | None = None
    needed: tuple[str, ...] = ()
    rpath: tuple[str, ...] = ()
    runpath: tuple[str, ...] = ()
    literals: tuple[str, ...] = ()
    """Sonames its read-only data spells."""


def env(path: str) -> EnvPath:
    return EnvPath(f"{SITE}/{path}")


def bare(name: str, version: str = "1", *requires: str) -> Distribution:
    """A distribution of no files, only its requirements: what requirement reasoning reads."""
    return Distribution(
        name=normalize_name(name),
        version=version,
        dist_info=EnvPath(f"site/{name}-{version}.dist-info"),
        site_packages=EnvPath("site"),
        installer="uv",
        requires=requires,
        files=(),
        top_level=(),
    )


def _dist(d: Dist) -> Distribution:
    name = normalize_name(d.name)
    info = env(f"{d.name.replace('-', '_')}-{d.version}.dist-info")
    entries = tuple(RecordEntry(env(p), p, label, len(label)) for p, label in d.files.items())
    return Distribution(name, d.version, info, SITE, "uv", d.requires, entries, d.top_level)


def facts(
    dists: Sequence[Dist],
    libs: Mapping[str, Lib] | None = None,
    *,
    disk: Mapping[str, str | None] | None = None,
    staging: Staging | None = None,
) -> Facts:
    """Facts of an environment holding ``dists``, ELF objects ``libs``, bytes ``disk``."""
    held: dict[EnvPath, str] = {}
    for d in dists:
        held.update({env(p): label for p, label in d.files.items()})
    for p, label in (disk or {}).items():
        if label is None:
            held.pop(env(p), None)
        else:
            held[env(p)] = label
    files = {
        p: FileStat("file", len(label), 0o644, 1, i, 0) for i, (p, label) in enumerate(held.items())
    }
    distributions = {normalize_name(d.name): _dist(d) for d in dists}
    owners: dict[EnvPath, list[DistName]] = {}
    for dist in distributions.values():
        for e in dist.files:
            owners.setdefault(e.path, []).append(dist.name)
    shared = []
    for path, names in sorted(owners.items()):
        if len(names) < 2:
            continue
        matching = tuple(
            sorted(
                n for n in names if distributions[n].record_by_path[path].sha256 == held.get(path)
            )
        )
        holder = matching[0] if matching else None
        shared.append(CoOwnedPath(path, tuple(sorted(names)), holder, path not in held, matching))
    inventory = Inventory(
        prefix=PREFIX,
        python=None,
        site_packages=(SITE,),
        distributions=distributions,
        unmanaged=(),
        unsafe=(),
        files=files,
        owners={p: tuple(sorted(n)) for p, n in owners.items()},
        shared=tuple(shared),
        missing={},
    )
    objects = {
        env(p): ElfInfo(
            64,
            "EM_X86_64",
            Soname(lib.soname) if lib.soname else None,
            tuple(Soname(n) for n in lib.needed),
            lib.rpath,
            lib.runpath,
            literals=tuple(Soname(n) for n in lib.literals),
        )
        for p, lib in (libs or {}).items()
        if env(p) in files
    }
    return Facts(
        inventory=inventory,
        elf=ElfIndex(objects, {}, frozenset(), (64, "EM_X86_64")),
        search=NO_HOST,
        dlopen=None,
        marker_env={"python_version": "3.12", "sys_platform": "linux"},
        path_hashes={s.path: held.get(s.path) for s in shared},
        staging=staging if staging is not None else Staging(fetched=True),
    )


def wheel_of(
    d: Dist, *, version: str | None = None, changed: Mapping[str, str] | None = None
) -> StagedWheel:
    """The wheel a staging install of ``d`` would unpack (``changed``: other bytes there)."""
    dist = _dist(d)
    files: dict[EnvPath, str | None] = {e.path: e.sha256 for e in dist.files}
    files.update({env(p): label for p, label in (changed or {}).items()})
    return StagedWheel(
        name=dist.name,
        version=version or d.version,
        files=files,
        dist_info=dist.dist_info,
        requires=d.requires,
        top_level=d.top_level,
    )
