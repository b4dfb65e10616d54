"""Co-owned paths a removal deletes, and the reinstalls that write them back (``--repair``).

pip and uv delete every path a RECORD lists, even one another installed distribution
claims: the planner sets each such path apart here, with what becomes of it (deleted, kept
by ``--keep-shared``, or written back by a reinstall), and finds the reinstalls
``--repair`` plans for the remaining co-owners and for owners whose files hold another
build's bytes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from cudafix.env.inventory import Distribution, Inventory
from cudafix.model import plan as P
from cudafix.model import reasons as R
from cudafix.model.names import DistName, EnvPath


def holders_after(inv: Inventory, reinstall: Sequence[P.Reinstall]) -> dict[str, str]:
    """Paths several reinstalled distributions claim, and the last one to write them."""
    writers: dict[str, str] = {}
    claims: dict[str, int] = {}
    for r in reinstall:
        for e in inv.distributions[DistName(r.name)].files:
            writers[e.path] = r.name
            claims[e.path] = claims.get(e.path, 0) + 1
    return {p: writers[p] for p in sorted(writers) if claims[p] > 1}


Fate = Literal["deleted", "kept", "restored-by-reinstall"]


def shared_losses(
    inv: Inventory, deleted: frozenset[EnvPath], removed: set[DistName], fate: Fate = "deleted"
) -> list[P.SharedPath]:
    """Co-owned paths the backend deletes that a remaining distribution claims, each with
    ``fate`` (a reinstall that writes one back is set apart by the caller)."""
    return [
        P.SharedPath(
            path=s.path,
            owners=list(s.owners),
            holder=s.holder,
            remaining_owners=rest,
            fate=fate,
            matching=list(s.matching),
        )
        for s in inv.shared
        if s.path in deleted and (rest := [str(o) for o in s.owners if o not in removed])
    ]


def reinstall_reasons(
    inv: Inventory,
    deleted: frozenset[EnvPath],
    names: Sequence[DistName],
    asked: Mapping[DistName, R.ReinstallWhy],
    *,
    repair: bool,
) -> dict[DistName, R.ReinstallWhy]:
    """What a plan removing ``names`` reinstalls, with why: the reinstalls ``asked`` for,
    and with ``repair`` the remaining co-owners of deleted paths and remaining owners
    holding foreign bytes."""
    if not repair:
        return dict(asked)
    removed = set(names)
    remaining = {n: d for n, d in inv.distributions.items() if n not in removed}
    found = _repairs(inv, shared_losses(inv, deleted, removed), remaining)
    return {**asked, **found}


def _repairs(
    inv: Inventory, shared: Sequence[P.SharedPath], remaining: Mapping[DistName, Distribution]
) -> dict[DistName, R.ReinstallWhy]:
    """Remaining co-owners of deleted paths, and remaining owners holding foreign bytes."""
    deleted: dict[DistName, list[str]] = {}
    for s in shared:
        for owner in s.remaining_owners:
            deleted.setdefault(DistName(owner), []).append(s.path)
    why: dict[DistName, R.ReinstallWhy] = {
        name: R.CoOwnsDeleted(subject=name, paths=paths) for name, paths in deleted.items()
    }
    for claimed in inv.shared:
        for owner in claimed.owners:
            holder = claimed.holder
            if owner in remaining and holder is not None and owner not in claimed.matching:
                why.setdefault(
                    owner, R.HoldsForeign(subject=owner, paths=[claimed.path], holder=holder)
                )
    return why
