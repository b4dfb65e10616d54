"""Which needs of which objects resolve where, and how a change to the tree alters that.

This is the bridge between the pure loader (absolute paths, one load tree per root) and the
planner and doctor (environment paths, owners). Every ELF object of the environment is a
root, as ``ldd <object>`` would load it, so inherited RPATHs are taken into account.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from cudafix.elfindex import ElfIndex
from cudafix.loader import DlopenTable, LibraryView, SearchConfig, Step, resolve
from cudafix.names import EnvPath, Soname


@dataclass(frozen=True)
class Edge:
    """One need of one object, and the file it resolves to (None: not found)."""

    requester: str
    need: Soname
    provider: str | None
    how: str
    searched: tuple[str, ...]


EdgeKey = tuple[str, Soname]


def resolve_edges(
    roots: Iterable[str],
    view: LibraryView,
    config: SearchConfig,
    dlopen: DlopenTable | None,
) -> dict[EdgeKey, Edge]:
    """Resolve every root's load tree; keep the first answer per (requester, need).

    The same object reached from different roots can see different inherited RPATHs; the
    first root that reaches it is the one whose answer counts, which keeps results stable
    (roots are passed in sorted order).
    """
    edges: dict[EdgeKey, Edge] = {}
    for root in roots:
        for step in resolve(root, view, config, dlopen).steps:
            edges.setdefault((step.requester, step.need), _edge(step))
    return edges


def _edge(step: Step) -> Edge:
    provider = os.path.realpath(step.provider) if step.provider else None
    return Edge(step.requester, step.need, provider, step.how, step.searched)


def env_roots(prefix: str, index: ElfIndex, gone: frozenset[EnvPath] = frozenset()) -> list[str]:
    """Absolute paths of the environment's loadable ELF objects in a state, sorted.

    Objects built for another architecture are never roots: this loader cannot load them.
    """
    skip = gone | index.foreign
    return sorted(f"{prefix}/{p}" for p in index.objects if p not in skip)


def to_env_path(prefix: str, path: str) -> EnvPath | None:
    """The EnvPath of an absolute path inside ``prefix``; None for system files."""
    rel = os.path.relpath(path, prefix)
    if rel == os.curdir or rel.startswith(os.pardir + os.sep) or rel == os.pardir:
        return None
    return EnvPath(rel.replace(os.sep, "/"))


@dataclass(frozen=True)
class LinkDiff:
    """What a change does to resolution: needs lost, and needs that now find another file."""

    lost: tuple[tuple[Edge, Edge], ...]
    """(before, after) pairs where before resolved and after does not."""
    switched: tuple[tuple[Edge, Edge], ...]
    """(before, after) pairs that resolve to different files."""


def diff_edges(before: Mapping[EdgeKey, Edge], after: Mapping[EdgeKey, Edge]) -> LinkDiff:
    """Compare two resolutions of the same remaining objects."""
    lost: list[tuple[Edge, Edge]] = []
    switched: list[tuple[Edge, Edge]] = []
    for key, new in sorted(after.items()):
        old = before.get(key)
        if old is None or old.provider is None:
            continue
        if new.provider is None:
            lost.append((old, new))
        elif new.provider != old.provider:
            switched.append((old, new))
    return LinkDiff(tuple(lost), tuple(switched))
