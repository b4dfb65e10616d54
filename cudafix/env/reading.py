"""Reading an environment into an Inventory, once: its files, every dist-info and RECORD.

The reading side only lstat()s, reads small metadata files and hashes shared files; it
never writes and never follows a symlinked directory.
"""

from __future__ import annotations

import functools
import io
import os
import posixpath
import stat
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cudafix.env.distinfo import CoreMetadata, name_and_version, parse_metadata
from cudafix.env.hashing import HashCache
from cudafix.env.inventory import (
    NO_SHA,
    SHA_CHARS,
    Distribution,
    Inventory,
    RecordFiles,
    RecordIssue,
    Unmanaged,
    UnreadableRecord,
    UnsafeEntry,
)
from cudafix.env.memo.treecache import (
    DIST_INFO_FILES,
    FileStat,
    TreeCache,
    racy,
    stat_key,
    symlink_fingerprint,
)
from cudafix.env.owners import Hasher, _missing, _ownership, _shared_paths
from cudafix.env.record import (
    NAMES_A_DIRECTORY,
    RecordProblem,
    Refusal,
    resolve_record_path,
    scan_record,
)
from cudafix.env.statedir import TOOLS_STATE
from cudafix.model.errors import InputError, TargetError
from cudafix.model.names import (
    DIST_INFO_SUFFIX,
    DistName,
    EnvPath,
    normalize_name,
    split_dist_info_name,
)


class SymlinkGuard:
    """Answers "does a parent directory of this EnvPath resolve out of the prefix?".

    Reads the filesystem as ``realpath`` does, but memoises the real path of every
    directory on the way: RECORDs list thousands of files in a few thousand directories,
    and each directory then costs one ``lstat`` (a ``realpath`` of each costs one per
    component: 16k on a torch venv).
    """

    def __init__(self, prefix: Path) -> None:
        self.prefix = prefix
        self._real_prefix = os.path.realpath(prefix)
        self._reals: dict[str, str] = {"": self._real_prefix}
        self._memo: dict[str, bool] = {}

    def escapes(self, path: EnvPath) -> bool:
        """True when the directory holding ``path`` is (through symlinks) outside the prefix."""
        parent = posixpath.dirname(path)
        if parent not in self._memo:
            self._memo[parent] = not _real_inside(self._real_prefix, self._real(parent))
        return self._memo[parent]

    def _real(self, directory: str) -> str:
        """``realpath(prefix / directory)``: the real path of its parent and its own name,
        resolved by ``realpath`` only where that name is a symlink (or odd)."""
        known = self._reals.get(directory)
        if known is not None:
            return known
        head, name = posixpath.split(directory)
        candidate = posixpath.join(self._real(head), name)
        real = candidate
        if name in ("", ".", ".."):
            real = os.path.realpath(self.prefix / directory)
        else:
            try:
                if stat.S_ISLNK(os.lstat(candidate).st_mode):
                    real = os.path.realpath(candidate)
            except OSError:
                pass  # not there: realpath keeps the name as it is
        self._reals[directory] = real
        return real


def _real_inside(real_prefix: str, real: str) -> bool:
    return real == real_prefix or real.startswith(real_prefix.rstrip("/") + "/")


def read_inventory(
    prefix: Path,
    site_packages: Sequence[EnvPath],
    python: Path | None,
    *,
    hasher: Hasher | None = None,
    cache: TreeCache | None = None,
) -> Inventory:
    """Read the environment at ``prefix`` once: files, dist-infos, ownership, shared holders.

    ``cache`` (loaded by the caller, saved by it after the run) lets unchanged directories
    and dist-infos be reused; the answer is the same with or without it. Raises InputError
    for an unreadable RECORD or METADATA and TargetError when the prefix or a
    site-packages directory is unusable.
    """
    prefix = Path(os.path.normpath(prefix.absolute()))
    if not prefix.is_dir():
        raise TargetError(f"{prefix}: no such environment directory")
    sites = canonical_site_packages(prefix, site_packages)
    tree = cache if cache is not None else TreeCache()
    files = walk_files(prefix, tree)
    read = _read_distributions(prefix, sites, files, tree)
    owners = _ownership(read.distributions.values())
    missing = _missing(owners, _refuse_directory_rows(prefix, read, files, owners, tree.listed()))
    shared = sorted(p for p, o in owners.items() if len(o) > 1)  # one pass of the index
    tree.watch(shared)  # a shared path's holder can change
    inv = Inventory(
        prefix=prefix,
        python=python,
        site_packages=sites,
        distributions=read.distributions,
        unmanaged=tuple(read.unmanaged),
        unsafe=tuple(read.unsafe),
        files=files,
        owners=owners,
        shared=(),
        missing={n: missing[n] for n in read.distributions if n in missing},
        record_issues=tuple(read.issues),
        unreadable=tuple(read.unreadable),
    )
    return replace(inv, shared=_shared_paths(inv, shared, hasher or HashCache(prefix)))


def canonical_site_packages(prefix: Path, site_packages: Sequence[EnvPath]) -> tuple[EnvPath, ...]:
    """Existing site-packages dirs, as symlink-free EnvPaths, deduplicated (``lib64 -> lib``)."""
    real_prefix = os.path.realpath(prefix)
    out: list[EnvPath] = []
    for sp in site_packages:
        full = prefix / sp
        if not full.is_dir():
            continue
        real = os.path.realpath(full)
        if not _real_inside(real_prefix, real):
            raise TargetError(f"{full}: site-packages resolves outside the environment ({real})")
        rel = EnvPath(Path(real).relative_to(real_prefix).as_posix())
        if rel not in out:
            out.append(rel)
    return tuple(out)


def walk_files(prefix: Path, cache: TreeCache | None = None) -> dict[EnvPath, FileStat]:
    """lstat every non-directory under ``prefix``, never descending into symlinked dirs.

    With ``cache``, unchanged directories are not listed again (:mod:`cudafix.env.memo.treecache`).
    """
    return (cache if cache is not None else TreeCache()).walk(prefix)


@dataclass
class _Read:
    """Accumulator used only while reading the dist-infos."""

    distributions: dict[DistName, Distribution] = field(default_factory=dict)
    unmanaged: list[Unmanaged] = field(default_factory=list)
    unsafe: list[UnsafeEntry] = field(default_factory=list)
    issues: list[RecordIssue] = field(default_factory=list)
    unreadable: list[UnreadableRecord] = field(default_factory=list)


def _read_distributions(
    prefix: Path, sites: Sequence[EnvPath], files: Mapping[EnvPath, FileStat], tree: TreeCache
) -> _Read:
    read = _Read()
    guard = SymlinkGuard(prefix)
    links = symlink_fingerprint(prefix, files)
    for site in sites:
        for name, is_dir in _listdir(prefix / site):
            info = EnvPath(f"{site}/{name}")
            if name.endswith(".egg-info"):
                stem = name[: -len(".egg-info")].partition("-")[0]
                read.unmanaged.append(Unmanaged(info, stem, "egg-info"))
            elif name.endswith(".dist-info") and not is_dir:
                read.unmanaged.append(Unmanaged(info, name[: -len(".dist-info")], "symlink"))
            elif name.endswith(".dist-info"):
                stats = [files.get(EnvPath(f"{info}/{f}")) for f in DIST_INFO_FILES]
                key = None if any(map(racy, stats)) else [site, [*map(stat_key, stats)], links]
                parse = functools.partial(_parse_one, prefix, site, info, guard)
                parsed = tree.distribution(key, info, parse)
                _add_one(info, parsed, read)
    return read


def read_distribution(
    prefix: Path, site: EnvPath, info: EnvPath, *, requires: bool = True
) -> Distribution | None:
    """One dist-info read exactly as :func:`read_inventory` reads it (None: no RECORD);
    without ``requires``, its Requires-Dist may be left unread (what its RECORD says needs
    none of them, and reading them costs the email parser)."""
    read = _Read()
    parsed = _parse_one(prefix, site, info, SymlinkGuard(prefix), requires=requires)
    _add_one(info, parsed, read)
    _refuse_directory_rows(prefix, read, {}, _ownership(read.distributions.values()), set())
    return next(iter(read.distributions.values()), None)


def find_dist_info(
    prefix: Path, sites: Sequence[str], name: str, version: str | None = None
) -> EnvPath | None:
    """The ``<name>-<version>.dist-info`` of ``name`` (any version when None), by directory name.

    The one lookup of an installed dist-info on disk: normalised name, exact version, sites in
    order and names sorted within each; an unreadable site is skipped. None when absent.
    """
    wanted = normalize_name(name)
    for site in sites:
        try:
            listing = sorted(p.name for p in (prefix / site).iterdir())
        except OSError:
            continue
        for entry in listing:
            split = split_dist_info_name(entry) if entry.endswith(DIST_INFO_SUFFIX) else None
            if split and normalize_name(split[0]) == wanted and version in (None, split[1]):
                return EnvPath(f"{site}/{entry}")
    return None


def _refuse_directory_rows(
    prefix: Path,
    read: _Read,
    files: Mapping[EnvPath, FileStat],
    owners: dict[EnvPath, tuple[DistName, ...]],
    listed: Set[str],
) -> list[EnvPath]:
    """Move rows naming a directory on disk (``nvidia/cudnn,,``) from the files to the unsafe
    entries, and their paths out of ``owners`` (the ownership index): uv deletes such a row's
    whole tree. Decided on the disk as it is now, never cached with the dist-info: a file's
    path may become a directory behind cudafix's back. The walk (its ``files``, and the
    directories it ``listed``) settles most paths without a system call: a RECORD of a
    million rows whose files are gone asks no million lstats. Returns the paths nothing is
    at, sorted, and as the index's own strings: :func:`_missing` needs no other copy of
    them."""
    base = f"{prefix}/"  # str, not Path: this runs once per RECORD path the walk did not see
    absent: list[EnvPath] = []
    dirs: set[EnvPath] = set()
    for path in owners:
        if path in files:
            continue
        if path in listed:
            dirs.add(path)
            continue
        parent = path.rpartition("/")[0]
        if parent in listed and (parent or path not in TOOLS_STATE):
            absent.append(path)
            continue
        try:
            mode = os.lstat(base + path).st_mode
        except OSError:
            absent.append(path)
            continue
        if stat.S_ISDIR(mode):
            dirs.add(path)
    for name, dist in list(read.distributions.items()) if dirs else ():
        refused = [e for e in dist.files if e.path in dirs]
        if refused:
            keep = tuple(e for e in dist.files if e.path not in dirs)
            read.distributions[name] = replace(dist, files=keep)
            read.unsafe.extend(UnsafeEntry(name, e.raw, NAMES_A_DIRECTORY) for e in refused)
    for path in dirs:
        del owners[path]
    absent.sort()
    return absent


def installed_versions(prefix: Path, sites: Sequence[EnvPath]) -> dict[DistName, str]:
    """Name -> version of every dist-info, from METADATA alone: a quick look, no RECORDs.

    The transaction's verify step needs only this, and must not pay for a full walk.
    """
    found: dict[DistName, str] = {}
    for site in sites:
        for name, is_dir in _listdir(prefix / site):
            managed = os.path.lexists(prefix / site / name / "RECORD")  # as in read_inventory
            if is_dir and name.endswith(".dist-info") and managed:
                fallback_name, fallback_version = split_dist_info_name(name) or ("", "")
                meta = _read_metadata(prefix / site / name / "METADATA", quick=True)
                dist = normalize_name(meta.name or fallback_name)
                found.setdefault(dist, meta.version or fallback_version)
    return found


def _listdir(path: Path) -> list[tuple[str, bool]]:
    try:
        with os.scandir(path) as it:
            return sorted((e.name, e.is_dir(follow_symlinks=False)) for e in it)
    except OSError as e:
        raise TargetError(f"{path}: cannot list site-packages ({e.strerror or e})") from e


def _parse_one(
    prefix: Path, site: EnvPath, info: EnvPath, guard: SymlinkGuard, *, requires: bool = True
) -> Any:
    """One dist-info read and parsed, as the JSON-able value the tree cache keeps.

    ``["no-record", name]`` or ``["dist", distribution, unsafe rows, issue rows, unreadable]``
    (``unreadable``: why the RECORD cannot be read exactly, or None). The distribution's
    RECORD entries are columns (:func:`_read_entries`), streamed from the RECORD's rows.
    """
    full = prefix / info
    fallback_name, fallback_version = split_dist_info_name(posixpath.basename(info)) or ("", "")
    if not os.path.lexists(full / "RECORD"):
        return ["no-record", fallback_name]
    top_level_txt = _read_optional(full / "top_level.txt")
    columns, unsafe, tops, problems, unreadable = _read_entries(
        site, _record_pieces(full / "RECORD"), guard, derive=top_level_txt is None
    )
    meta = _read_metadata(full / "METADATA", quick=not requires)
    name = normalize_name(meta.name or fallback_name)
    if top_level_txt is not None:
        top_level = sorted({line.strip() for line in top_level_txt.splitlines() if line.strip()})
    else:
        top_level = sorted(tops)
    dist = [
        name,
        meta.version or fallback_version,
        info,
        site,
        _read_optional(full / "INSTALLER"),
        list(meta.requires),
        columns,
        top_level,
    ]
    issues = [[p.line, p.row, p.reason] for p in problems]
    return ["dist", dist, unsafe, issues, unreadable]


_SIZE_MAX = 2**63 - 1
"""The largest size the size column holds (a signed 64-bit array)."""


def _read_entries(
    site: EnvPath, pieces: Iterable[str], guard: SymlinkGuard, *, derive: bool
) -> tuple[list[Any], list[list[str]], set[str], Sequence[RecordProblem], str | None]:
    """RECORD's entries as the columns of :class:`RecordFiles`, ``[paths, hashes, sizes,
    [[row, raw], ...], [[row, sha256, size], ...]]`` (hashes as one string, a size of -1
    for none; the raw path of a row whose path is not ``site/raw``; the hash and size of a
    row the columns cannot hold), the ``[raw, reason]`` of the rows refused, the importable
    names of every row (when ``derive``), the problems and why it cannot be read exactly.

    Read one row at a time (:func:`scan_record`): a row costs its path, never an entry
    object, nor a string for its hash or an object for its size.
    """
    paths: list[EnvPath] = []
    shas = io.StringIO()  # each row's hash copied in: the row's own string is not kept
    sizes = array("q")
    moved: list[list[Any]] = []
    odd: list[list[Any]] = []
    unsafe: list[list[str]] = []
    tops: set[str] = set()
    base = f"{site}/"
    cut = len(base)

    def entry(raw: str, sha256: str | None, size: int | None) -> None:
        if derive and (top := _top_name(raw)) is not None:
            tops.add(top)
        resolved = resolve_record_path(site, raw)
        if isinstance(resolved, Refusal):
            unsafe.append([raw, resolved.reason])
        elif guard.escapes(resolved):
            unsafe.append([raw, "through a symlink out of the environment"])
        else:
            exact = len(resolved) == cut + len(raw) and resolved.startswith(base)
            if not (exact and resolved.endswith(raw)):  # not site/raw: keep raw as written
                moved.append([len(paths), raw])
            if (
                (sha256 is None or (len(sha256) == SHA_CHARS and sha256.isascii()))
                and sha256 != NO_SHA
                and (size is None or size <= _SIZE_MAX)
            ):
                shas.write(sha256 or NO_SHA)
                sizes.append(-1 if size is None else size)
            else:  # rarely: a hash of another length, a size past 64 bits
                odd.append([len(paths), sha256, size])
                shas.write(NO_SHA)
                sizes.append(-1)
            paths.append(resolved)

    problems, unreadable = scan_record(pieces, entry)
    if unreadable is not None:
        return [[], "", [], [], []], [], set(), (), unreadable
    return [paths, shas.getvalue(), sizes, moved, odd], unsafe, tops, problems, None


def _add_one(info: EnvPath, parsed: Any, read: _Read) -> None:
    """Add one parsed dist-info to ``read``; a second dist-info of a name is a duplicate."""
    if parsed[0] == "no-record":
        read.unmanaged.append(Unmanaged(info, parsed[1], "no-record"))
        return
    _kind, dist, unsafe, issues, unreadable = parsed
    name = DistName(dist[0])
    if name in read.distributions:
        read.unmanaged.append(Unmanaged(info, name, "duplicate"))
        return
    site = EnvPath(dist[3])
    if unreadable:
        read.unreadable.append(UnreadableRecord(name, EnvPath(f"{info}/RECORD"), unreadable))
    read.unsafe.extend(UnsafeEntry(name, raw, reason) for raw, reason in unsafe)
    read.issues.extend(RecordIssue(name, line, row, reason) for line, row, reason in issues)
    paths, shas, sizes, moved, odd = dist[6]
    raws = {int(i): str(raw) for i, raw in moved}
    oddities = {int(i): (sha, size) for i, sha, size in odd}
    read.distributions[name] = Distribution(
        name=name,
        version=dist[1],
        dist_info=info,
        site_packages=site,
        installer=dist[4],
        requires=tuple(dist[5]),
        files=RecordFiles(site, paths, str(shas), _sizes(sizes), raws, oddities),
        top_level=tuple(dist[7]),
    )


def _sizes(sizes: Sequence[int]) -> array[int]:
    """The size column as an array: as read, or from the cache's JSON list."""
    return sizes if isinstance(sizes, array) else array("q", sizes)


_PIECE = 1 << 20
"""Bytes of a RECORD read at a time."""


def _record_pieces(path: Path) -> Iterator[str]:
    """A RECORD's text a megabyte at a time, each piece cut after a line feed (as
    :func:`~cudafix.env.record.scan_record` takes it), decoded as :func:`_read_text` does."""
    try:
        with path.open("rb") as f:
            done, held = 0, list[bytes]()  # held: what follows the last line feed so far
            while block := f.read(_PIECE):
                cut = block.rfind(b"\n") + 1  # a line feed is no byte of a multibyte character
                if not cut:  # a line longer than a piece: joined once, when it ends
                    held.append(block)
                    continue
                data = b"".join([*held, block[:cut]])
                yield _decoded(path, data, done)
                done += len(data)
                held = [block[cut:]]
            if rest := b"".join(held):
                yield _decoded(path, rest, done)
    except OSError as e:
        raise _unreadable(path, "RECORD", e.strerror or str(e)) from e


def _decoded(path: Path, data: bytes, at: int, what: str = "RECORD") -> str:
    """``data`` as UTF-8; ``at``: where in the file it starts (for the error)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _unreadable(path, what, f"not UTF-8 at byte {at + e.start}") from e


def _read_text(path: Path, what: str) -> str:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise _unreadable(path, what, e.strerror or str(e)) from e
    return _decoded(path, data, 0, what)


def _unreadable(path: Path, what: str, why: str) -> InputError:
    return InputError(
        f"{path}: unreadable {what} ({why})",
        hint="reinstall that distribution, or remove its dist-info directory",
    )


def _read_metadata(path: Path, *, quick: bool = False) -> CoreMetadata:
    """``quick``: Name and Version alone, from the headers where they are plain
    (:func:`~cudafix.env.distinfo.name_and_version`), else as a full parse reads them."""
    if not os.path.lexists(path):
        return CoreMetadata()
    text = _read_text(path, "METADATA")
    return (quick and name_and_version(text)) or parse_metadata(text)


def _read_optional(path: Path) -> str | None:
    """A small informational file (INSTALLER); absent or undecodable means unknown."""
    try:
        return path.read_text(encoding="utf-8").strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def derive_top_level(raw_paths: Iterable[str]) -> tuple[str, ...]:
    """Importable names from RECORD paths: packages with ``__init__.py``, modules, extensions."""
    return tuple(sorted({n for raw in raw_paths if (n := _top_name(raw)) is not None}))


def _top_name(raw: str) -> str | None:
    """The importable name a RECORD path makes (a package's ``__init__.py``, a module, an
    extension), or None."""
    parts = raw.split("/", 2)
    head = parts[0]
    if head in ("", ".", "..", "__pycache__") or head.endswith((".dist-info", ".data")):
        return None
    if len(parts) == 2 and parts[1] == "__init__.py":
        return head
    if len(parts) == 1 and head.endswith((".py", ".so", ".pyd")):
        return head.split(".", 1)[0]
    return None
