"""Which needs of which objects resolve where, and how a change to the tree alters that.

This is the bridge between the pure loader (absolute paths, one load tree per root) and the
planner and doctor (environment paths, owners). A need is judged on the load chains through
which its object is really loaded: the trees of the environment's entry points (extension
modules, executables, run-time loads; :class:`Root`), each loaded as ``ldd <root>`` would,
so DT_RPATHs inherited from the loaders count. An object none of them loads is judged on
its own tree.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from cudafix.linker.bypath import by_path
from cudafix.linker.edge import Edge, EdgeKey
from cudafix.linker.elf import ElfInfo
from cudafix.linker.elfindex import ElfIndex, EnvironmentView
from cudafix.linker.loader import (
    DiagnosingView,
    DlopenTable,
    LibraryView,
    LoadTree,
    Lookup,
    SearchConfig,
    resolve,
)
from cudafix.model.names import EnvPath

RootKind = Literal["extension", "executable", "run-time"]


@dataclass(frozen=True)
class Root:
    """Where a load chain starts: an object something really loads, and why.

    Extension modules (``import`` dlopens them) and executables come from the ELF facts
    (:func:`entry_roots`); run-time loads (a framework dlopening a library by path) are
    given by whoever knows them, with where that was read in ``source``.
    """

    path: str
    """Absolute path."""
    kind: RootKind
    source: str = ""
    inferred: bool = False
    """Known from soname literals only: the framework loads it on demand, when it chooses
    to, so a need on its chain alone is judged as one of an object nothing loads."""


def entry_roots(
    prefix: str,
    index: ElfIndex,
    extension_suffixes: Iterable[str],
    gone: frozenset[EnvPath] = frozenset(),
) -> tuple[Root, ...]:
    """The environment's extension modules and executables, sorted by path.

    An extension module is a file named ``<module><suffix>``, ``suffix`` one of the target
    interpreter's ``EXTENSION_SUFFIXES``, that exports ``PyInit_<module>``: exactly what
    import loads (``jaxlib/_jax.so`` carries no ABI tag and is one; ``libtorch_cuda.so``
    exports no ``PyInit_libtorch_cuda`` and is not). An executable has PT_INTERP.
    """
    suffixes = tuple(extension_suffixes)
    roots: list[Root] = []
    for rel, info in sorted(index.objects.items()):
        if rel in gone or rel in index.foreign:
            continue
        name = rel.rsplit("/", 1)[-1]
        module = info.python_module
        if module is not None and name[len(module) :] in suffixes:
            roots.append(Root(f"{prefix}/{rel}", "extension"))
        elif info.is_executable:
            roots.append(Root(f"{prefix}/{rel}", "executable"))
    return tuple(roots)


@dataclass(frozen=True)
class Chains:
    """Every load chain of an environment state, and each need judged on them."""

    roots: tuple[Root, ...]
    trees: Mapping[str, LoadTree]
    """Tree per root path: the real roots', then the own tree of each object none loads."""
    loaded: Mapping[str, frozenset[str]]
    """Canonical paths of the objects each real root's tree loads (the root included)."""
    edges: Mapping[EdgeKey, Edge]
    """Every (canonical requester, need), judged by :func:`judge`."""


def resolve_chains(
    roots: Iterable[Root],
    objects: Iterable[str],
    view: LibraryView,
    config: SearchConfig,
    dlopen: DlopenTable | None,
) -> Chains:
    """Load every root, then each of ``objects`` (absolute paths) that no root loads; a need
    of an object no root loads that only a file elsewhere in the environment meets is an
    edge to that file (:func:`~cudafix.linker.bypath.by_path`)."""
    canonical = _canonicaliser(view)
    ordered = tuple(sorted({r.path: r for r in roots}.values(), key=lambda r: r.path))
    trees = resolve_trees([r.path for r in ordered], view, config, dlopen)
    loaded = {p: frozenset(canonical(o) for o in t.objects) for p, t in trees.items()}
    reached = frozenset().union(*loaded.values())
    alone = [o for o in sorted(objects) if canonical(o) not in reached and o not in trees]
    own = resolve_trees(alone, view, config, dlopen)
    weak = frozenset(r.path for r in ordered if r.inferred and r.kind == "run-time")
    edges = judge([trees[r.path] for r in ordered], own.values(), canonical, weak)
    return Chains(ordered, {**trees, **own}, loaded, by_path(edges, present(view)))


def present(view: LibraryView) -> dict[str, ElfInfo]:
    """The loadable ELF objects of an environment view (absolute path -> facts); none for
    a view that is not an environment's."""
    if not isinstance(view, EnvironmentView):
        return {}
    index, skip = view.index, view.removed
    return {
        f"{view.prefix}/{p}": info
        for p, info in index.objects.items()
        if p not in skip and p not in index.foreign
    }


def judge(
    real: Iterable[LoadTree],
    own: Iterable[LoadTree],
    canonical: Callable[[str], str],
    on_demand: frozenset[str] = frozenset(),
) -> dict[EdgeKey, Edge]:
    """Each need once: resolved if any real chain that loads its object resolves it.

    ld.so resolves a bundled library's needs through the DT_RPATH of the extension module
    that loads it, so the library's own tree is not how it is loaded; and the same object
    reached from different roots can see different inherited RPATHs. A need is unresolved
    only when every real chain through its object fails it. Objects no real chain loads
    are judged on their own tree (``own``; only the root's own needs count there). The
    trees of ``on_demand`` roots (loads known from literals alone) give edges but count no
    chain: what only they reach is judged as what nothing loads (needs met by path count).
    """
    chosen: dict[EdgeKey, tuple[Lookup, str]] = {}
    """The step each need is judged by, with its tree's root (its Edge made once, at the end)."""
    chains: dict[EdgeKey, int] = {}
    for tree in real:
        seen: set[EdgeKey] = set()
        counted = tree.root not in on_demand
        for step in tree.steps:
            key = (canonical(step.requester), step.need)
            if counted and key not in seen:
                seen.add(key)
                chains[key] = chains.get(key, 0) + 1
            old = chosen.get(key)
            if old is None or (old[0].provider is None and step.provider is not None):
                chosen[key] = (step, tree.root)
    for tree in own:
        root = canonical(tree.root)
        for step in tree.steps:
            key = (canonical(step.requester), step.need)
            if key[0] == root and key not in chosen:
                chosen[key] = (step, tree.root)
    real_path: dict[str, str] = {}
    return {
        key: _edge(step, real_path, key[0], root, chains.get(key, 0))
        for key, (step, root) in sorted(chosen.items())
    }


def _canonicaliser(view: LibraryView) -> Callable[[str], str]:
    """The view's symlink-resolved path (one file reached by two names is one object)."""
    if not isinstance(view, DiagnosingView):
        return lambda path: path
    memo: dict[str, str] = {}

    def canonical(path: str) -> str:
        if path not in memo:
            memo[path] = view.canonical(path)
        return memo[path]

    return canonical


def resolve_trees(
    roots: Iterable[str],
    view: LibraryView,
    config: SearchConfig,
    dlopen: DlopenTable | None,
) -> dict[str, LoadTree]:
    """The load tree of every root, as ``ldd <root>`` would load it."""
    return {root: resolve(root, view, config, dlopen) for root in roots}


def _edge(step: Lookup, real: dict[str, str], requester: str, root: str, chains: int) -> Edge:
    """The provider with symlinks resolved (memoised per call: providers repeat a lot)."""
    provider = step.provider
    if provider is not None:
        if provider not in real:
            real[provider] = os.path.realpath(provider)
        provider = real[provider]
    return Edge(requester, step.need, provider, step.how, step.searched, chains, root)


def env_objects(prefix: str, index: ElfIndex, gone: frozenset[EnvPath] = frozenset()) -> list[str]:
    """Absolute paths of the environment's loadable ELF objects in a state, sorted.

    Objects built for another architecture are never loaded: this loader cannot load them.
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
    elif _normal_absolute(base) and _normal_absolute(path):
        return None  # a system library: outside, as relpath would find at more cost
    elif path and not path.startswith("/"):  # a soname: relpath's answer from the cwd
        return to_env_path(prefix, f"{os.getcwd()}/{path}")  # noqa: PTH109 - str, hot path
    rel = os.path.relpath(path, prefix)
    if rel == os.curdir or rel.startswith(os.pardir + os.sep) or rel == os.pardir:
        return None
    return EnvPath(rel.replace(os.sep, "/"))


def _normal_absolute(path: str) -> bool:
    """Whether ``path`` is absolute with no ``.`` or ``..`` component and no empty one
    (but a last): lexical normalisation leaves it as it is, less a trailing ``/``."""
    return path.startswith("/") and "/." not in path and "//" not in path


def in_env(prefix: str, path: str) -> str:
    """A path as plans and findings record it: the EnvPath of one inside ``prefix``, any other
    (a system library) as it is."""
    return to_env_path(prefix, path) or path


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
