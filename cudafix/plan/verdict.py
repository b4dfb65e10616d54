"""Why a simulated plan is refused, and what it warns of: its reasons and warnings as values.

The planner (:mod:`cudafix.plan.planner`) simulates the change; this reads the simulated plan
and the facts and says which of its effects cudafix refuses (a lost need, a shared path
deleted, a path written through a symlink, a wheel that differs from what was checked) and
which it only warns of. Pure, like the planner: the CLI words every value.
"""

from __future__ import annotations

from collections.abc import Sequence

from cudafix.env.inventory import Inventory, is_bytecode
from cudafix.fetch.staged import StagedWheel
from cudafix.model import plan as P
from cudafix.model import reasons as R
from cudafix.model.names import DistName, EnvPath, normalize_name
from cudafix.plan.facts import Facts
from cudafix.plan.staging import wheel_differences


def unchecked(
    facts: Facts,
    reinstall: Sequence[P.Reinstall],
    installs: Sequence[tuple[P.Install, StagedWheel | None]],
) -> list[R.PlanWarning]:
    if facts.staging.fetched or not (reinstall or installs):
        return []
    pins = [f"{r.name}=={r.version}" for r in reinstall] + [
        f"{i.name}=={i.version}" for i, _ in installs
    ]
    return [R.Unfetched(subject=", ".join(pins), pins=pins)]


def warnings(
    shared: Sequence[P.SharedPath],
    options: P.Options,
    switches: Sequence[P.ProviderSwitch],
    refused: Sequence[P.RefusedPath],
) -> list[R.PlanWarning]:
    out: list[R.PlanWarning] = [
        R.ProviderSwitched(
            subject=s.consumer,
            distribution=s.consumer_distribution,
            need=s.need,
            before=s.before,
            after=s.after,
            paths=[s.before, s.after],
        )
        for s in switches
        if s.before != s.after  # same path, new bytes: an install's, refused on its own
    ]
    if refused:
        out.append(R.EntriesStripped(subject="RECORD", paths=[r.entry for r in refused]))
    if options.keep_shared:
        out += _kept_foreign(shared)
    return out


def _kept_foreign(shared: Sequence[P.SharedPath]) -> list[R.PlanWarning]:
    """Kept paths whose bytes no remaining owner's RECORD lists, one warning per holder and
    owners: a path whose bytes a remaining owner's RECORD matches (the wheels ship the same
    bytes there, a header both cuDNN builds have) holds nobody else's."""
    groups: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for s in shared:
        theirs = set(s.matching) or ({s.holder} if s.holder else set())
        if s.holder is not None and not theirs & set(s.remaining_owners):
            groups.setdefault((s.holder, tuple(s.remaining_owners)), []).append(s.path)
    return [
        R.KeptForeign(subject=holder, paths=paths, owners=list(owners))
        for (holder, owners), paths in groups.items()
    ]


def reasons(plan: P.Plan, facts: Facts, options: P.Options) -> list[R.Reason]:
    reasons: list[R.Reason] = [
        R.NeedLost(
            subject=lost.consumer,
            distribution=lost.consumer_distribution,
            need=lost.need,
            run_time_load=lost.run_time_load,
            paths=[lost.resolved_before],
        )
        for lost in plan.lost
    ]
    if plan.requirement_breaks and not options.allow_broken_requirements:
        reasons += [
            R.RequirementBroken(subject=b.requested_as, requirement=b.requirement, reason=b.reason)
            for b in plan.requirement_breaks
        ]
    reasons += [R.SelfDependency(subject=name) for name in plan.self_dependencies]
    reasons += _shared_deletions(plan)
    reasons += _wheel_reasons(plan, facts)
    reasons += _dist_info_reasons(plan, facts.inventory)
    reasons += _through_symlinks(plan, facts.inventory)
    reasons += [
        R.UnreadableRecord(subject=u.distribution, paths=[u.record], reason=u.reason)
        for u in facts.inventory.unreadable
    ]
    have = {n for n in facts.inventory.distributions if n not in {r.name for r in plan.remove}}
    reasons += [
        R.InstalledAlready(
            subject=i.name,
            installed=facts.inventory.distributions[DistName(i.name)].version,
            version=i.version,
        )
        for i in plan.install
        if i.name in have
    ]
    return reasons


def _shared_deletions(plan: P.Plan) -> list[R.Reason]:
    """Paths a remaining distribution's RECORD claims that the plan deletes for good.

    pip and uv delete every path of a RECORD, even one another distribution claims: that
    owner is left incomplete (``cv2/`` of opencv-contrib-python, ``nvidia/__init__.py`` of
    every other nvidia wheel). Bytecode is derived and comes back on import, so it is not
    counted; ``--keep-shared`` and ``--repair`` put the rest back.
    """
    groups: dict[tuple[str, ...], list[str]] = {}
    for s in plan.shared_paths:
        if s.fate == "deleted" and not is_bytecode(s.path):
            groups.setdefault(tuple(s.remaining_owners), []).append(s.path)
    return [
        R.SharedDeleted(subject=", ".join(owners), owners=list(owners), paths=paths)
        for owners, paths in groups.items()
    ]


def _through_symlinks(plan: P.Plan, inv: Inventory) -> list[R.Reason]:
    """Paths the plan writes or deletes through a symlinked directory, one line per symlink.

    The transaction never acts through a symlink (it could lead anywhere), so it would
    refuse such a plan when applied: the dry run must say so first.
    """
    named = {
        *plan.uninstalled_paths,
        *plan.rewritten_paths,
        *(p for i in plan.install for p in i.paths),
    }
    through: dict[str, list[str]] = {}
    for path in sorted(named):
        link = _symlinked_parent(inv, path)
        if link is not None:
            through.setdefault(link, []).append(path)
    return [R.ThroughSymlink(subject=link, paths=paths) for link, paths in through.items()]


def _symlinked_parent(inv: Inventory, path: str) -> str | None:
    parts = path.split("/")
    for i in range(1, len(parts)):
        st = inv.files.get(EnvPath("/".join(parts[:i])))
        if st is not None and st.kind == "symlink":
            return "/".join(parts[:i])
    return None


def _dist_info_reasons(plan: P.Plan, inv: Inventory) -> list[R.Reason]:
    """Distributions the backend cannot act on as planned, found before anything changes.

    A second dist-info of one name makes the installer pick either; a dist-info directory
    whose name differs from the one its RECORD lists (renamed, odd case) is left behind by
    an uninstall. Both would pass a dry run and fail the transaction.
    """
    acted = {DistName(r.name) for r in plan.remove} | {DistName(r.name) for r in plan.reinstall}
    out: list[R.Reason] = [
        R.DuplicateDistInfo(subject=u.name, paths=[u.path])
        for u in inv.unmanaged
        if u.kind == "duplicate" and normalize_name(u.name) in acted
    ]
    for name in sorted(acted):
        dist = inv.distributions.get(name)
        if dist is None:
            continue
        depth = dist.site_packages.count("/") + 1
        own = dist.dist_info.split("/")[depth]
        named = {
            parts[depth]
            for e in dist.files
            if len(parts := e.path.split("/")) > depth + 1 and parts[depth].endswith(".dist-info")
        }
        if named and own not in named:
            out.append(
                R.RenamedDistInfo(
                    subject=name, paths=[dist.dist_info], directory=own, listed=sorted(named)
                )
            )
    return out


def _wheel_reasons(plan: P.Plan, facts: Facts) -> list[R.Reason]:
    """Wheels that cannot be had, and reinstalls whose wheel is another build than installed."""
    staging = facts.staging
    where = staging.source or "the configured sources"
    out: list[R.Reason] = []
    pins = [(DistName(r.name), r.version) for r in plan.reinstall]
    pins += [(DistName(i.name), i.version) for i in plan.install]
    for pin in pins:
        if pin in staging.problems:
            out.append(
                R.NoWheel(
                    subject=pin[0],
                    version=pin[1],
                    source=where,
                    problem=staging.problems[pin],
                    recorded=staging.recorded.get(pin[0]),
                )
            )
    for name, version in pins[: len(plan.reinstall)]:
        wheel = staging.wheels.get((name, version))
        if wheel is None:
            continue
        diffs = wheel_differences(facts.inventory.distributions[name], wheel)
        if diffs:
            out.append(
                R.AnotherBuild(
                    subject=name,
                    version=version,
                    source=where,
                    paths=[d.partition(": ")[0] for d in diffs],
                    differences=diffs,
                    recorded=staging.recorded.get(name),
                )
            )
    return out
