"""Run-time loads: what a framework's objects load while they run, as data with its source.

JAX's CUDA plugin, TensorFlow and CuPy list no CUDA library in DT_NEEDED: they dlopen() them
by soname through their own RPATH/RUNPATH, or load them by full path before importing the
module that needs them. ``cudafix/data/runtime.toml`` says which, per framework object, and
where each row was read. :func:`bind` turns the rows into per-object edges of one environment,
which the loader walks like DT_NEEDED (sonames through the object's search path) or as
by-path preloads, so a removal that orphans one is seen like a lost DT_NEEDED.
"""

from __future__ import annotations

import fnmatch
import functools
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from cudafix.model.errors import InputError
from cudafix.model.names import DistName, EnvPath, Soname, normalize_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

_REQUESTED = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?:\[(?P<extra>[A-Za-z0-9._-]+)\])?")

TABLE_VERSION = 1
"""The ``version`` of ``runtime.toml`` this code reads."""
RUNTIME_TABLE_VARIABLE = "CUDAFIX_RUNTIME_TABLE"
"""Names a file read instead of the shipped table (:func:`cudafix.gather.runtime_table`)."""


@dataclass(frozen=True)
class RuntimeLoad:
    """One row: what ``objects`` of ``framework`` load at run time, and where that was read."""

    framework: DistName
    """The distribution that owns ``objects``."""
    provider: DistName
    """The distribution whose Requires-Dist brings the libraries (often ``framework``)."""
    extra: str
    """The extra of ``provider`` that lists them; ``""``: its base requirements."""
    objects: tuple[str, ...]
    """Globs relative to site-packages."""
    sonames: tuple[Soname, ...] = ()
    """dlopen()ed by soname: found through the loading object's RPATH/RUNPATH."""
    paths: tuple[str, ...] = ()
    """Loaded by full path (relative to site-packages) before the object loads; where the
    file is gone, by its name from the object (the loader's ``preload`` fallback)."""
    source: str = ""
    optional: bool = False
    """The framework imports ``objects`` inside a try/except and runs without them: their
    unmet needs are information, not a broken framework (cupy's cuTENSOR and NCCL)."""

    @property
    def requested_as(self) -> str:
        """``jax-cuda12-plugin[with-cuda]``: how the user asked for these libraries."""
        return f"{self.provider}[{self.extra}]" if self.extra else self.provider


@dataclass(frozen=True)
class RuntimeTable:
    """Every row of the shipped table and of the user's ``--dlopen-table`` files."""

    rows: tuple[RuntimeLoad, ...] = ()

    @classmethod
    def default(cls) -> RuntimeTable:
        """``cudafix/data/runtime.toml`` (read once per process)."""
        return _default_table()

    @classmethod
    def load(cls, path: Path, option: str = "--dlopen-table") -> RuntimeTable:
        """The ``[[load]]`` rows of a ``--dlopen-table`` file (none is fine); ``option``: how
        the user named the file, for the error."""
        try:
            with path.open("rb") as fh:
                data = tomllib.load(fh)
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise InputError(f"{option} {path}: not a readable TOML file: {exc}") from exc
        try:
            return cls.from_data(data)
        except ValueError as exc:
            raise InputError(f"{option} {path}: {exc}") from exc

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> RuntimeTable:
        """Rows from parsed TOML; ``ValueError`` names the first bad row."""
        version = data.get("version", TABLE_VERSION)
        if version != TABLE_VERSION:
            raise ValueError(
                f"runtime table version {version!r}, this cudafix reads {TABLE_VERSION}"
            )
        rows = data.get("load", [])
        if not isinstance(rows, list):
            raise ValueError("[[load]] must be an array of tables")
        return cls(tuple(_row(i, raw) for i, raw in enumerate(rows)))

    def merged(self, other: RuntimeTable) -> RuntimeTable:
        return RuntimeTable(self.rows + other.rows)


def _strings(raw: Mapping[str, Any], key: str, index: int) -> tuple[str, ...]:
    value = raw.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"[[load]] row {index + 1}: {key} must be a list of non-empty strings")
    return tuple(value)


def _row(index: int, raw: object) -> RuntimeLoad:
    if not isinstance(raw, dict):
        raise ValueError(f"[[load]] row {index + 1} is not a table")
    framework, requested = raw.get("framework"), raw.get("requested", raw.get("framework"))
    match = _REQUESTED.fullmatch(requested) if isinstance(requested, str) else None
    if not isinstance(framework, str) or not framework or match is None:
        raise ValueError(
            f'[[load]] row {index + 1}: needs framework = "dist" and requested = "dist[extra]"'
        )
    paths = _strings(raw, "paths", index)
    optional = raw.get("optional", False)
    if not isinstance(optional, bool):
        raise ValueError(f"[[load]] row {index + 1}: optional must be true or false")
    if any(p.startswith("/") or ".." in p.split("/") for p in paths):
        raise ValueError(f"[[load]] row {index + 1}: paths must stay inside site-packages")
    return RuntimeLoad(
        framework=normalize_name(framework),
        provider=normalize_name(match.group("name")),
        extra=normalize_name(match.group("extra") or ""),
        objects=_strings(raw, "objects", index),
        sonames=tuple(Soname(s) for s in _strings(raw, "sonames", index)),
        paths=paths,
        source=str(raw.get("source", "")),
        optional=optional,
    )


@functools.lru_cache(maxsize=1)
def _default_table() -> RuntimeTable:
    text = resources.files("cudafix").joinpath("data/runtime.toml").read_text()
    return RuntimeTable.from_data(tomllib.loads(text))


@dataclass(frozen=True)
class BoundLoads:
    """The table applied to one environment: per loading object (absolute path), its loads."""

    sonames: Mapping[str, tuple[Soname, ...]] = field(default_factory=dict)
    """Object -> sonames it dlopen()s through its own search path."""
    paths: Mapping[str, tuple[Soname, ...]] = field(default_factory=dict)
    """Object -> absolute paths loaded before it (in the same process)."""
    rows: Mapping[tuple[str, str], RuntimeLoad] = field(default_factory=dict)
    """(object, soname or absolute path) -> the row that says so: the evidence."""
    optional: Mapping[str, RuntimeLoad] = field(default_factory=dict)
    """Objects the framework may fail to load and run on without (the row that says so)."""
    alternatives: Mapping[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)
    """(object, need) -> the other needs any one of which does instead (``libcufft.so.12``
    or ``libcufft.so.11``, tried in turn; :mod:`cudafix.plan.literals`)."""

    unrooted: frozenset[str] = frozenset()
    """Objects whose only loads are sonames inferred from their literals: loaded when
    something loads them (or judged on their own), never a load chain's start."""
    inferred: frozenset[str] = frozenset()
    """Objects whose loads are inferred from literals, no row: they load on demand, so the
    chains they start judge nothing (:func:`cudafix.linker.linkage.judge`)."""

    def row(self, requester: str, need: str) -> RuntimeLoad | None:
        return self.rows.get((requester, need))

    def source(self, obj: str) -> str:
        """Where the first row that names ``obj`` was read."""
        return next((r.source for (o, _), r in self.rows.items() if o == obj), "")

    @property
    def objects(self) -> frozenset[str]:
        return frozenset(self.sonames) | frozenset(self.paths)

    @property
    def roots(self) -> frozenset[str]:
        """The objects known to be loaded: where run-time load chains start."""
        return self.objects - self.unrooted

    def merged(self, inferred: BoundLoads) -> BoundLoads:
        """These loads, then ``inferred``'s for the objects these do not bind: a row is the
        truth about an object it names."""
        mine = self.objects

        def new(loads: Mapping[str, tuple[Soname, ...]]) -> dict[str, tuple[Soname, ...]]:
            return {k: v for k, v in loads.items() if k not in mine}

        return BoundLoads(
            {**self.sonames, **new(inferred.sonames)},
            {**self.paths, **new(inferred.paths)},
            {**self.rows, **{k: r for k, r in inferred.rows.items() if k[0] not in mine}},
            {**inferred.optional, **self.optional},
            {
                **self.alternatives,
                **{k: a for k, a in inferred.alternatives.items() if k[0] not in mine},
            },
            self.unrooted | (inferred.unrooted - mine),
            self.inferred | (inferred.inferred - mine),
        )

    def satisfied_otherwise(self, requester: str, need: str, found: Callable[[str], bool]) -> bool:
        """Whether an alternative of ``need`` for ``requester`` is ``found`` (a provider)."""
        return any(found(other) for other in self.alternatives.get((requester, need), ()))


def bind(
    table: RuntimeTable,
    prefix: str,
    site_packages: Iterable[str],
    objects: Iterable[EnvPath],
    owners: Mapping[EnvPath, tuple[DistName, ...]],
) -> BoundLoads:
    """Match every row against the environment's ELF objects (pure).

    ``objects`` are EnvPaths; rows' globs and paths are relative to a site-packages dir, so
    each is tried under each of ``site_packages``. A row binds only objects its framework
    owns (``owners``: the RECORD index), or that no RECORD claims: ``cupy-cuda13x`` ships
    the same ``cupy/cuda/cufft*.so`` names as ``cupy-cuda12x`` but loads other files.
    """
    sites = tuple(site_packages)
    sonames: dict[str, tuple[Soname, ...]] = {}
    paths: dict[str, tuple[Soname, ...]] = {}
    rows: dict[tuple[str, str], RuntimeLoad] = {}
    optional: dict[str, RuntimeLoad] = {}
    for obj in sorted(objects):
        site = next((s for s in sites if obj.startswith(s + "/")), None)
        if site is None:
            continue
        rel = obj[len(site) + 1 :]
        absolute = f"{prefix}/{obj}"
        claimed = owners.get(obj, ())
        for row in table.rows:
            if claimed and row.framework not in claimed:
                continue
            if not any(fnmatch.fnmatchcase(rel, g) for g in row.objects):
                continue
            if row.optional:
                optional.setdefault(absolute, row)
            full = tuple(Soname(f"{prefix}/{site}/{p}") for p in row.paths)
            sonames[absolute] = _union(sonames.get(absolute, ()), row.sonames)
            paths[absolute] = _union(paths.get(absolute, ()), full)
            for need in (*row.sonames, *full):
                rows.setdefault((absolute, need), row)
    return BoundLoads(
        {k: v for k, v in sonames.items() if v},
        {k: v for k, v in paths.items() if v},
        rows,
        optional,
    )


def _union(have: tuple[Soname, ...], more: Iterable[Soname]) -> tuple[Soname, ...]:
    return have + tuple(m for m in more if m not in have)
