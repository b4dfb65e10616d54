"""A plan made over hand-made facts holds on those facts, and names every way other facts
differ from what it assumed: versions, extra or missing distributions, shared bytes, RECORDs."""

from __future__ import annotations

import hashlib
import itertools
import random
from pathlib import Path

import pytest

from cudafix.env.inventory import Distribution, RecordEntry
from cudafix.model.errors import ExitCode, StalePlan
from cudafix.model.names import DistName, EnvPath
from cudafix.model.plan import Options
from cudafix.plan import preconditions
from cudafix.plan.facts import Facts
from cudafix.plan.planner import Request, build_plan
from cudafix.plan.preconditions import (
    check,
    differences,
    quick_differences,
    record_digest,
    retarget,
)
from tests.support.facts import Dist, env, facts

SHARED = "shared/lib.so"
PA = Dist("pa", "1.0", {"pa_mod.py": "pa-mod", SHARED: "a-bytes"})
PB = Dist("pb", "1.0", {"pb_mod.py": "pb-mod", SHARED: "b-bytes"})
LEAF = Dist("leaf", "2.0", {"leaf.py": "leaf"})


def _plan_remove_leaf(f: Facts):  # type: ignore[no-untyped-def]
    return build_plan(f, Request((DistName("leaf"),), ("leaf",), Options()))


def _plan_remove_pa(f: Facts):  # type: ignore[no-untyped-def]
    return build_plan(f, Request((DistName("pa"),), ("pa",), Options(keep_shared=True)))


def test_a_plan_holds_on_the_facts_it_was_made_on() -> None:
    f = facts([PA, PB, LEAF])
    plan = _plan_remove_leaf(f)
    assert differences(plan, f) == []
    check(plan, f)  # does not raise


@pytest.mark.parametrize(
    ("after", "names"),
    [
        ([PA, PB], ["leaf"]),
        ([PA, PB, LEAF, Dist("new", "1", {"new.py": "n"})], ["new"]),
        ([PA, PB, Dist("leaf", "3.0", {"leaf.py": "leaf"})], ["leaf"]),
        ([PA, LEAF, Dist("pb", "1.1", {"pb_mod.py": "pb-mod", SHARED: "b-bytes"})], ["pb"]),
    ],
    ids=["removed", "added", "upgraded", "other-version"],
)
def test_each_distribution_change_is_one_difference_naming_it(
    after: list[Dist], names: list[str]
) -> None:
    plan = _plan_remove_leaf(facts([PA, PB, LEAF]))
    diffs = differences(plan, facts(after))
    assert len(diffs) == len(names)
    assert all(d.startswith(n + " ") for d, n in zip(diffs, names, strict=True))


def test_shared_bytes_changed_since_planning_are_a_difference() -> None:
    before = facts([PA, PB])
    plan = _plan_remove_pa(before)
    assert env(SHARED) in plan.preconditions.path_hashes
    assert differences(plan, before) == []
    now = facts([PA, PB], disk={SHARED: "a-bytes"})
    (diff,) = differences(plan, now)
    assert diff.startswith(f"{env(SHARED)}: sha256 a-bytes here")
    gone = facts([PA, PB], disk={SHARED: None})
    assert "(missing)" in differences(plan, gone)[0]


def test_another_build_of_the_same_version_is_a_record_difference() -> None:
    plan = _plan_remove_pa(facts([PA, PB]))
    rebuilt = Dist("pa", "1.0", {"pa_mod.py": "other-bytes", SHARED: "a-bytes"})
    diffs = differences(plan, facts([rebuilt, PB], disk={SHARED: "b-bytes"}))
    assert diffs == ["pa: its RECORD differs from the one planned for (another build of pa)"]


def test_record_digest_ignores_installer_files_and_sees_every_row() -> None:
    base = facts([PA]).inventory.distributions[DistName("pa")]
    same = facts([Dist("pa", "1.0", {"pa_mod.py": "pa-mod", SHARED: "a-bytes"})])
    assert record_digest(base) == record_digest(same.inventory.distributions[DistName("pa")])
    info = f"pa-1.0.dist-info/{'INSTALLER'}"
    with_installer = facts(
        [Dist("pa", "1.0", {"pa_mod.py": "pa-mod", SHARED: "a-bytes", info: "uv"})]
    )
    assert record_digest(base) == record_digest(
        with_installer.inventory.distributions[DistName("pa")]
    )
    other = facts([Dist("pa", "1.0", {"pa_mod.py": "pa-mod"})])
    assert record_digest(base) != record_digest(other.inventory.distributions[DistName("pa")])


def test_quick_differences_read_versions_hashes_and_records_given() -> None:
    f = facts([PA, PB])
    plan = _plan_remove_pa(f)
    versions = {DistName("pa"): "1.0", DistName("pb"): "1.0"}
    records = dict(plan.preconditions.records)
    hashes = dict(plan.preconditions.path_hashes)
    assert quick_differences(plan, versions, hashes.get, records) == []
    records_changed = {n: None for n in records}
    diffs = quick_differences(plan, versions, hashes.get, records_changed)
    assert len(diffs) == len(records) and all("RECORD changed" in d for d in diffs)
    assert len(quick_differences(plan, {}, hashes.get, records)) == 2


def test_a_stale_plan_is_refused_with_every_difference_as_context() -> None:
    plan = _plan_remove_leaf(facts([PA, PB, LEAF]))
    with pytest.raises(StalePlan) as info:
        check(plan, facts([Dist("other", "1", {"o.py": "o"})]))
    assert info.value.exit_code == ExitCode.REFUSED
    assert len(info.value.context) == 4  # pa, pb, leaf missing; other unexpected


def test_retarget_moves_only_the_prefix() -> None:
    plan = _plan_remove_leaf(facts([LEAF]))
    moved = retarget(plan, Path("/elsewhere/venv"), Path("/elsewhere/venv/bin/python"))
    assert (moved.target.prefix, moved.target.python) == (
        "/elsewhere/venv",
        "/elsewhere/venv/bin/python",
    )
    assert moved.target.site_packages == plan.target.site_packages
    assert moved.remove == plan.remove
    assert (
        retarget(
            plan,
            Path(plan.target.prefix),
            None if plan.target.python is None else Path(plan.target.python),
        )
        is plan
    )


def test_record_digest_is_the_hash_of_the_sorted_rows_joined_by_newlines() -> None:
    """Made a few thousand rows at a time, in the order of the rows themselves: a path that
    is another's prefix, rows of one path (ordered by hash, then size), rows without a
    hash or a size, an installer file left out; more rows than one batch."""
    sp, info = "lib/python3.11/site-packages", "lib/python3.11/site-packages/d-1.0.dist-info"
    odd = [("a", "h2", 1), ("a", "h1", 2), ("a", "h1", None), ("ab", None, 3), ("a-b", "h", 4)]
    odd += [("a/b", "x", 5), ("a.b", None, None), ("d-1.0.dist-info/INSTALLER", "i", 1)]
    many = [(f"m/{i * 7919 % 10007:05}.py", f"h{i}", i) for i in range(9000)]
    rows = [(EnvPath(f"{sp}/{p}"), p, h, n) for p, h, n in [*odd, *many, *odd[:3]]]
    dist = Distribution(
        name=DistName("d"),
        version="1.0",
        dist_info=EnvPath(info),
        site_packages=EnvPath(sp),
        installer=None,
        requires=(),
        files=tuple(RecordEntry(*r) for r in rows),
        top_level=(),
    )
    spec = sorted(
        f"{p}\0{h or ''}\0{'' if n is None else n}"
        for p, _raw, h, n in rows
        if "INSTALLER" not in p
    )
    assert record_digest(dist) == hashlib.sha256("\n".join(spec).encode()).hexdigest()


@pytest.mark.parametrize("range_rows", [1, 3, 50, 1 << 16])
def test_record_digest_is_the_same_sorted_a_range_of_paths_at_a_time(
    range_rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows sorted a range at a time hash as rows sorted at once: every row of one path in
    one range, whatever the sample cut at (many rows of one path, prefixes, a path alone)."""
    monkeypatch.setattr(preconditions, "_RANGE_ROWS", range_rows)
    sp = "lib/python3.11/site-packages"
    rng = random.Random(range_rows)
    names = ["a", "a/b", "ab", "a-b", "z", *(f"m/{rng.randrange(400):03}.py" for _ in range(900))]
    names += ["same"] * 300
    hashes = ["h1", "h2", None]
    rows = [(EnvPath(f"{sp}/{p}"), p, rng.choice(hashes), rng.randrange(3)) for p in names]
    rng.shuffle(rows)
    dist = Distribution(
        name=DistName("d"),
        version="1.0",
        dist_info=EnvPath(f"{sp}/d-1.0.dist-info"),
        site_packages=EnvPath(sp),
        installer=None,
        requires=(),
        files=tuple(RecordEntry(*r) for r in rows),
        top_level=(),
    )
    spec = sorted(f"{p}\0{h or ''}\0{n}" for p, _raw, h, n in rows)
    assert record_digest(dist) == hashlib.sha256("\n".join(spec).encode()).hexdigest()
    parts = [[dist.paths[i] for i in part] for part in preconditions._ranges(dist.paths) if part]
    assert sorted(p for part in parts for p in part) == sorted(dist.paths)  # each row once
    assert all(max(a) < min(b) for a, b in itertools.pairwise(parts))  # ranges in path order
    if range_rows < len(rows):
        assert max(map(len, parts)) <= 300 + len(rows) // 10  # "same" and a tenth at most
