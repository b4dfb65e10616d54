"""What ``pip check`` reports, computed over an inventory value (pure).

pip evaluates markers with ``extra == ""`` only, so a requirement needed only for an extra
is ignored, and neither pip nor uv records which extras were asked for. Here an extra is
*requested* when every requirement it adds is met (``jax-cuda12-plugin[with-cuda]`` on a
``pip install "jax[cuda12]"``), or when a requested requirement names it
(``jax-cuda12-plugin[with-cuda]`` in ``jax[cuda12]``); its requirements are then judged
like the base ones. Prereleases satisfy a specifier when they are what is installed.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from packaging.markers import InvalidMarker, UndefinedComparison, UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, Specifier
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from cudafix.model.names import DistName, normalize_name
from cudafix.model.plan import RequirementBreak


class Declared(Protocol):
    """A distribution as far as requirements go: installed, or staged to be installed."""

    @property
    def name(self) -> DistName: ...

    @property
    def version(self) -> str: ...

    @property
    def requires(self) -> tuple[str, ...]: ...


Extras = Mapping[DistName, frozenset[str]]
"""Requested extras per distribution."""

_EXTRA = re.compile(r"""\bextra\s*==\s*["']([^"']+)["']""")
_MARKER_ERRORS = (InvalidMarker, UndefinedComparison, UndefinedEnvironmentName)
_EQ = ("==", "!=")
_SPEC_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


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


@functools.lru_cache(maxsize=16384)
def spec_name(spec: str) -> DistName | None:
    """The distribution a specifier names (``nvidia-cufft`` of ``nvidia-cufft~=12.0``),
    without parsing the rest of it."""
    match = _SPEC_NAME.match(spec)
    return normalize_name(match.group(1)) if match else None


@functools.lru_cache(maxsize=16384)
def parse_requirement(raw: str) -> Requirement:
    """``Requirement(raw)``, parsed once per process: the same few thousand Requires-Dist
    strings are read for every extra of every distribution (parsing dominated doctor's
    requirement checks). Raises :class:`InvalidRequirement` like the constructor."""
    return Requirement(raw)


def _applicable(raw: str, marker_env: Mapping[str, str]) -> Requirement | None:
    """The parsed requirement when it applies here without an extra, else None."""
    try:
        req = parse_requirement(raw)
        return req if _holds_for(raw, req, _env_key(marker_env), frozenset()) == "" else None
    except (InvalidRequirement, *_MARKER_ERRORS):
        return None


def check_requirements(
    distributions: Mapping[DistName, Declared],
    marker_env: Mapping[str, str],
    extras: Extras | None = None,
) -> tuple[RequirementBreak, ...]:
    """Every Requires-Dist, of every distribution, that the set does not satisfy.

    The set may be an after-state (remaining plus staged installs): that is how a plan
    judges what it leaves behind, with ``extras`` the extras requested *before* (a removal
    that breaks an extra must not make it unrequested). None: those of ``distributions``.
    """
    wanted = requested_extras(distributions, marker_env) if extras is None else extras
    problems: list[RequirementBreak] = []
    for name in sorted(distributions):
        for raw in distributions[name].requires:
            problem = _unsatisfied(raw, distributions, marker_env, wanted.get(name, frozenset()))
            if problem is not None:
                reason, extra = problem
                problems.append(
                    RequirementBreak(distribution=name, requirement=raw, reason=reason, extra=extra)
                )
    return tuple(problems)


def requested_extras(
    distributions: Mapping[DistName, Declared], marker_env: Mapping[str, str]
) -> dict[DistName, frozenset[str]]:
    """The extras each distribution was installed with, as far as the set shows.

    An extra whose own requirements are all met was requested (pip and uv record none);
    so is one a requested requirement names (``dep[x]``), transitively. A requirement that
    names extras is met only when those extras are met too: ``etils[all]`` asks for
    ``etils[eapp]``, which a bare ``etils`` does not meet, so ``all`` (and through it every
    extra it names) is not taken as requested on a venv that merely holds etils.

    One exception keeps a partly removed extra in sight: an extra met by version alone
    (``jax[cuda12]`` once a wheel of ``jax-cuda12-plugin[with-cuda]`` is gone) is requested
    when it is the only reason some installed distribution is there (no base requirement
    names ``jax-cuda12-plugin``) and no fully met sibling extra explains it
    (``jax[cuda12-local]``).
    """
    met = _ExtrasMet(distributions, marker_env)
    based = frozenset(
        normalize_name(r.name)
        for d in distributions.values()
        for r, which in applicable(d, marker_env, frozenset())
        if which == ""
    )
    wanted = {
        name: _requested_own(name, distributions, marker_env, met, based) for name in distributions
    }
    todo = list(distributions)
    while todo:
        name = todo.pop()
        for req, _ in applicable(distributions[name], marker_env, frozenset(wanted[name])):
            dep = normalize_name(req.name)
            more = {normalize_name(e) for e in req.extras} - wanted.get(dep, set())
            if dep in wanted and more:
                wanted[dep] |= more
                todo.append(dep)
    return {n: frozenset(e) for n, e in wanted.items() if e}


def extras_of(dist: Declared) -> tuple[str, ...]:
    """The extras ``dist``'s requirement markers name (``extra == "with-cuda"``), normalised
    as PEP 685 says (markers compare them normalised too)."""
    found = (normalize_name(m) for raw in dist.requires for m in _EXTRA.findall(raw))
    return tuple(dict.fromkeys(found))


def extra_requirements(
    dist: Declared, extra: str, marker_env: Mapping[str, str]
) -> tuple[Requirement, ...]:
    """The requirements ``extra`` adds to ``dist``'s base ones."""
    return tuple(r for r, e in applicable(dist, marker_env, frozenset({extra})) if e == extra)


def applicable(
    dist: Declared, marker_env: Mapping[str, str], extras: frozenset[str]
) -> Iterable[tuple[Requirement, str]]:
    """Each parsable requirement whose marker holds for the base or one of ``extras``,
    with the extra it holds for (``""``: base)."""
    return _applicable_to(tuple(dist.requires), _env_key(marker_env), extras)


@functools.lru_cache(maxsize=4096)
def _applicable_to(
    requires: tuple[str, ...], env: tuple[tuple[str, str], ...], extras: frozenset[str]
) -> tuple[tuple[Requirement, str], ...]:
    """:func:`applicable`, answered once per question: requested-extras inference asks it
    again for every extra of every distribution (5.6k questions on a torch venv). Each
    requirement's marker is evaluated only for the extras it names (:func:`_extra_literals`)."""
    ordered = sorted(extras)
    keys = [canonicalize_name(e) for e in ordered]
    found = []
    for raw, req, base, named in _requirement_rows(requires, env):
        if base:
            found.append((req, ""))
            continue
        if named is not None and named.isdisjoint(keys):
            continue
        pairs = zip(ordered, keys, strict=True)
        asked = ordered if named is None else [e for e, k in pairs if k in named]
        try:
            which = next((e for e in asked if _marker_holds(raw, e, env)), None)
        except _MARKER_ERRORS:
            continue
        if which is not None:
            found.append((req, which))
    return tuple(found)


@functools.lru_cache(maxsize=1024)
def _requirement_rows(
    requires: tuple[str, ...], env: tuple[tuple[str, str], ...]
) -> tuple[tuple[str, Requirement, bool, frozenset[str] | None], ...]:
    """Each parsable requirement whose marker can be evaluated here: the text, the
    requirement, whether it holds without an extra, and the extras its marker names
    (:func:`_extra_literals`); read once per distribution, not once per extra asked of it."""
    rows = []
    for raw in requires:
        try:
            req = parse_requirement(raw)
            base = req.marker is None or _marker_holds(raw, "", env)
        except (InvalidRequirement, *_MARKER_ERRORS):
            continue
        rows.append((raw, req, base, None if base else _extra_literals(raw)))
    return tuple(rows)


def _holds_for(
    raw: str, req: Requirement, env: tuple[tuple[str, str], ...], extras: frozenset[str]
) -> str | None:
    """``""`` when the marker of ``req`` (parsed from ``raw``) holds without an extra, else
    the first of ``extras`` it holds for; None when it holds for none."""
    if req.marker is None:
        return ""
    if _marker_holds(raw, "", env):
        return ""
    named = _extra_literals(raw)
    return next(
        (
            e
            for e in sorted(extras)
            if (named is None or canonicalize_name(e) in named) and _marker_holds(raw, e, env)
        ),
        None,
    )


def _env_key(marker_env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """``marker_env`` as a hashable key for the memoised questions about it (built once per
    question asked of :func:`applicable`, not once per requirement)."""
    return tuple(sorted(marker_env.items()))


@functools.lru_cache(maxsize=16384)
def _extra_literals(raw: str) -> frozenset[str] | None:
    """The extras (normalised) the marker of requirement ``raw`` names, when it compares
    ``extra`` only as ``extra == "name"`` or ``extra != "name"`` with a name no version
    specifier reads: the marker then holds for any other extra exactly as it does for none
    (every such comparison comes out the same), so only these need evaluating. None when
    it compares ``extra`` otherwise (``in``, a version, a literal on the left): every extra
    is then evaluated."""
    marker = parse_requirement(raw).marker
    if marker is None:
        return frozenset()
    named: set[str] = set()
    todo: list[object] = [getattr(marker, "_markers", None)]
    while todo:
        item = todo.pop()
        if isinstance(item, list):
            todo += item
        elif isinstance(item, tuple) and len(item) == 3:
            lhs, op, rhs = item
            extra = [type(x).__name__ == "Variable" and str(x) == "extra" for x in (lhs, rhs)]
            if not any(extra):
                continue  # a comparison of another value, the same for every extra
            if extra != [True, False] or type(rhs).__name__ != "Value" or str(op) not in _EQ:
                return None
            literal = str(rhs)
            if not _stringly(literal) or not _stringly(canonicalize_name(literal)):
                return None
            named.add(canonicalize_name(literal))
        elif item not in ("and", "or"):
            return None
    return None if "" in named else frozenset(named)


def _stringly(value: str) -> bool:
    """Whether ``extra == value`` compares strings in every packaging release (some read
    the right-hand side as a version specifier when it parses as one)."""
    try:
        Specifier(f"=={value}")
    except InvalidSpecifier:
        return True
    return False


@functools.lru_cache(maxsize=65536)
def _marker_holds(raw: str, extra: str, env: tuple[tuple[str, str], ...]) -> bool:
    """Whether the marker of requirement ``raw`` holds in ``env`` with ``extra``, evaluated
    once per process: requested-extras inference asks the same few thousand questions again
    for every extra of every distribution (22k evaluations, 0.4 s, on a torch venv)."""
    marker = parse_requirement(raw).marker
    return marker is None or marker.evaluate({**dict(env), "extra": extra})


def _requested_own(
    name: DistName,
    distributions: Mapping[DistName, Declared],
    env: Mapping[str, str],
    met: _ExtrasMet,
    based: frozenset[DistName],
) -> set[str]:
    """``name``'s extras requested on their own evidence (before any other names them);
    ``based``: the distributions some base requirement names."""
    dist = distributions[name]
    chosen = {e for e in extras_of(dist) if met(name, e)}

    def only_for(extra: str) -> set[DistName]:
        named = {normalize_name(r.name) for r in extra_requirements(dist, extra, env)}
        return {d for d in named if d in distributions and d != name and d not in based}

    explained = {d for e in chosen for d in only_for(e)}
    return chosen | {
        extra
        for extra in extras_of(dist)
        if extra not in chosen
        and _all_met(dist, extra, distributions, env)
        and only_for(extra) - explained
    }


def _all_met(
    dist: Declared, extra: str, distributions: Mapping[DistName, Declared], env: Mapping[str, str]
) -> bool:
    """Every requirement the extra adds is met by version (the extras they name aside)."""
    reqs = extra_requirements(dist, extra, env)
    return bool(reqs) and all(unmet(r, distributions) is None for r in reqs)


class _ExtrasMet:
    """Whether every requirement an extra adds is met, the extras those requirements name
    included (memoised; an extra met only through a cycle back to itself counts as met)."""

    def __init__(self, distributions: Mapping[DistName, Declared], env: Mapping[str, str]):
        self._dists = distributions
        self._env = env
        self._memo: dict[tuple[DistName, str], bool] = {}

    def __call__(self, name: DistName, extra: str) -> bool:
        key = (name, extra)
        if key not in self._memo:
            self._memo[key] = True  # in progress: a cycle does not refute itself
            reqs = extra_requirements(self._dists[name], extra, self._env)
            self._memo[key] = bool(reqs) and all(self._met(r) for r in reqs)
        return self._memo[key]

    def _met(self, req: Requirement) -> bool:
        if unmet(req, self._dists) is not None:
            return False
        dep = normalize_name(req.name)
        declared = extras_of(self._dists[dep])
        named = (normalize_name(x) for x in req.extras)
        return all(self(dep, x) for x in named if x in declared)


def _unsatisfied(
    raw: str,
    distributions: Mapping[DistName, Declared],
    marker_env: Mapping[str, str],
    extras: frozenset[str] = frozenset(),
) -> tuple[str, str] | None:
    """(reason, extra) when ``raw`` applies and is not met; None when it is or does not apply."""
    try:
        req = parse_requirement(raw)
    except InvalidRequirement as e:
        return f"unparsable requirement: {e}", ""
    try:
        which = _holds_for(raw, req, _env_key(marker_env), extras)
    except _MARKER_ERRORS as e:
        return f"marker cannot be evaluated: {e}", ""
    if which is None:
        return None
    reason = unmet(req, distributions)
    return (reason, which) if reason is not None else None


def unmet(req: Requirement, distributions: Mapping[DistName, Declared]) -> str | None:
    """Why ``req`` (its marker aside) is not met by the set; None when it is."""
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
    extras: Extras,
) -> frozenset[DistName]:
    """``roots`` and every installed distribution their Requires-Dist reach, transitively,
    through the base requirements and those of each distribution's requested ``extras``
    (:func:`requested_extras`).

    What a consumer was built to load: its own distribution and what that one pulls in.
    ``jax[cuda12]``'s cu12 wheels are required only by ``jax-cuda12-plugin[with-cuda]``:
    without the extras they would look like nobody's leftovers.
    """
    return reached(requirement_edges(distributions, marker_env, extras), roots)


def requirement_edges(
    distributions: Mapping[DistName, Declared],
    marker_env: Mapping[str, str],
    extras: Extras,
) -> dict[DistName, tuple[DistName, ...]]:
    """Per distribution, the distributions its Requires-Dist name (markers applied), through
    the base requirements and those of its requested ``extras``: what every
    :func:`requirement_closure` walks, read once for many of them."""
    return {
        name: tuple(
            normalize_name(r.name)
            for r, _ in applicable(dist, marker_env, extras.get(name, frozenset()))
        )
        for name, dist in distributions.items()
    }


def reached(
    edges: Mapping[DistName, Iterable[DistName]], roots: Iterable[DistName]
) -> frozenset[DistName]:
    """``roots`` and everything ``edges`` lead to from them, transitively; a name without
    edges (not installed) is left out."""
    seen: set[DistName] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen or name not in edges:
            continue
        seen.add(name)
        todo.extend(edges[name])
    return frozenset(seen)
