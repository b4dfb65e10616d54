"""Doctor's findings on what cudafix cannot act on: odd RECORDs, unloadable files, egg-info.

RECORD entries pointing outside the environment, RECORDs that cannot be read exactly,
files no loader here can load, and installs without a RECORD.

Pure functions of :class:`~cudafix.plan.facts.Facts` to typed findings.
"""

from __future__ import annotations

from collections.abc import Iterable

from cudafix.env.inventory import Inventory
from cudafix.model.doctor import (
    Finding,
    ForeignElf,
    UnloadableElf,
    Unmanaged,
    UnreadableRecord,
    UnsafeRecord,
)
from cudafix.model.names import normalize_name
from cudafix.plan.facts import Facts


def unsafe(inv: Inventory) -> Iterable[Finding]:
    """RECORD entries that point outside the environment: cudafix will not act on them."""
    for u in inv.unsafe:
        yield Finding(
            kind="unsafe-record",
            severity="warning",
            facts=UnsafeRecord(entry=u.raw, problem=u.reason),
            distribution=u.distribution,
        )


def unreadable(inv: Inventory) -> Iterable[Finding]:
    """RECORDs installers would read differently: every plan is refused until fixed."""
    for u in inv.unreadable:
        yield Finding(
            kind="unreadable-record",
            severity="error",
            facts=UnreadableRecord(problem=u.reason),
            distribution=u.distribution,
            paths=[u.record],
        )


def bad_elf(facts: Facts) -> Iterable[Finding]:
    """Files named like libraries that are no ELF object, then objects of another machine."""
    for path, problem in sorted(facts.elf.problems.items()):
        yield Finding(
            kind="bad-elf",
            severity="info",
            facts=UnloadableElf(path=path, problem=problem.reason, detail=problem.detail),
        )
    elf_class, machine = facts.elf.expected
    for path in sorted(facts.elf.foreign):
        info = facts.elf.objects[path]
        yield Finding(
            kind="bad-elf",
            severity="info",
            facts=ForeignElf(
                path=path,
                machine=info.machine,
                elf_class=info.elf_class,
                expected_machine=machine,
                expected_class=elf_class,
            ),
        )


def unmanaged(inv: Inventory) -> Iterable[Finding]:
    """Installs cudafix does not plan for (``egg-info``, a dist-info without RECORD)."""
    for u in inv.unmanaged:
        yield Finding(
            kind="unmanaged",
            severity="info",
            facts=Unmanaged(name=normalize_name(u.name), path=u.path, install=u.kind),
        )
