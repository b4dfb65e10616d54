"""Is this the environment a saved plan was made for? Fingerprint check, and re-targeting.

A plan file travels: made with ``--dry-run --out plan.json`` on one node, applied later or on
another node. Paths in a plan are relative to the prefix, so the plan is re-targeted to the
new prefix; what must hold is what the plan assumed (:class:`~cudafix.model.plan.Precondition`):
the same distributions at the same versions, the same bytes at every shared path it touches,
the same RECORDs for the distributions it removes or reinstalls. Any difference refuses the
plan with the list (:class:`~cudafix.model.errors.StalePlan`, exit 3), once when the plan is read
and again, cheaply (:func:`quick_differences`), under the transaction lock.
"""

from __future__ import annotations

import functools
import hashlib
from bisect import bisect_right
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import groupby, islice
from pathlib import Path

from cudafix.env.distinfo import is_installer_file
from cudafix.env.inventory import Distribution, RecordEntry
from cudafix.model.errors import StalePlan
from cudafix.model.names import DistName, EnvPath
from cudafix.model.plan import Plan, Target
from cudafix.plan.facts import Facts


def record_digest(dist: Distribution) -> str:
    """sha256 over a distribution's RECORD rows (``path NUL sha256 NUL size``), sorted and
    joined by newlines, installer-written files left out."""
    digest = hashlib.sha256()
    rows, joiner = _sorted_rows(dist), b""
    while chunk := list(islice(rows, _ROWS_AT_ONCE)):
        digest.update(joiner + "\n".join(chunk).encode())
        joiner = b"\n"
    return digest.hexdigest()


def _sorted_rows(dist: Distribution) -> Iterator[str]:
    """The rows in sorted order, made as they are hashed: a RECORD of millions of rows is
    never a string per row at once. Their row numbers are sorted by path (the strings the
    inventory holds); a path ends at a NUL, which sorts before any character, so path order
    is row order, but between rows of one path, sorted as rows.

    A long RECORD is sorted a range of paths at a time (:func:`_ranges`): the row numbers
    of one range are integers held at once, not those of every row (36 bytes a row)."""
    paths = dist.paths
    for numbers in _ranges(paths):
        rows = [i for i in numbers if not is_installer_file(paths[i], dist.dist_info)]
        rows.sort(key=paths.__getitem__)
        for _path, same in groupby(rows, key=paths.__getitem__):
            made = [_row(dist.files[i]) for i in same]
            yield from sorted(made) if len(made) > 1 else made


_RANGE_ROWS = 1 << 16
"""About how many rows :func:`_ranges` puts in a range."""


def _ranges(paths: Sequence[str]) -> Iterator[Sequence[int]]:
    """Row numbers of ``paths`` by ranges of paths, the ranges in path order: every row of
    a path is in the same range, so sorting each range in turn sorts them all. The ranges
    are cut at paths sampled from the rows; each row's range is one byte of an array."""
    count = min(255, len(paths) // _RANGE_ROWS + 1)
    if count == 1:
        yield range(len(paths))
        return
    sample = sorted(set(paths[:: max(1, len(paths) // (count * 32))]))
    cuts = sorted({sample[len(sample) * k // count] for k in range(1, count)})
    which = bytes(map(functools.partial(bisect_right, cuts), paths))
    for n in range(len(cuts) + 1):
        rows, at = [], which.find(n)
        while at != -1:
            rows.append(at)
            at = which.find(n, at + 1)
        yield rows


def _row(e: RecordEntry) -> str:
    return f"{e.path}\0{e.sha256 or ''}\0{e.size if e.size is not None else ''}"


_ROWS_AT_ONCE = 4096
"""Rows of a RECORD hashed together."""


def assumed_paths(plan: Plan) -> list[EnvPath]:
    """Paths whose bytes ``plan`` assumes: hash them (:func:`cudafix.gather.with_hashes`)
    before :func:`check`."""
    return [EnvPath(p) for p in plan.preconditions.path_hashes]


def differences(plan: Plan, facts: Facts) -> list[str]:
    """Every way the environment differs from what ``plan`` assumed; empty when it matches."""
    have = {n: d.version for n, d in facts.inventory.distributions.items()}
    return [
        *_layout(plan, facts),
        *_distributions(plan, have),
        *_hashes(plan, lambda p: facts.path_hashes.get(p)),
        *_records(plan, facts),
    ]


def quick_differences(
    plan: Plan,
    versions: Mapping[DistName, str],
    hash_of: Callable[[EnvPath], str | None],
    records: Mapping[str, str | None],
) -> list[str]:
    """Versions, shared-path hashes and RECORD digests (``records``: name -> the digest of
    its installed RECORD, None when there is none) against what ``plan`` assumed.

    Cheap enough to always run under the transaction lock just before applying
    (:func:`cudafix.gather.live_differences` reads its inputs): it catches another run
    having changed the environment since planning.
    """
    changed = [
        f"{n}: its RECORD changed since the plan was made"
        for n, want in sorted(plan.preconditions.records.items())
        if records.get(n) != want
    ]
    return [*_distributions(plan, versions), *_hashes(plan, hash_of), *changed]


def _layout(plan: Plan, facts: Facts) -> list[str]:
    here = list(facts.inventory.site_packages)
    if here == plan.target.site_packages:
        return []
    planned = ", ".join(plan.target.site_packages)
    return [f"site-packages is {', '.join(here)} here; the plan's is {planned}"]


def _distributions(plan: Plan, have: Mapping[DistName, str]) -> list[str]:
    want = plan.preconditions.distributions
    out = [f"{n} {v} is not installed" for n, v in sorted(want.items()) if n not in have]
    out += [
        f"{n} {v} is installed; the plan did not expect it"
        for n, v in sorted(have.items())
        if n not in want
    ]
    out += [
        f"{n} is at {have[DistName(n)]}, the plan expects {v}"
        for n, v in sorted(want.items())
        if n in have and have[DistName(n)] != v
    ]
    return out


def _hashes(plan: Plan, hash_of: Callable[[EnvPath], str | None]) -> list[str]:
    out = []
    for path, want in sorted(plan.preconditions.path_hashes.items()):
        have = hash_of(EnvPath(path))
        if have != want:
            out.append(f"{path}: sha256 {_short(have)} here, the plan expects {_short(want)}")
    return out


def _records(plan: Plan, facts: Facts) -> list[str]:
    dists = facts.inventory.distributions
    return [
        f"{n}: its RECORD differs from the one planned for (another build of {n})"
        for n, want in sorted(plan.preconditions.records.items())
        if DistName(n) in dists and record_digest(dists[DistName(n)]) != want
    ]


def _short(digest: str | None) -> str:
    return digest[:12] if digest else "(missing)"


def retarget(plan: Plan, prefix: Path, python: Path | None) -> Plan:
    """The same plan aimed at ``prefix`` (paths are prefix-relative; only the target moves).

    site-packages stay the plan's: :func:`differences` refuses a layout that differs.
    """
    target = Target(
        prefix=str(prefix),
        python=str(python) if python else None,
        site_packages=list(plan.target.site_packages),
    )
    return plan if target == plan.target else plan.model_copy(update={"target": target})


def check(plan: Plan, facts: Facts) -> None:
    """Refuse a stale plan with every difference (exit 3); return when it still holds."""
    diffs = differences(plan, facts)
    if diffs:
        raise StalePlan(
            f"the plan does not fit {facts.inventory.prefix}: {len(diffs)} difference(s)",
            context=diffs[:25] + ([f"... and {len(diffs) - 25} more"] if len(diffs) > 25 else []),
            hint="plan again on this environment (cudafix apply SCRIPT --dry-run --out plan.json)",
        )
