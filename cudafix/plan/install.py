"""Installs: what uv would do for ``cudafix install SPEC...``, and the after-state it makes.

pip and uv write a wheel's files over whatever is there, including paths another installed
distribution claims; a cu13 wheel that ships cu12's paths silently swaps the build every
consumer loads. Planning an install therefore needs the environment *after* it, seen by the
same loader model as before: :func:`after_view` overlays the staged wheels' files and ELF
objects on the environment (minus what upgrades uninstall), and the planner diffs the
resolution. The rest of this module is pure findings on top of that: which claimed paths a
wheel overwrites (:func:`overwritten`), which consumers would load a file with another
distribution's bytes at the same path (:func:`same_path_switches`), mixed CUDA majors
introduced, and the refusal reasons. Asking uv what it would install is
:func:`cudafix.fetch.resolve.resolve`'s, so the plan is uv's plan; nothing here runs a process.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from cudafix.env.inventory import FileStat, Inventory
from cudafix.fetch.staged import StagedWheel
from cudafix.linker.edge import Edge, EdgeKey
from cudafix.linker.elfindex import EnvironmentView
from cudafix.linker.linkage import to_env_path
from cudafix.model import plan as P
from cudafix.model import reasons as R
from cudafix.model.names import DistName, EnvPath, cuda_major
from cudafix.plan.majors import major_of, versioned_as_cuda
from cudafix.plan.requirements import spec_name

# -- the after-state (pure) ----------------------------------------------------------------


def written(wheels: Iterable[StagedWheel]) -> frozenset[EnvPath]:
    """Every path the installs write."""
    return frozenset(p for w in wheels for p in w.files)


def after_view(
    view: EnvironmentView, gone: frozenset[EnvPath], wheels: Sequence[StagedWheel]
) -> EnvironmentView:
    """The loader's view after deleting ``gone`` and writing the staged wheels' files."""
    if not wheels:
        return view.without(gone)
    new = written(wheels)
    elf = {p: info for w in wheels for p, info in w.elf.items()}
    index = view.index
    objects = {**{p: i for p, i in index.objects.items() if p not in new}, **elf}
    expected = index.expected
    after = replace(
        index,
        objects=objects,
        problems={p: v for p, v in index.problems.items() if p not in new},
        foreign=frozenset(
            {p for p in index.foreign if p not in new}
            | {p for p, i in elf.items() if (i.elf_class, i.machine) != expected}
        ),
    )
    stub = FileStat(kind="file", size=0, mode=0o644, dev=0, ino=0, mtime_ns=0)
    files = {**view.files, **dict.fromkeys(new, stub)}
    return EnvironmentView(Path(view.prefix), after, files, gone, system=view.system)


def owners_after(
    inv: Inventory, wheels: Sequence[StagedWheel], removed: Iterable[DistName]
) -> dict[EnvPath, tuple[DistName, ...]]:
    """Who claims each written path after the installs (the writer first)."""
    gone = set(removed)
    out: dict[EnvPath, tuple[DistName, ...]] = {}
    for w in wheels:
        for p in w.files:
            rest = tuple(o for o in inv.owners.get(p, ()) if o not in gone and o != w.name)
            out[p] = (w.name, *rest)
    return out


def overwritten(
    inv: Inventory,
    wheels: Sequence[StagedWheel],
    removed: Iterable[DistName],
    hashes: Mapping[EnvPath, str | None],
) -> list[P.OverwrittenPath]:
    """Paths a remaining distribution claims that a wheel writes over, same bytes or not."""
    gone = set(removed)
    out = []
    for w in wheels:
        for path, sha in sorted(w.files.items()):
            if path not in inv.files or path.startswith(w.dist_info + "/"):
                continue
            owners: list[str] = [
                o for o in inv.owners.get(path, ()) if o not in gone and o != w.name
            ]
            if not owners:
                continue
            on_disk = hashes.get(path)
            same = sha is not None and on_disk is not None and sha == on_disk
            out.append(P.OverwrittenPath(path=path, owners=owners, by=w.name, same_bytes=same))
    return out


def same_path_switches(
    prefix: str,
    before: Mapping[EdgeKey, Edge],
    gone: frozenset[EnvPath],
    clobbers: Sequence[P.OverwrittenPath],
) -> list[tuple[Edge, P.OverwrittenPath]]:
    """Needs that keep resolving to the same path, whose bytes an install replaces.

    Consumers the install replaces too are left out: they are the new build themselves.
    """
    changed = {c.path: c for c in clobbers if not c.same_bytes}
    if not changed:
        return []  # (a removal replaces no bytes: no need to place every edge)
    out = []
    for edge in before.values():
        provider = to_env_path(prefix, edge.provider) if edge.provider else None
        requester = to_env_path(prefix, edge.requester)
        if provider in changed and requester not in gone and requester not in changed:
            out.append((edge, changed[provider]))
    return sorted(out, key=lambda pair: (pair[0].requester, pair[0].need))


# -- findings (pure) -----------------------------------------------------------------------


def install_reasons(plan: P.Plan) -> list[R.Reason]:
    """Why an install is refused: it overwrites a remaining distribution's files with other
    bytes, or a remaining consumer would load another distribution's build of a library."""
    if not plan.install:
        return []
    groups: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for c in plan.overwritten:
        if not c.same_bytes:
            groups.setdefault((c.by, tuple(c.owners)), []).append(c.path)
    reasons: list[R.Reason] = [
        R.Overwrite(subject=by, owners=list(owners), paths=paths)
        for (by, owners), paths in groups.items()
    ]
    written_paths = {p for i in plan.install for p in i.paths}
    reasons += [
        R.BuildSwitch(
            subject=s.consumer,
            distribution=s.consumer_distribution,
            need=s.need,
            before=s.before,
            after=s.after,
            before_owners=s.before_owners,
            after_owners=s.after_owners,
            paths=[s.after],
        )
        for s in plan.switches
        if s.after in written_paths and not set(s.before_owners) & set(s.after_owners)
    ]
    return reasons


def installing_majors(plan: P.Plan) -> dict[DistName, int]:
    """The CUDA major of each wheel the plan installs, read from what it is (its paths and
    version, :func:`~cudafix.plan.majors.major_of`), not from its name alone."""
    return {
        DistName(i.name): m
        for i in plan.install
        if (m := major_of(DistName(i.name), i.version, i.paths, ())) is not None
    }


def install_warnings(plan: P.Plan, majors: Mapping[DistName, int]) -> list[R.PlanWarning]:
    """What an install does that is worth knowing but does not refuse it. ``majors``: the
    CUDA major of each installed distribution (:mod:`cudafix.plan.majors`)."""
    if not plan.install:
        return []
    same: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for c in plan.overwritten:
        if c.same_bytes:
            same.setdefault((c.by, tuple(c.owners)), []).append(c.path)
    out: list[R.PlanWarning] = [
        R.SameBytes(subject=by, owners=list(owners), paths=paths)
        for (by, owners), paths in same.items()
    ]
    removed = {r.name for r in plan.remove}
    installing = installing_majors(plan)
    before = set(majors.values())
    staying = {m for n, m in majors.items() if n not in removed}
    added: dict[int, list[str]] = {}
    for i in plan.install:
        major = installing.get(DistName(i.name))
        if major is not None and before and major not in before:
            added.setdefault(major, []).append(i.name)
    out += [
        R.MixedMajors(
            subject=", ".join(names), major=major, names=names, present=sorted(staying or before)
        )
        for major, names in sorted(added.items())
    ]
    return out


def matching_builds(
    plan: P.Plan, specs: Sequence[str], majors: Mapping[DistName, int]
) -> list[tuple[str, ...]]:
    """Specs to try instead of a refused install: each spec whose install swaps a
    consumer's build for another CUDA major, asked for at the major the consumer loads
    today: a ``*-cuNN`` name renamed (unpinned), a component versioned like CUDA
    (``nvidia-cublas``) pinned to that major's releases. ``majors``: what each installed
    distribution is built for (:mod:`cudafix.plan.majors`)."""
    majors = {**majors, **installing_majors(plan)}
    loaded = {
        s.after_owners[0]: [m for o in s.before_owners if (m := majors.get(DistName(o)))]
        for s in plan.switches
        if s.after_owners
    }
    out: list[tuple[str, ...]] = []
    for major in sorted({m for ms in loaded.values() for m in ms}):
        changed = False
        new = []
        for spec in specs:
            name = spec_name(spec)
            have = majors.get(name) if name is not None else None
            if name in loaded and have is not None and have != major:
                if cuda_major(name) is not None:
                    new.append(re.sub(r"-cu\d+$", f"-cu{major}", name))
                elif versioned_as_cuda(name):
                    new.append(f"{name}=={major}.*")
                else:
                    new.append(spec)
                    continue
                changed = True
            else:
                new.append(spec)
        if changed:
            out.append(tuple(new))
    return out
