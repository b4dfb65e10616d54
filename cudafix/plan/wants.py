"""What a distribution's requirements bring, through every extra that looks requested.

The installed distributions its Requires-Dist reach, and the unmet requirements on the way.
pip and uv record no requested extras, so an extra counts when the set shows it was asked
for (:func:`~cudafix.plan.requirements.requested_extras`), or when one of its met
requirements is explained by nothing else (what is left of a partly uninstalled extra).
Soname literals bind to what this brings (:mod:`cudafix.plan.literals`); doctor asks it
whether a library an on-demand plugin misses is one a requirement should have brought.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

from packaging.requirements import Requirement

from cudafix.env.inventory import Inventory
from cudafix.model.names import DistName, normalize_name
from cudafix.plan.requirements import applicable, extras_of, requested_extras, unmet


@dataclass(frozen=True)
class Brings:
    """What a distribution's requirements bring, as far as installed extras reach."""

    installed: Mapping[DistName, tuple[DistName, str]] = field(default_factory=dict)
    """Installed distribution -> (the distribution, extra) whose requirement names it."""
    unmet: tuple[tuple[DistName, str, Requirement], ...] = ()
    """(distribution, extra, requirement) of each unmet requirement on the way."""


class Wants:
    """:meth:`brings` per distribution, memoised over one environment's inventory."""

    def __init__(
        self,
        inventory: Inventory,
        marker_env: Mapping[str, str],
        requested: Mapping[DistName, frozenset[str]] | None = None,
    ) -> None:
        """``requested``: :func:`requested_extras` of the inventory, when the caller has it."""
        self.inv, self.env = inventory, marker_env
        self._brings: dict[DistName, Brings] = {}
        self._related: dict[DistName, Brings] = {}
        self._extras: dict[DistName, frozenset[str]] = {}
        self._requested = requested

    def brings(self, name: DistName) -> Brings:
        """What ``name``'s requirements bring, then what those of each distribution that
        requires it bring (sorted), the nearest first."""
        if name not in self._related:
            self._related[name] = self._brings_of(name)
        return self._related[name]

    def own(self, name: DistName) -> Brings:
        """What ``name``'s own requirements bring (none of its requirers')."""
        return self._walk(name)

    def _brings_of(self, name: DistName) -> Brings:
        own = self._walk(name)
        installed, unmet_ = dict(own.installed), list(own.unmet)
        for other in sorted(self.inv.distributions):
            if other == name:
                continue
            theirs = self._walk(other)
            if name in theirs.installed:
                for dep, by in theirs.installed.items():
                    installed.setdefault(dep, by)
                unmet_ += [u for u in theirs.unmet if u not in unmet_]
        return Brings(installed, tuple(unmet_))

    def _walk(self, start: DistName) -> Brings:
        """Breadth-first through requirements: base ones, and those of every extra that is
        installed (some requirement met) or that a requirement on the way names."""
        if start in self._brings:
            return self._brings[start]
        dists = self.inv.distributions
        installed: dict[DistName, tuple[DistName, str]] = {}
        unmet_: list[tuple[DistName, str, Requirement]] = []
        todo: list[tuple[DistName, frozenset[str]]] = [(start, frozenset())]
        seen: set[tuple[DistName, frozenset[str]]] = set()
        while todo:
            name, named = todo.pop(0)
            if (name, named) in seen or name not in dists:
                continue
            seen.add((name, named))
            extras = named | self._installed_extras(name)
            for req, extra in applicable(dists[name], self.env, extras):
                dep = normalize_name(req.name)
                if unmet(req, dists) is not None:
                    unmet_.append((name, extra, req))
                    continue
                installed.setdefault(dep, (name, extra))
                todo.append((dep, frozenset(normalize_name(x) for x in req.extras)))
        self._brings[start] = Brings(installed, tuple(unmet_))
        return self._brings[start]

    def _installed_extras(self, name: DistName) -> frozenset[str]:
        """The extras requested as far as the set shows (:func:`requested_extras`), then,
        fullest first, each with a met requirement nothing chosen so far explains: pip
        records no requested extras, and one partly uninstalled keeps the rest of its
        wheels. A met requirement the base requirements or a chosen extra also list is no
        sign (``cuda-toolkit[all]`` shares every wheel of a venv that asked for ``[nvrtc]``;
        ``nvmath-python[cu12]`` with one wheel gone still explains what ``[cu13]`` shares
        with it), nor is one naming the distribution itself."""
        if name in self._extras:
            return self._extras[name]
        dist, dists = self.inv.distributions[name], self.inv.distributions
        if self._requested is None:
            self._requested = requested_extras(dists, self.env)
        chosen = set(self._requested.get(name, frozenset()))
        explained: set[str] = {
            normalize_name(r.name) for r, _ in applicable(dist, self.env, frozenset(chosen))
        }
        wants: dict[str, list[str]] = defaultdict(list)
        met: dict[str, set[str]] = defaultdict(set)
        for extra in extras_of(dist):
            for r, which in applicable(dist, self.env, frozenset({extra})):
                dep = normalize_name(r.name)
                if which == extra and dep != name:
                    wants[extra].append(dep)
                    if unmet(r, dists) is None:
                        met[extra].add(dep)
        for extra in sorted(met, key=lambda e: (-len(met[e]) / len(wants[e]), -len(met[e]), e)):
            if extra not in chosen and met[extra] - explained:
                chosen.add(extra)
                explained |= met[extra]
        self._extras[name] = frozenset(chosen)
        return self._extras[name]
