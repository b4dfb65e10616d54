"""A frozen view of one environment: its distributions, their RECORDs, who owns which path.

The value and the queries over it. :mod:`cudafix.env.reading` builds it once, up front
(``read_inventory``); everything after works on the value.
"""

from __future__ import annotations

import posixpath
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property, partial
from itertools import repeat
from pathlib import Path
from typing import NamedTuple, overload

from cudafix.env.memo.treecache import (
    FileStat as FileStat,  # re-exported: the inventory's files are these
)
from cudafix.model.names import DistName, EnvPath


class RecordEntry(NamedTuple):
    """One line of a RECORD file, with its path made relative to the environment prefix.

    A named tuple: a warm run rebuilds one per RECORD row from the cache.
    """

    path: EnvPath
    raw: str
    """The path exactly as written in RECORD (relative to its site-packages directory)."""
    sha256: str | None
    """urlsafe-base64, unpadded, as RECORD writes it."""
    size: int | None


_entry: Callable[[tuple[EnvPath, str, str | None, int | None]], RecordEntry] = partial(
    tuple.__new__, RecordEntry
)
"""A RecordEntry of its four fields as one tuple (``RecordEntry._make``, without a call in
Python)."""


KEPT_ROWS = 16_384
"""A RECORD of at most this many rows keeps its entries once made: the passes a reading
makes over them cost more than they take (torch's RECORD has about 15,000 rows); a longer
one makes them on each pass, so that memory stays a few hundred bytes a row."""


SHA_CHARS = 43
"""Characters of a sha256 digest as RECORD writes it (urlsafe base64, unpadded)."""
NO_SHA = "*" * SHA_CHARS
"""A row's place in the hash column when it has no sha256 (``*`` is no base64 character)."""


class RecordFiles(Sequence[RecordEntry]):
    """A distribution's RECORD entries kept as columns, made into :class:`RecordEntry` values
    when they are looked at (and kept then only for a RECORD of :data:`KEPT_ROWS` rows or
    fewer).

    A RECORD may list millions of rows: each row costs its path (the very string the
    ownership index is keyed by), its hash as :data:`SHA_CHARS` characters of one string
    and its size as 8 bytes of an array, not a tuple and three objects. A row's raw path is
    its path less ``site/``, except where ``raws`` (by row number) says otherwise
    (``../../../bin/tool``); its hash and size are ``odd``'s (by row number) where the
    columns cannot hold them (a hash of another length, a size past 64 bits).
    """

    __slots__ = ("_cut", "_made", "_odd", "_paths", "_raws", "_shas", "_sizes")

    def __init__(
        self,
        site: str,
        paths: Sequence[EnvPath],
        shas: str,
        sizes: Sequence[int],
        raws: Mapping[int, str],
        odd: Mapping[int, tuple[str | None, int | None]],
    ) -> None:
        self._cut = len(site) + 1
        self._paths = paths
        self._shas = shas
        """Row ``i``'s hash is ``shas[i * SHA_CHARS :][:SHA_CHARS]`` (:data:`NO_SHA`: none)."""
        self._sizes = sizes
        """Row ``i``'s size, or -1 for none."""
        self._raws = raws
        self._odd = odd
        self._made: tuple[RecordEntry, ...] | None = None

    def __len__(self) -> int:
        return len(self._paths)

    @overload
    def __getitem__(self, i: int) -> RecordEntry: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[RecordEntry, ...]: ...
    def __getitem__(self, i: int | slice) -> RecordEntry | tuple[RecordEntry, ...]:
        if isinstance(i, slice):
            return tuple(self)[i]
        if i < 0:
            i += len(self._paths)
        path = self._paths[i]
        raw = self._raws.get(i) or path[self._cut :]
        if i in self._odd:
            return RecordEntry(path, raw, *self._odd[i])
        sha = self._shas[i * SHA_CHARS : (i + 1) * SHA_CHARS]
        size = self._sizes[i]
        return RecordEntry(path, raw, None if sha == NO_SHA else sha, None if size < 0 else size)

    @property
    def paths(self) -> Sequence[EnvPath]:
        """Every row's path, in RECORD's order, with no entry made: what most readers need."""
        return self._paths

    def __iter__(self) -> Iterator[RecordEntry]:
        if self._made is not None:
            return iter(self._made)
        paths, n = self._paths, len(self._paths)
        if self._raws:
            raw: Iterator[str] = self._iter_raws()
        else:  # the common case, made in C: the raw path is the path less site/
            raw = map(str.__getitem__, paths, repeat(slice(self._cut, None)))
        cuts = map(
            slice,
            range(0, n * SHA_CHARS, SHA_CHARS),
            range(SHA_CHARS, (n + 1) * SHA_CHARS, SHA_CHARS),
        )
        shas = (None if h == NO_SHA else h for h in map(self._shas.__getitem__, cuts))
        sizes = (None if size < 0 else size for size in self._sizes)
        made: Iterator[RecordEntry] = map(_entry, zip(paths, raw, shas, sizes, strict=True))
        if self._odd:
            made = self._with_odd(made)
        if n > KEPT_ROWS:
            return made
        self._made = tuple(made)
        return iter(self._made)

    def _iter_raws(self) -> Iterator[str]:
        cut, raws = self._cut, self._raws
        for i, path in enumerate(self._paths):
            yield raws.get(i) or path[cut:]

    def _with_odd(self, made: Iterator[RecordEntry]) -> Iterator[RecordEntry]:
        odd = self._odd
        for i, e in enumerate(made):
            yield e if i not in odd else e._replace(sha256=odd[i][0], size=odd[i][1])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RecordFiles | tuple):
            return tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"RecordFiles({tuple(self)!r})"


@dataclass(frozen=True)
class UnsafeEntry:
    """A RECORD entry that points outside the environment: flagged, never acted on."""

    distribution: DistName
    raw: str
    reason: str


@dataclass(frozen=True)
class RecordIssue:
    """A RECORD row of one distribution that could not be fully parsed."""

    distribution: DistName
    line: int
    row: str
    reason: str


@dataclass(frozen=True)
class UnreadableRecord:
    """A RECORD that cannot be read exactly: installers would disagree on its rows."""

    distribution: DistName
    record: EnvPath
    reason: str


@dataclass(frozen=True)
class Distribution:
    """One installed ``*.dist-info``."""

    name: DistName
    version: str
    dist_info: EnvPath
    site_packages: EnvPath
    installer: str | None
    requires: tuple[str, ...]
    """Requires-Dist values, verbatim."""
    files: Sequence[RecordEntry]
    """RECORD's entries in RECORD's order (:class:`RecordFiles` when read from disk)."""
    top_level: tuple[str, ...]
    """Importable top-level names (top_level.txt, or derived from RECORD)."""

    @property
    def paths(self) -> Sequence[EnvPath]:
        """RECORD's paths in RECORD's order; from disk (:class:`RecordFiles`), the column
        itself: a pass over a million rows that reads only paths makes no entry per row."""
        files = self.files
        return files.paths if isinstance(files, RecordFiles) else [e.path for e in files]

    @cached_property
    def record_by_path(self) -> Mapping[EnvPath, RecordEntry]:
        """RECORD entries by path, for hash lookups (the last row wins, as in RECORD)."""
        return {e.path: e for e in self.files}


@dataclass(frozen=True)
class Unmanaged:
    """An install cudafix will not plan for: ``*.egg-info`` or a dist-info without RECORD."""

    path: EnvPath
    name: str
    kind: str
    """``egg-info``, ``no-record``, ``symlink`` (a symlinked dist-info) or ``duplicate``
    (a second dist-info of a name already read; the first in sorted order is managed)."""


@dataclass(frozen=True)
class CoOwnedPath:
    """A path two or more installed distributions claim, and whose bytes it holds.

    A fact about the environment as it is, found for every such path; the plan's
    :class:`~cudafix.model.plan.SharedPath` is a decision about one of them a removal
    deletes (who still claims it, and what becomes of it).
    """

    path: EnvPath
    owners: tuple[DistName, ...]
    holder: DistName | None
    """The owner whose RECORD hash the bytes match; None when missing or nobody's."""
    missing: bool
    matching: tuple[DistName, ...] = ()
    """Every owner whose RECORD hash the bytes match (more than one when they agree)."""


@dataclass(frozen=True)
class Inventory:
    """Everything cudafix knows about an environment, read once."""

    prefix: Path
    python: Path | None
    site_packages: tuple[EnvPath, ...]
    distributions: Mapping[DistName, Distribution]
    unmanaged: tuple[Unmanaged, ...]
    unsafe: tuple[UnsafeEntry, ...]
    files: Mapping[EnvPath, FileStat]
    """Every non-directory path under the prefix (``.cudafix/`` excluded)."""
    owners: Mapping[EnvPath, tuple[DistName, ...]]
    """Ownership index: path -> distributions whose RECORD claims it."""
    shared: tuple[CoOwnedPath, ...]
    missing: Mapping[DistName, tuple[EnvPath, ...]]
    """RECORD paths that do not exist on disk, per distribution."""
    record_issues: tuple[RecordIssue, ...] = ()
    """RECORD rows with a bad column count, hash or size (their paths are still owned)."""
    unreadable: tuple[UnreadableRecord, ...] = ()
    """RECORDs that cannot be read exactly: what their distributions own is unknown, so no
    plan in this environment can be trusted until they are fixed."""

    def distribution_paths(self, name: DistName) -> tuple[EnvPath, ...]:
        """Every path the backend deletes when uninstalling ``name``.

        Safe RECORD paths, whatever else sits in the dist-info directory, and the
        ``__pycache__`` bytecode of RECORD'ed ``.py`` files (pip and uv remove those too).
        """
        return tuple(sorted(set(self.iter_distribution_paths(name))))

    def iter_distribution_paths(self, name: DistName) -> Iterator[EnvPath]:
        """:meth:`distribution_paths` one at a time, unsorted, some more than once: for a
        caller that keeps only some of them (those on disk)."""
        dist = self.distributions[name]
        paths = dist.paths
        yield from paths
        yield from self._under(dist.dist_info + "/")
        for path in paths:
            if path.endswith(".py"):
                yield from self._bytecode_of(path)

    @cached_property
    def _sorted_files(self) -> list[EnvPath]:
        """:attr:`files`' paths sorted: the paths under a directory are a run of it."""
        return sorted(self.files)

    def _under(self, start: str) -> list[EnvPath]:
        """The paths of :attr:`files` that start with ``start``, sorted (one bisection, not a
        scan of every file for each distribution)."""
        paths = self._sorted_files
        i = j = bisect_left(paths, start)
        while j < len(paths) and paths[j].startswith(start):
            j += 1
        return paths[i:j]

    def _bytecode_of(self, source: str) -> Iterator[EnvPath]:
        """The cache files of ``source`` (those whose :func:`pyc_source` it is): in its
        directory's ``__pycache__``, named after its module and a dot. The paths of
        :attr:`files` are EnvPaths, as the walk makes them (relative, no empty component)."""
        directory, _, name = source.rpartition("/")
        cache = f"{directory}/__pycache__/" if directory else "__pycache__/"
        return (p for p in self._under(f"{cache}{name[:-3]}.") if pyc_source(p) == source)


def changed_since_record(inv: Inventory, names: Iterable[DistName]) -> list[EnvPath]:
    """Files of ``names`` whose inode changed after their RECORD was written: the ones worth
    hashing to learn whether another install overwrote them.

    An installer writes RECORD last, so its own files' modification times are no newer than
    it; a later install over them is. The inode change time is not used: a copy (``cp -a``,
    a Docker layer, a restore) or a hard link sets every ctime anew, and reading gigabytes
    because of that is the cost of a first run on a copy (an overwrite with the same size and
    an older mtime goes unseen here, as a copy's new ctime would be indistinguishable from it).
    Sizes that already disagree with RECORD, and bytecode, need no hash.
    """
    out: list[EnvPath] = []
    for name in names:
        dist = inv.distributions[name]
        record = inv.files.get(EnvPath(f"{dist.dist_info}/RECORD"))
        if record is None:
            continue
        for e in dist.files:
            st = inv.files.get(e.path)
            if st is None or st.kind != "file" or not e.sha256 or is_bytecode(e.path):
                continue
            if (e.size is None or e.size == st.size) and st.mtime_ns > record.mtime_ns:
                out.append(e.path)
    return out


def is_bytecode(path: str) -> bool:
    """Bytecode, derived data that compileall or an import writes again: a ``.pyc`` file, a
    ``__pycache__`` directory, or anything in one (``__pycache__`` matched as a whole path
    component). ``path`` is an EnvPath or a bare name from a directory listing."""
    return path.endswith(".pyc") or ("__pycache__" in path and "/__pycache__/" in f"/{path}/")


def pyc_source(path: str) -> str | None:
    """The source a PEP 3147 cache file was compiled from (``pkg/__pycache__/mod.cpython-311
    .opt-1.pyc`` -> ``pkg/mod.py``); None for any other path. Narrower than
    :func:`is_bytecode` on purpose: a sourceless ``mod.pyc``, the ``__pycache__`` directory
    and anything deeper in it are bytecode, but no ``.py`` names them nor recompiles them."""
    if not path.endswith(".pyc") or "__pycache__/" not in path:
        return None  # cheap string tests first: callers visit every file of an environment
    if "//" not in path and not path.startswith("/"):  # no slashes for posixpath to fold
        head, _, name = path.rpartition("/")
        parent, _, last = head.rpartition("/")
        if last != "__pycache__":
            return None
        stem = name.split(".", 1)[0] + ".py"
        return f"{parent}/{stem}" if parent else stem
    head, name = posixpath.split(path)
    if posixpath.basename(head) != "__pycache__":
        return None
    return posixpath.join(posixpath.dirname(head), name.split(".", 1)[0] + ".py")
