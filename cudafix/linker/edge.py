"""One need of one object and where it resolves: the unit linkage, doctor and the planner judge.

Its own module so that what computes edges (:mod:`cudafix.linker.linkage`) and what adds
edges to them (:mod:`cudafix.linker.bypath`) share the type without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass

from cudafix.model.names import Soname


@dataclass(frozen=True)
class Edge:
    """One need of one object, and the file it resolves to (None: not found)."""

    requester: str
    need: Soname
    provider: str | None
    how: str
    searched: tuple[str, ...]
    chains: int = 0
    """How many real load chains (:class:`Root`) load the requester; 0: none does, and the
    edge is the requester's own tree's. With chains, a None provider means the need fails
    on every one of them, and a provider is the first chain's that finds one."""
    root: str = ""
    """The root of the tree this edge was read from."""


EdgeKey = tuple[str, Soname]
