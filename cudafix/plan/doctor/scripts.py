"""Doctor's script findings: relocated ``#!`` lines, and scripts that cannot start.

A relocated script's ``#!`` line was rewritten for a moved environment; a broken one names
an interpreter that does not exist.

Pure functions of :class:`~cudafix.plan.facts.Facts` to typed findings.
"""

from __future__ import annotations

from collections.abc import Iterable

from cudafix.model.doctor import Finding, Scripts
from cudafix.model.names import DistName, EnvPath
from cudafix.plan.doctor.common import REPAIR, Commands
from cudafix.plan.facts import Facts

Interpreters = dict[DistName, list[tuple[EnvPath, str]]]
"""Per distribution, scripts whose bytes differ from RECORD, with the interpreter each names."""


def script_problems(facts: Facts) -> tuple[Interpreters, Interpreters]:
    """Scripts whose bytes differ from RECORD, split by their ``#!`` line: (relocated: the
    interpreter it names exists; broken: it does not). The RECORD hash covers the whole
    file, old shebang included, so a relocation cannot be told from an edit of the rest;
    a relocated script is information, a script that cannot start is a problem."""
    relocated: Interpreters = {}
    broken: Interpreters = {}
    for name, wrong in facts.record_mismatches.items():
        for path, _ in wrong:
            if (shebang := facts.shebangs.get(path)) is not None:
                (relocated if shebang.exists else broken).setdefault(name, []).append(
                    (path, shebang.interpreter)
                )
    return relocated, broken


def scripts(facts: Facts, cmd: Commands) -> Iterable[Finding]:
    """A relocated script each (information), then the broken ones per distribution:
    ``repair`` reinstalls it."""
    inv = facts.inventory
    relocated, broken = script_problems(facts)
    for name, found in sorted(relocated.items()):
        for path, interpreter in found:
            yield Finding(
                kind="relocated",
                severity="info",
                facts=Scripts(interpreters=[interpreter]),
                distribution=name,
                paths=[path],
            )
    for name, found in sorted(broken.items()):
        yield Finding(
            kind="bad-script",
            severity="warning",
            facts=Scripts(
                version=inv.distributions[name].version,
                interpreters=[interpreter for _, interpreter in found],
            ),
            distribution=name,
            paths=[path for path, _ in found],
            command=cmd.argv(*REPAIR),
        )
