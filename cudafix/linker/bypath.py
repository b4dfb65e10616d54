"""Needs met by a file elsewhere in the environment: a framework preloads it by full path.

torch, jax and onnxruntime load the nvidia wheels' libraries by full path from
``site-packages/nvidia/...`` before they ``dlopen()`` a plugin whose DT_NEEDED names them
(CuPy before it imports an extension module that has no search path of its own);
the plugin's own search path never finds them. An object that no load chain reaches is
judged on its own tree, where such a need fails; when a loadable file of the environment
answers to that soname, the need is an edge to that file (``how == "by-path"``), so a plan
that deletes the last such file loses it and a doctor that finds it gone can say so.

Pure: edges and candidate files in, edges out.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from cudafix.linker.edge import Edge, EdgeKey
from cudafix.linker.elf import ElfInfo

BY_PATH = "by-path"
"""``Edge.how`` of a need met only by a file elsewhere in the environment."""


def by_path(
    edges: Mapping[EdgeKey, Edge], candidates: Mapping[str, ElfInfo]
) -> dict[EdgeKey, Edge]:
    """``edges`` with each need that no chain loads and its own search misses bound to a
    file of ``candidates`` (absolute path -> ELF facts) answering to that soname.

    Only needs of objects no real chain loads (``chains == 0``): what a real chain loads is
    judged on that chain, as ld.so loads it; except an extension module with no search path
    of its own (no DT_RPATH, no DT_RUNPATH), which can only have been built to be imported
    after its framework preloads what it needs (CuPy's ``cupy/cuda/cufft``). A candidate
    answers to a soname by its DT_SONAME, or by its file name when it has none; of several,
    the first path wins.
    """
    names: dict[str, str] = {}
    for path in sorted(candidates):
        info = candidates[path]
        names.setdefault(info.soname or posixpath.basename(path), path)
    out = dict(edges)
    for key, edge in edges.items():
        if edge.provider is not None or "/" in edge.need:
            continue
        if edge.chains and not _preloaded_extension(candidates.get(edge.requester)):
            continue
        found = names.get(edge.need)
        if found is not None and found != edge.requester:
            out[key] = replace(edge, provider=os.path.realpath(found), how=BY_PATH)
    return out


def _preloaded_extension(info: ElfInfo | None) -> bool:
    """An extension module that names no directory to find its needs in."""
    return info is not None and info.python_module is not None and not (info.rpath or info.runpath)


def partly_provided(
    edges: Iterable[Edge], inside: str, owner: Callable[[str], str | None]
) -> frozenset[str]:
    """Objects no chain loads some of whose needs the environment provides while others
    it provides nowhere: built for a stack that is installed here, and broken.

    ``inside`` is the environment's prefix; a need counts as provided when its file is
    inside it and is not of the object's own distribution (``owner``: absolute path -> its
    first owner, None when unowned): its own files say nothing about whether the stack it
    was built for is installed. An object none of whose needs the environment provides is
    a plugin for a stack that is not installed: optional, not broken.
    """
    provided, missing = _needs_met(edges, inside, owner, unloaded_only=True)
    return frozenset(provided & missing)


def stack_absent(
    edges: Iterable[Edge], inside: str, owner: Callable[[str], str | None]
) -> frozenset[str]:
    """Objects, loaded or not, with needs provided nowhere and none provided inside the
    environment by another distribution (``owner`` as for :func:`partly_provided`): built
    for a stack that is not installed here, whatever loads them."""
    provided, missing = _needs_met(edges, inside, owner, unloaded_only=False)
    return frozenset(missing - provided)


def _needs_met(
    edges: Iterable[Edge],
    inside: str,
    owner: Callable[[str], str | None],
    *,
    unloaded_only: bool,
) -> tuple[set[str], set[str]]:
    """The requesters with a need another distribution inside ``inside`` provides, and
    those with a need provided nowhere (of objects no chain loads, if ``unloaded_only``)."""
    base = inside.rstrip("/") + "/"
    provided: set[str] = set()
    missing: set[str] = set()
    for e in edges:
        if unloaded_only and e.chains:
            continue
        if e.provider is None:
            missing.add(e.requester)
        elif e.provider.startswith(base):
            mine = owner(e.requester)
            if mine is None or owner(e.provider) != mine:
                provided.add(e.requester)
    return provided, missing
