"""Libraries that went between two readings of an environment, and what brings them back.

The last reading remembered which distribution and version provided each soname some
object needs (:mod:`cudafix.env.lastseen`). A soname that an object still needs (DT_NEEDED,
or a run-time load), that no file of the environment provides now, and whose remembered
distribution is not installed any more was taken by an uninstall cudafix did not run:
installing exactly that distribution and version brings it back. A remembered
distribution still installed at that version is missing files instead (``repair``
reinstalls it); one installed at another version was replaced on purpose, and is not
undone here.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import TypeVar

from cudafix.env.lastseen import Seen
from cudafix.model.doctor import Returning
from cudafix.model.names import Soname
from cudafix.plan.facts import Facts
from cudafix.plan.requirements import MissingRequirement, spec_name

T = TypeVar("T")


def gone_libraries(facts: Facts) -> dict[Soname, Seen]:
    """Needed sonames provided nowhere now, each with what provided it at the last reading."""
    if not facts.last_seen:
        return {}
    elf, dists = facts.elf, facts.inventory.distributions
    present = [p for p in elf.objects if p not in elf.foreign]
    provided = {elf.objects[p].soname or posixpath.basename(p) for p in present}
    needed = {n for p in present for n in elf.objects[p].needed}
    needed |= {n for loads in facts.runtime.sonames.values() for n in loads if "/" not in n}
    out: dict[Soname, Seen] = {}
    for soname in sorted(needed - provided):
        seen = facts.last_seen.get(soname, ())
        back = [s for s in seen if s.distribution not in dists]
        if back:
            out[soname] = back[0]
    return out


def pin(seen: Seen) -> str:
    """The exact requirement that reinstalls what provided a library."""
    return f"{seen.distribution}=={seen.version}"


def returning_installs(facts: Facts) -> dict[str, Returning]:
    """Exact pins that bring back every library gone since the last reading, with why."""
    out: dict[str, Returning] = {}
    for soname, seen in gone_libraries(facts).items():
        out.setdefault(pin(seen), Returning(need=soname, path=seen.path))
    return out


def without_returning(specs: Mapping[str, T], returning: Iterable[str]) -> dict[str, T]:
    """``specs`` less those naming a distribution a returning pin brings back exactly: a
    range (an extra's ``~=12.0``) would pick the newest release, not the one that went."""
    back = {spec_name(p) for p in returning}
    return {s: why for s, why in specs.items() if spec_name(s) not in back}


def exactly_returning(
    missing: Iterable[MissingRequirement], returning: Iterable[str]
) -> tuple[MissingRequirement, ...]:
    """Each missing requirement, asked for as the version that went where a returning pin
    names its distribution (``nvidia-rand-cu12==10.0`` for ``nvidia-rand-cu12>=10``)."""
    pins = {spec_name(p): p for p in returning}
    return tuple(replace(m, spec=pins.get(spec_name(m.spec)) or m.spec) for m in missing)
