"""Which requirements apply for which extras, evaluated only for the extras a marker names,
equals evaluating every marker for every extra (random markers and extras, pure)."""

from __future__ import annotations

import random
from collections.abc import Mapping

import pytest
from packaging.markers import InvalidMarker, UndefinedComparison, UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement

from cudafix.env.inventory import Distribution
from cudafix.model.names import DistName, normalize_name
from cudafix.plan.literals import named_after
from cudafix.plan.requirements import _extra_literals, applicable
from tests.support.facts import bare
from tests.unit.test_requirements import LINUX_311

ATOMS = (
    'extra == "{x}"',
    'extra != "{x}"',
    "extra == '{x}'",
    '"{x}" == extra',
    '"{x}" in extra',
    'extra in "{x} other"',
    'extra not in "{x}"',
    'extra >= "{x}"',
    'python_version >= "3.9"',
    'python_version < "3.9"',
    'sys_platform == "linux"',
    'sys_platform == "win32"',
    'platform_release >= "{x}"',
    'platform_release ~= "{x}"',
    'extra ~= "{x}"',
)
EXTRAS = ("cuda", "CUDA", "cu_12", "cu-12", "cu.12", "test", "all", "1", "1.0", "1-0", "v1", "")
ERRORS = (InvalidRequirement, InvalidMarker, UndefinedComparison, UndefinedEnvironmentName)


def _marker(rng: random.Random, depth: int = 0) -> str:
    parts = []
    for i in range(rng.randint(1, 3)):
        if i:
            parts.append(rng.choice(("and", "or")))
        if depth < 2 and rng.random() < 0.25:
            parts.append(f"({_marker(rng, depth + 1)})")
        else:
            parts.append(rng.choice(ATOMS).format(x=rng.choice(EXTRAS)))
    return " ".join(parts)


def _requirement(rng: random.Random, i: int) -> str:
    if rng.random() < 0.15:
        return f"dep{i}>=1"
    return f"dep{i}>=1 ; {_marker(rng)}"


def _reference(
    requires: tuple[str, ...], env: Mapping[str, str], extras: frozenset[str]
) -> list[tuple[str, str]]:
    """Every marker evaluated for the base, then for each extra in order."""
    found = []
    for raw in requires:
        try:
            req = Requirement(raw)
            if req.marker is None or req.marker.evaluate({**env, "extra": ""}):
                found.append((str(req), ""))
                continue
            for e in sorted(extras):
                if req.marker.evaluate({**env, "extra": e}):
                    found.append((str(req), e))
                    break
        except ERRORS:
            continue
    return found


@pytest.mark.parametrize("seed", range(120))
def test_applicable_equals_evaluating_every_extra(seed: int) -> None:
    rng = random.Random(seed)
    requires = tuple(_requirement(rng, i) for i in range(12))
    dist = bare("app", "1", *requires)
    for _ in range(12):
        extras = frozenset(rng.sample(EXTRAS, rng.randint(0, 4)))
        got = [(str(r), e) for r, e in applicable(dist, LINUX_311, extras)]
        assert got == _reference(requires, LINUX_311, extras), (requires, extras)


def test_only_plain_extra_comparisons_narrow_the_extras() -> None:
    def literals(marker: str) -> frozenset[str] | None:
        return _extra_literals(f"dep ; {marker}")

    assert literals('extra == "Cu_12" and python_version >= "3.9"') == frozenset({"cu-12"})
    either = 'extra == "a" or (extra != "b" and sys_platform == "linux")'
    assert literals(either) == frozenset({"a", "b"})
    assert literals('python_version >= "3.9"') == frozenset()
    assert literals('"a" == extra') is None  # the literal on the left
    assert literals('"a" in extra') is None
    assert literals('extra == "1.0"') is None  # a version specifier reads it
    assert literals('extra == ""') is None  # the same as no extra at all


def _named_after_reference(dist: str, soname: str) -> bool:
    import re

    from cudafix.plan.literals import stem

    base = stem(soname).removesuffix(".so").removeprefix("lib").lower()
    noise = re.compile(r"^(nvidia|cu[0-9]+x?)$")
    words = [w for w in re.split(r"[-_.]+", normalize_name(dist)) if not noise.match(w)]
    return any(
        (len(w) >= 4 or len(words) == 1)
        and (base == w or base.startswith(w))
        and (i + 1 == len(words) or words[i + 1][:1] == base[len(w) : len(w) + 1])
        for i, w in enumerate(words)
    )


def test_named_after_equals_its_definition() -> None:
    dists = ("nvidia-cuda-runtime-cu12", "nvidia-cublas", "libarchive-c", "c", "nvidia-cudnn-cu13",
             "nvidia_cuda_nvrtc", "cuda-python", "nvidia-cu13", "Jax_CUDA12.plugin")  # fmt: skip
    sonames = ("libcudart.so.12", "libcublasLt.so.13", "libc.so.6", "libcuda.so.1",
               "libcudnn.so.9", "libnvrtc.so.12", "libcufft.so.*", "libjax.so", "x")  # fmt: skip
    for d in dists:
        for s in sonames:
            assert named_after(d, s) == _named_after_reference(d, s), (d, s)


def test_each_marker_is_evaluated_for_the_extras_it_names_only() -> None:
    """A distribution with 40 extras of 3 requirements each: asking every extra evaluates
    each marker for its own extra and the base, not for all 40."""
    from cudafix.plan import requirements

    extras = [f"feature{i}" for i in range(40)]
    requires = tuple(f'dep{i}-{j} ; extra == "{e}"' for i, e in enumerate(extras) for j in range(3))
    dist = bare("app", "1", *requires)
    before = requirements._marker_holds.cache_info().misses
    for e in extras:
        assert [r.name for r, _ in applicable(dist, LINUX_311, frozenset({e}))] == [
            f"dep{extras.index(e)}-{j}" for j in range(3)
        ]
    assert requirements._marker_holds.cache_info().misses - before == 2 * len(requires)


def _closure_reference(
    dists: Mapping[DistName, Distribution],
    roots: list[DistName],
    extras: Mapping[DistName, frozenset[str]],
) -> frozenset[DistName]:
    """Walked one distribution at a time, asking each for its requirements as it is reached."""
    seen: set[DistName] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen or name not in dists:
            continue
        seen.add(name)
        wanted = extras.get(name, frozenset())
        todo += [normalize_name(r.name) for r, _ in applicable(dists[name], LINUX_311, wanted)]
    return frozenset(seen)


@pytest.mark.parametrize("seed", range(30))
def test_closure_through_edges_read_once_equals_walking(seed: int) -> None:
    from cudafix.plan.requirements import requirement_closure

    rng = random.Random(seed)
    names = [f"d{i}" for i in range(12)]
    dists: dict[DistName, Distribution] = {}
    markers = ("", ' ; extra == "x"', ' ; extra == "y"', ' ; python_version < "3"')
    for n in names:
        reqs = []
        for _ in range(rng.randint(0, 4)):
            dep = rng.choice([*names, "absent"])
            marker = rng.choice(markers)
            reqs.append(f"{dep.upper() if rng.random() < 0.2 else dep}{marker}")
        dists[DistName(n)] = bare(n, "1", *reqs)
    extras = {DistName(n): frozenset(rng.sample(["x", "y"], rng.randint(0, 2))) for n in names}
    for _ in range(5):
        roots = [DistName(r) for r in rng.sample([*names, "absent"], rng.randint(1, 3))]
        got = requirement_closure(dists, roots, LINUX_311, extras)
        assert got == _closure_reference(dists, roots, extras)


@pytest.mark.parametrize("seed", range(30))
def test_unmet_index_finds_what_a_walk_in_order_finds(seed: int) -> None:
    from cudafix.plan.literals import UnmetIndex

    rng = random.Random(seed)
    words = ("nvidia", "cu12", "cuda", "runtime", "cudnn", "cublas", "c", "nvrtc", "lt", "cufft",
             "nccl", "cu", "jax", "plugin", "libarchive", "cusparse")  # fmt: skip
    sonames = ("libcudart.so.12", "libcublasLt.so.13", "libc.so.6", "libcuda.so.1", "libc.so",
               "libcudnn.so.9", "libnvrtc.so.12", "libcufft.so.11", "libnccl.so.2", "libcu.so",
               "libcusparseLt.so.0", "libjax.so", "libarchive.so.13")  # fmt: skip
    unmet = []
    for i in range(rng.randint(0, 25)):
        name = rng.choice(("-", "_", ".")).join(rng.sample(words, rng.randint(1, 3)))
        unmet.append((DistName(f"d{i}"), rng.choice(("", "x")), Requirement(f"{name}>=1")))
    index = UnmetIndex(unmet)
    names = [normalize_name(r.name) for _, _, r in unmet]
    for soname in sonames:
        went = set(rng.sample(names, min(len(names), rng.randint(0, 2))))
        walk = (
            u
            for u, n in zip(unmet, names, strict=True)
            if named_after(u[2].name, soname) or n in went
        )
        expected = next(walk, None)
        assert index.first(soname, went) == expected, (soname, went, unmet)
