"""The version a missing requirement is installed at: every requirer's pins and ranges at once.

uv resolves one requirement set: each installed distribution's requirement on a name (its
base ones and those of its requested extras) constrains the version together. Installing
one requirer's specifier alone (``nvidia-cublas``, unpinned) picks the newest release while
another (``cuda-toolkit[cublas]``: ``==12.9.2.10.*``) pins it, and the plan that follows
breaks the pin. So the specifier handed to uv, and printed in ``Next:``, is the
intersection of all of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from packaging.requirements import InvalidRequirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet

from cudafix.model.names import normalize_name
from cudafix.plan.facts import Facts
from cudafix.plan.requirements import MissingRequirement, applicable, parse_requirement


def joint(facts: Facts, spec: str) -> str:
    """``spec`` (``name[extras]specifier``, no marker) with every installed distribution's
    requirement on that name joined into its specifier; a URL requirement as it is."""
    try:
        req = parse_requirement(spec)
    except InvalidRequirement:
        return spec
    if req.url:
        return spec
    name = normalize_name(req.name)
    parts = [str(req.specifier)] if req.specifier else []
    for dist in facts.inventory.distributions.values():
        extras = facts.extras.get(dist.name, frozenset())
        for r, _ in applicable(dist, facts.marker_env, extras):
            if normalize_name(r.name) == name and not r.url and r.specifier:
                parts.append(str(r.specifier))
    try:
        combined = str(SpecifierSet(",".join(parts)))
    except InvalidSpecifier:
        return spec
    extras_part = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
    return f"{name}{extras_part}{combined}"


def jointly(facts: Facts, missing: Iterable[MissingRequirement]) -> tuple[MissingRequirement, ...]:
    """Each missing requirement with its specifier joined with every other requirer's."""
    return tuple(replace(m, spec=joint(facts, m.spec)) for m in missing)
