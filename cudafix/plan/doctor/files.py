"""Doctor's file findings: missing, claimed by several distributions, or another build's bytes.

And the distributions ``repair`` reinstalls for them.

Pure functions of :class:`~cudafix.plan.facts.Facts` to typed findings.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from cudafix.env.inventory import CoOwnedPath, Inventory
from cudafix.model import reasons as R
from cudafix.model.doctor import (
    Finding,
    ForeignBytes,
    Holding,
    MissingFiles,
    SharedPaths,
)
from cudafix.model.names import DistName
from cudafix.plan.doctor.common import REPAIR, Commands
from cudafix.plan.doctor.scripts import script_problems
from cudafix.plan.facts import Facts, Mismatches


def missing(inv: Inventory, cmd: Commands) -> Iterable[Finding]:
    """RECORD files not on disk, per distribution: ``repair`` reinstalls it."""
    for name, paths in sorted(inv.missing.items()):
        if not paths:
            continue
        yield Finding(
            kind="missing-files",
            severity="error",
            facts=MissingFiles(version=inv.distributions[name].version),
            distribution=name,
            paths=list(paths),
            command=cmd.argv(*REPAIR),
        )


def clobbered(
    inv: Inventory,
    loaded: frozenset[DistName],
    needed_by: Mapping[DistName, list[DistName]],
    cmd: Commands,
) -> Iterable[Finding]:
    """Shared paths, grouped by owners; a warning where bytes differ from an owner's RECORD.

    Paths whose bytes every owner's RECORD matches (the empty ``nvidia/__init__.py`` of
    every nvidia wheel) are information: uninstalling one owner still deletes them. Owners
    whose RECORD row has no hash (pip's rows for the ``.pyc`` it compiled) cannot disagree.
    The owner the command removes is one that what ``import`` loads does not require
    (``loaded``). When a framework requires each owner (torch cu13's cudnn-cu13 and jax's
    cudnn-cu12 share ``nvidia/cudnn/lib``) no removal is offered: it would break the other
    framework, and the choice is between frameworks (the mixed-cuda finding's).
    """
    groups: dict[tuple[DistName, ...], list[CoOwnedPath]] = defaultdict(list)
    for s in inv.shared:
        groups[s.owners].append(s)
    for owners, paths in sorted(groups.items()):
        differ = [s for s in paths if _disagrees(inv, s)]
        spare = [o for o in owners if o not in loaded]
        if not spare and not all(needed_by.get(o) for o in owners):
            spare = [owners[-1]]
        offer = bool(differ and spare)
        stuck = bool(differ and not spare)
        yield Finding(
            kind="clobbered" if differ else "shared",
            severity="warning" if differ else "info",
            facts=SharedPaths(
                holdings=[_holding(inv, s) for s in paths],
                differ=len(differ),
                removes=spare[-1] if offer else None,
                required_by={o: list(needed_by[o]) for o in owners} if stuck else {},
            ),
            paths=[s.path for s in paths],
            owners=list(owners),
            command=cmd.argv("remove", spare[-1], "--repair", "--dry-run") if offer else [],
        )


def _disagrees(inv: Inventory, s: CoOwnedPath) -> bool:
    """Present bytes that an owner with a recorded hash does not match."""
    if s.missing:
        return False
    hashed = [
        o
        for o in s.owners
        if (e := inv.distributions[o].record_by_path.get(s.path)) is not None and e.sha256
    ]
    return any(o not in s.matching for o in hashed)


def _holding(inv: Inventory, s: CoOwnedPath) -> Holding:
    if s.missing:
        return Holding(path=s.path, state="missing")
    if not _disagrees(inv, s) and not s.matching:
        return Holding(path=s.path, state="unhashed")
    if len(s.matching) > 1:
        return Holding(path=s.path, state="identical", owners=list(s.matching))
    if s.holder:
        return Holding(path=s.path, state="holder", owners=[s.holder])
    return Holding(path=s.path, state="unmatched")


def foreign_files(facts: Facts) -> Mismatches:
    """Single-owner files of ELF-providing distributions whose bytes are not their RECORD's.

    What a ``--keep-shared`` removal or an install over another build leaves: a file one
    distribution claims, holding another build's bytes. Only files changed since their
    RECORD was written were hashed (:func:`cudafix.env.inventory.changed_since_record`);
    a size that disagrees needs no hash. Scripts with a ``#!`` line are not counted: a
    relocated environment rewrites them (:func:`script_problems` judges them).
    """
    return {
        name: kept
        for name, wrong in facts.record_mismatches.items()
        if (kept := [(p, why) for p, why in wrong if p not in facts.shebangs])
    }


def foreign_bytes(inv: Inventory, foreign: Mismatches, cmd: Commands) -> Iterable[Finding]:
    """Own files holding another build's bytes, per distribution: ``repair`` reinstalls it."""
    for name, wrong in sorted(foreign.items()):
        yield Finding(
            kind="foreign-bytes",
            severity="warning",
            facts=ForeignBytes(
                version=inv.distributions[name].version,
                differences=[why for _, why in wrong],
            ),
            distribution=name,
            paths=[path for path, _ in wrong],
            command=cmd.argv(*REPAIR),
        )


def repair_candidates(
    facts: Facts, foreign: Mismatches | None = None
) -> dict[DistName, R.ReinstallWhy]:
    """Distributions to reinstall so that every missing RECORD file comes back, fewest first,
    and those whose own (unshared) files hold another build's bytes.

    A missing path claimed by several distributions needs only one of them reinstalled;
    reinstalling every claimant would clobber them in turn. Clobbered co-owners whose files
    are all present are not candidates: the fix there is removing one of them
    (``cudafix remove X --repair``). ``foreign``: :func:`foreign_files`, if already known.
    """
    inv = facts.inventory
    # The missing paths that the distributions chosen so far bring back, of those several
    # claim: a path only one claims can be covered by no other choice, so none is kept.
    covered: set[str] = set()
    chosen: dict[DistName, R.ReinstallWhy] = {}
    by_need = sorted(inv.missing.items(), key=lambda item: (-len(item[1]), item[0]))
    for name, paths in by_need:
        if any(p not in covered for p in paths):
            chosen[name] = R.MissingFiles(subject=name, count=len(paths))
            covered.update(p for p in paths if len(inv.owners.get(p, ())) > 1)
    for name, wrong in (foreign_files(facts) if foreign is None else foreign).items():
        chosen.setdefault(name, R.ForeignOwnFiles(subject=name, count=len(wrong)))
    for name, scripts in script_problems(facts)[1].items():
        chosen.setdefault(name, R.StaleScripts(subject=name, count=len(scripts)))
    return dict(sorted(chosen.items()))
