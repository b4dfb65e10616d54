"""What ``pip check`` reports, computed over an inventory value (pure).

Markers are evaluated with ``extra == ""``, as pip does, so a requirement needed only for
an extra is ignored; prereleases satisfy a specifier when they are what is installed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from packaging.markers import InvalidMarker, UndefinedComparison, UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from cudafix.model.names import DistName, normalize_name


class Declared(Protocol):
    """A distribution as far as requirements go: installed, or staged to be installed."""

    @property
    def name(self) -> DistName: ...

    @property
    def version(self) -> str: ...

    @property
    def requires(self) -> tuple[str, ...]: ...


@dataclass(frozen=True)
class RequirementProblem:
    """One unsatisfied Requires-Dist of an installed distribution."""

    distribution: DistName
    requirement: str
    """The Requires-Dist value, verbatim."""
    reason: str


@dataclass(frozen=True)
class MissingRequirement:
    """A Requires-Dist naming a distribution that is not installed at all."""

    distribution: DistName
    """Who requires it."""
    requirement: str
    """The Requires-Dist value, verbatim."""
    name: DistName
    spec: str
    """What to install: the requirement without its marker (``nvidia-cudnn-cu13==9.24.0.43``)."""


def missing_requirements(
    distributions: Mapping[DistName, Declared],
    marker_env: Mapping[str, str],
) -> tuple[MissingRequirement, ...]:
    """Every requirement (markers applied) whose distribution is absent: what installing at
    the version asked for repairs, as opposed to a version mismatch, which needs a choice."""
    out: list[MissingRequirement] = []
    for name in sorted(distributions):
        for raw in distributions[name].requires:
            req = _applicable(raw, marker_env)
            if req is None or normalize_name(req.name) in distributions:
                continue
            extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
            wanted = normalize_name(req.name)
            spec = f"{wanted}{extras}{req.specifier}" if not req.url else f"{wanted} @ {req.url}"
            out.append(MissingRequirement(name, raw, wanted, spec))
    return tuple(out)


def _applicable(raw: str, marker_env: Mapping[str, str]) -> Requirement | None:
    """The parsed requirement when it applies here (no extra), else None."""
    try:
        req = Requirement(raw)
        if req.marker is not None and not req.marker.evaluate({**marker_env, "extra": ""}):
            return None
    except (InvalidRequirement, InvalidMarker, UndefinedComparison, UndefinedEnvironmentName):
        return None
    return req


def check_requirements(
    distributions: Mapping[DistName, Declared],
    marker_env: Mapping[str, str],
) -> tuple[RequirementProblem, ...]:
    """Every Requires-Dist, of every distribution, that the set does not satisfy.

    The set may be an after-state (remaining plus staged installs): that is how a plan
    judges what it leaves behind.
    """
    problems: list[RequirementProblem] = []
    for name in sorted(distributions):
        for raw in distributions[name].requires:
            reason = _unsatisfied(raw, distributions, marker_env)
            if reason is not None:
                problems.append(RequirementProblem(name, raw, reason))
    return tuple(problems)


def _unsatisfied(
    raw: str, distributions: Mapping[DistName, Declared], marker_env: Mapping[str, str]
) -> str | None:
    try:
        req = Requirement(raw)
    except InvalidRequirement as e:
        return f"unparsable requirement: {e}"
    if req.marker is not None:
        try:
            if not req.marker.evaluate({**marker_env, "extra": ""}):
                return None
        except (InvalidMarker, UndefinedComparison, UndefinedEnvironmentName) as e:
            return f"marker cannot be evaluated: {e}"
    dep = distributions.get(normalize_name(req.name))
    if dep is None:
        return f"{normalize_name(req.name)} is not installed"
    return _version_mismatch(req, dep)


def _version_mismatch(req: Requirement, dep: Declared) -> str | None:
    if not req.specifier:
        return None
    try:
        version = Version(dep.version)
    except InvalidVersion:
        return f"{dep.name} {dep.version} is not a valid version"
    if req.specifier.contains(version, prereleases=True):
        return None
    return f"{dep.name} {dep.version} is installed, {req.specifier} is required"


def requirement_closure(
    distributions: Mapping[DistName, Declared],
    roots: Iterable[DistName],
    marker_env: Mapping[str, str],
) -> frozenset[DistName]:
    """``roots`` and every installed distribution their Requires-Dist reach, transitively.

    What a consumer was built to load: its own distribution and what that one pulls in.
    """
    seen: set[DistName] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen or name not in distributions:
            continue
        seen.add(name)
        for raw in distributions[name].requires:
            req = _applicable(raw, marker_env)
            if req is not None:
                todo.append(normalize_name(req.name))
    return frozenset(seen)
