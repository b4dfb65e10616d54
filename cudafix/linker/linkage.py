"""Which needs of which objects resolve where, and how a change to the tree alters that.

This is the bridge between the pure loader (absolute paths, one load tree per root) and the
planner and doctor (environment paths, owners). Every ELF object of the environment is a
root, as ``ldd <object>`` would load it, so inherited RPATHs are taken into account.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from cudafix.linker.elfindex import ElfIndex
from cudafix.linker.loader import DlopenTable, LibraryView, LoadTree, SearchConfig, Step, resolve
from cudafix.model.names import EnvPath, Soname


@dataclass(frozen=True)
class Edge:
    """One need of one object, and the file it resolves to (None: not found)."""

    requester: str
    need: Soname
    provider: str | None
    how: str
    searched: tuple[str, ...]


EdgeKey = tuple[str, Soname]


def resolve_trees(
    roots: Iterable[str],
    view: LibraryView,
    config: SearchConfig,
    dlopen: DlopenTable | None,
) -> dict[str, LoadTree]:
    """The load tree of every root, as ``ldd <root>`` would load it."""
    return {root: resolve(root, view, config, dlopen) for root in roots}


def edges_of(trees: Iterable[LoadTree]) -> dict[EdgeKey, Edge]:
    """Every (requester, need) of the trees; the first tree that reaches it answers.

    The same object reached from different roots can see different inherited RPATHs;
    taking the first (roots come sorted) keeps results stable.
    """
    edges: dict[EdgeKey, Edge] = {}
    real: dict[str, str] = {}
    for tree in trees:
        for step in tree.steps:
            if (step.requester, step.need) not in edges:
                edges[(step.requester, step.need)] = _edge(step, real)
    return edges


def resolve_edges(
    roots: Iterable[str],
    view: LibraryView,
    config: SearchConfig,
    dlopen: DlopenTable | None,
) -> dict[EdgeKey, Edge]:
    """:func:`edges_of` the trees of ``roots``."""
    return edges_of(resolve_trees(roots, view, config, dlopen).values())


def _edge(step: Step, real: dict[str, str]) -> Edge:
    """The provider with symlinks resolved (memoised per call: providers repeat a lot)."""
    provider = step.provider
    if provider is not None:
        if provider not in real:
            real[provider] = os.path.realpath(provider)
        provider = real[provider]
    return Edge(step.requester, step.need, provider, step.how, step.searched)


def env_roots(prefix: str, index: ElfIndex, gone: frozenset[EnvPath] = frozenset()) -> list[str]:
    """Absolute paths of the environment's loadable ELF objects in a state, sorted.

    Objects built for another architecture are never roots: this loader cannot load them.
    """
    skip = gone | index.foreign
    return sorted(f"{prefix}/{p}" for p in index.objects if p not in skip)


def to_env_path(prefix: str, path: str) -> EnvPath | None:
    """The EnvPath of an absolute path inside ``prefix``; None for system files."""
    base = prefix.rstrip("/") + "/"
    if path.startswith(base) and base.startswith("/") and "/." not in base + path[len(base) :]:
        tail = path[len(base) :]  # already normal: the common case, without relpath's cost
        if tail and "//" not in path and not tail.endswith("/"):
            return EnvPath(tail)
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
