"""Hard-link snapshots of the paths a transaction touches, and byte-identical restore.

A hard link costs O(1) whatever the file size; where one is impossible (EXDEV, EPERM,
EMLINK) the file is copied and its sha256 recorded. Every path is examined with
``lstat``: a symlink is snapshotted and restored as a symlink, never followed. Only paths
that passed :func:`check_path` (inside the prefix, no symlinked ancestor) are touched.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import posixpath
import resource
import shutil
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from functools import partial
from operator import attrgetter
from pathlib import Path
from typing import Any

from cudafix.env import statedir
from cudafix.env.statedir import STATE_DIR_NAME, TxDir, read_bytes, write_atomic
from cudafix.faults import crash_point, fail_point, hooks_armed
from cudafix.model.errors import DamagedState, UnsafeState
from cudafix.tx.journal import append as journal_append
from cudafix.tx.steps import StateRebuilt

_COPY_ERRNOS = frozenset({errno.EXDEV, errno.EPERM, errno.EMLINK})
KINDS = frozenset({"file", "symlink", "dir", "fifo", "absent"})


@dataclass(frozen=True)
class Entry:
    """One snapshotted path, with what it takes to prove a restore byte-identical."""

    path: str
    kind: str
    """``file``, ``symlink``, ``dir``, ``fifo``, or ``absent`` (must not exist after a rollback)."""
    mode: int = 0
    size: int = 0
    target: str | None = None
    dev: int = 0
    ino: int = 0
    mtime_ns: int = 0
    sha256: str | None = None
    """Set when the snapshot is a copy (a hard link is proved by its inode instead)."""
    detach: bool = False
    """The backend will rewrite this path: unlink it before applying so nothing writes
    through the hard link into the snapshot."""
    ctime_ns: int = 0
    """A hard link's ctime once linked: a write in place moves it, even one that puts
    size and mtime back (0: not recorded)."""
    nlink: int = 0
    """A hard link's link count once linked: a moved ctime with another count is a link
    made or removed (uv linking from its cache), not a write."""


@dataclass(frozen=True)
class Manifest:
    """Everything a snapshot holds; ``listings`` names what each touched directory held."""

    entries: tuple[Entry, ...]
    listings: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        # one row per entry under one list of field names: a whole-venv manifest holds 24k
        # entries, and a dict per entry doubled its size and its encoding time
        rows = [_row(e) for e in self.entries]
        return {"fields": list(FIELDS), "rows": rows, "listings": dict(self.listings)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Manifest:
        """Parse and validate; raise ``ValueError`` naming the first thing that is wrong.

        Every path must be a normalised relative path outside ``.cudafix`` and every
        listed name one path component, so a tampered manifest can never make a restore
        act outside the environment.
        """
        entries = tuple(_entry(e) for e in _entry_dicts(data))
        dirs = {e.path for e in entries if e.kind == "dir"}
        listings: dict[str, tuple[str, ...]] = {}
        for key, names in dict(data["listings"]).items():
            if (key not in dirs and key != ROOT) or not isinstance(names, list):
                raise ValueError(f"listing {key!r} is not a snapshotted directory")
            bad = [n for n in names if not _is_name(n)]
            if bad:
                raise ValueError(f"listing {key!r} names {bad[0]!r}, not a file name")
            listings[key] = tuple(names)
        return cls(entries, listings)

    def by_path(self) -> dict[str, Entry]:
        return {e.path: e for e in self.entries}


FIELDS = tuple(f.name for f in fields(Entry))
_row = attrgetter(*FIELDS)


def _entry_dicts(data: Mapping[str, Any]) -> Iterator[Any]:
    """The entries of either form: rows under ``fields`` (written now), or one dict per
    entry (written before; a transaction left pending by an older cudafix still restores)."""
    if "rows" not in data:
        yield from data["entries"]
        return
    if data["fields"] != list(FIELDS):
        raise ValueError(f"unknown manifest fields {str(data['fields'])[:80]}")
    for row in data["rows"]:
        if not isinstance(row, list) or len(row) != len(FIELDS):
            raise ValueError(f"not a snapshot row: {str(row)[:80]}")
        yield dict(zip(FIELDS, row, strict=True))


_ENTRY_TYPES: Mapping[str, tuple[type, ...]] = {
    "path": (str,),
    "kind": (str,),
    "mode": (int,),
    "size": (int,),
    "target": (str, type(None)),
    "dev": (int,),
    "ino": (int,),
    "mtime_ns": (int,),
    "sha256": (str, type(None)),
    "detach": (bool,),
    "ctime_ns": (int,),
    "nlink": (int,),
}


def _entry(data: Any) -> Entry:
    if not isinstance(data, dict) or set(data) - set(_ENTRY_TYPES) or "path" not in data:
        raise ValueError(f"not a snapshot entry: {str(data)[:80]}")
    wrong = [k for k, v in data.items() if not isinstance(v, _ENTRY_TYPES[k])]
    if wrong:
        raise ValueError(f"entry {data['path']!r}: {wrong[0]} has the wrong type")
    entry = Entry(**data)
    if (why := path_syntax(entry.path)) is not None:
        raise ValueError(why)
    if entry.kind not in KINDS or not 0 <= entry.mode <= 0o7777:
        raise ValueError(f"entry {entry.path!r}: kind {entry.kind!r} mode {entry.mode:o}")
    if entry.kind == "symlink" and entry.target is None:
        raise ValueError(f"entry {entry.path!r}: a symlink without a target")
    return entry


def _is_name(name: Any) -> bool:
    return isinstance(name, str) and name not in ("", ".", "..") and not {"/", "\x00"} & set(name)


def path_syntax(path: str) -> str | None:
    """Why ``path`` is not a normalised relative path outside ``.cudafix``, or None."""
    if not path or path.startswith("/") or "\x00" in path:
        return f"{path!r}: not a relative path inside the environment"
    if posixpath.normpath(path) != path or path.split("/")[0] in ("..", "."):
        return f"{path!r}: not a normalised path inside the environment"
    if path.split("/")[0] == STATE_DIR_NAME:
        return f"{path!r}: inside cudafix's own state directory"
    return None


def check_path(prefix: Path, path: str) -> str | None:
    """Why ``path`` must not be acted on, or None: absolute, escaping, or via a symlink."""
    if (why := path_syntax(path)) is not None:
        return why
    base = str(prefix)  # str and os.path, not pathlib: this runs for every path a plan names
    cut = path.find("/")
    while cut != -1:
        if os.path.islink(f"{base}/{path[:cut]}"):  # noqa: PTH114 - hot path, str paths
            return f"{path!r}: goes through the symlink {path[:cut]}"
        cut = path.find("/", cut + 1)
    return None


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def expand(prefix: Path, paths: Iterable[str]) -> list[str]:
    """``paths`` plus everything below those that are real directories (symlinks not followed)."""
    out: set[str] = set()
    for path in paths:
        out.add(path)
        live = prefix / path
        if live.is_dir() and not live.is_symlink():
            cut = len(str(prefix)) + 1
            for root, dirs, files in os.walk(live):
                rel = root[cut:]  # os.walk's roots all start with str(live)
                out.update(f"{rel}/{n}" if rel else n for n in (*dirs, *files))
    return sorted(out)


def ancestors(paths: Iterable[str]) -> set[str]:
    """Every proper ancestor directory of ``paths``, the prefix itself excluded."""
    out: set[str] = set()
    for path in paths:
        parent = posixpath.dirname(path)
        while parent and parent not in out:  # its own ancestors are in already
            out.add(parent)
            parent = posixpath.dirname(parent)
    return out


def _link_or_copy(src: str | Path, dest: str | Path, copy: bool = False) -> str | None:
    """Hard-link ``src`` to ``dest``; copy (when asked, or where linking is impossible) and
    return the copy's sha256."""
    return None if not copy and _linked(src, dest, None, None) else _copied(src, dest)


def _copied(src: str | Path, dest: str | Path) -> str:
    """Copy ``src`` to ``dest`` (a symlink as a symlink); the copy's sha256."""
    shutil.copy2(src, dest, follow_symlinks=False)
    return sha256_file(Path(dest))


CopyWhen = Callable[[str, int], bool]
"""Whether a file (its EnvPath and size) is snapshotted by copy rather than by hard link."""


def never(_path: str, _size: int) -> bool:
    """Link every file (the default)."""
    return False


ROOT = ""
"""The listing key of the prefix itself (``run`` snapshots the whole environment)."""


def _listing(prefix: Path, directory: str) -> tuple[str, ...] | None:
    """The names in ``directory`` (cudafix's own state left out of the prefix's); None when
    it is not a directory, or a symlink (opened with ``O_NOFOLLOW``, never followed)."""
    try:
        fd = os.open(f"{prefix}/{directory}", _LIST_FLAGS)
    except OSError:
        return None
    try:
        names = os.listdir(fd)  # noqa: PTH208 - a descriptor, not a path
    finally:
        os.close(fd)
    return tuple(sorted(n for n in names if directory != ROOT or n != STATE_DIR_NAME))


_LIST_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_ROOT_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def _join(directory: str, name: str) -> str:
    return f"{directory}/{name}" if directory != ROOT else name


def take(
    prefix: Path,
    tx: TxDir,
    paths: Iterable[str],
    detach: Iterable[str] = (),
    copy: CopyWhen = never,
    whole: bool = False,
) -> Manifest:
    """Snapshot ``paths`` (expanded, plus ancestor dirs) into ``tx``; write the manifest.

    Files ``copy`` picks are copied, so even a write in place can be undone. ``whole``:
    ``paths`` are every entry of the prefix, so what appears beside them goes on restore."""
    # A path below a symlink is the symlink's (its entry restores it); never followed. The
    # paths asked for are checked; what expanding them walks below is sound by construction
    # (names from listing a real directory by descriptor, symlinked directories not entered).
    asked = set(_acceptable(prefix, paths))
    statedir.ensure_dir(tx.snapshot, mode=0o700)
    snap = _Snapper(prefix, tx.snapshot, set(detach), copy, hooks_armed())
    walked: set[str] = set()
    for path in sorted(asked | ancestors(asked)):
        if walked and any(a in walked for a in ancestors([path])):
            continue  # a tree walked below already holds it
        if snap.one(path).kind == "dir" and path in asked:
            snap.walk(path)
            walked.add(path)
    entries, listings = snap.entries, snap.listings
    for e in entries:
        unlisted = e.kind == "dir" and e.path not in listings  # an ancestor of what was asked
        if unlisted and (names := _listing(prefix, e.path)) is not None:
            listings[e.path] = names
    if whole and (names := _listing(prefix, ROOT)) is not None:
        listings[ROOT] = names
    entries.sort(key=attrgetter("path"))
    manifest = Manifest(tuple(entries), listings)
    write_json(tx.manifest, manifest.to_json())
    return manifest


@dataclass
class _Snapper:
    """Snapshots paths into ``store``, collecting their entries and the listing of each
    directory it walks. A tree is walked in one pass: each directory is listed once, by
    descriptor, and its names are linked, statted and recorded relative to it (no path is
    resolved from the root again). A whole-venv snapshot is 24k entries."""

    prefix: Path
    store: Path
    rewritten: set[str]
    copy: CopyWhen
    hooks: bool
    entries: list[Entry] = field(default_factory=list)
    listings: dict[str, tuple[str, ...]] = field(default_factory=dict)
    made: set[str] = field(default_factory=lambda: {""})
    """Directories created in the store by :meth:`one`: paths come sorted, parents first,
    so most need no ``makedirs`` of their own."""

    def one(self, path: str) -> Entry:
        """Snapshot one path by its full name (a directory's content is not walked)."""
        live = f"{self.prefix}/{path}"
        try:
            st = os.lstat(live)
        except FileNotFoundError:
            return self._add(Entry(path, "absent"))
        if (parent := posixpath.dirname(path)) not in self.made:
            os.makedirs(f"{self.store}/{parent}", exist_ok=True)  # noqa: PTH103 - str paths
            self.made.add(parent)
        entry = self._record(path, st, live, f"{self.store}/{path}", None, None)
        if entry.kind == "dir":
            self.made.add(path)
        return self._add(entry)

    def walk(self, top: str) -> None:
        """Entries for everything below the real directory ``top`` (snapshotted already)."""
        base = os.open(self.prefix, _ROOT_FLAGS)  # the prefix may be reached by a symlink
        dest = os.open(self.store, _ROOT_FLAGS)
        try:
            pending = [top]
            while pending:
                directory = pending.pop()
                try:
                    src = os.open(directory, _LIST_FLAGS, dir_fd=base)
                except OSError:
                    continue  # unreadable: recorded as a directory, its content not
                try:
                    dst = os.open(directory, _LIST_FLAGS, dir_fd=dest)
                    try:
                        pending += self._directory(directory, src, dst)
                    finally:
                        os.close(dst)
                finally:
                    os.close(src)
        finally:
            os.close(dest)
            os.close(base)

    def _directory(self, directory: str, src: int, dst: int) -> list[str]:
        """Snapshot the names in one directory; its subdirectories, to be walked next."""
        with os.scandir(src) as listed:
            found = list(listed)
        names, below = [], []
        for item in found:
            path = f"{directory}/{item.name}"
            try:
                st = item.stat(follow_symlinks=False)
            except FileNotFoundError:
                self._add(Entry(path, "absent"))
                continue
            names.append(item.name)
            if self._add(self._record(path, st, item.name, item.name, src, dst)).kind == "dir":
                below.append(path)
        self.listings[directory] = tuple(sorted(names))
        return below

    def _add(self, entry: Entry) -> Entry:
        self.entries.append(entry)
        return entry

    def _record(
        self, path: str, st: os.stat_result, live: str, dest: str, src: int | None, dst: int | None
    ) -> Entry:
        """Snapshot ``path``, whose lstat is ``st``: ``live`` and ``dest`` are its names
        relative to the descriptors ``src`` and ``dst`` (full paths where those are None).
        A directory is made in the store, not walked."""
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISDIR(st.st_mode):
            with contextlib.suppress(FileExistsError):
                os.mkdir(dest, dir_fd=dst)
            return Entry(path, "dir", mode=mode)
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(live, dir_fd=src)
            os.symlink(target, dest, dir_fd=dst)
            return Entry(path, "symlink", target=target)
        if stat.S_ISFIFO(st.st_mode):  # never opened (it would block); recreated on restore
            return Entry(path, "fifo", mode=mode)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, _NOT_SNAPSHOTTABLE, f"{self.prefix}/{path}")
        if self.hooks:
            fail_point("snapshot")
        sha = None
        if self.copy(path, st.st_size) or not _linked(live, dest, src, dst):
            sha = _copied(f"{self.prefix}/{path}", f"{self.store}/{path}")
        if self.hooks:
            crash_point("snapshot-file")
        linked = os.stat(dest, dir_fd=dst, follow_symlinks=False) if sha is None else None
        return Entry(
            path, "file", mode, st.st_size, None, st.st_dev, st.st_ino, st.st_mtime_ns, sha,
            path in self.rewritten,
            ctime_ns=linked.st_ctime_ns if linked else 0, nlink=linked.st_nlink if linked else 0,
        )  # fmt: skip


def _linked(live: str | Path, dest: str | Path, src: int | None, dst: int | None) -> bool:
    """Hard-link ``live`` to ``dest`` (names relative to ``src`` and ``dst``); False where
    linking is impossible (:data:`_COPY_ERRNOS`), so the file is copied instead."""
    try:
        os.link(live, dest, src_dir_fd=src, dst_dir_fd=dst, follow_symlinks=False)
    except OSError as exc:
        if exc.errno not in _COPY_ERRNOS:
            raise
        return False
    return True


_NOT_SNAPSHOTTABLE = "not a file, symlink, FIFO or directory (a socket?)"


def _acceptable(prefix: Path, paths: Iterable[str]) -> list[str]:
    """``paths`` that :func:`check_path` accepts, each ancestor directory asked once (a
    whole-venv snapshot names 24k paths below a few thousand directories)."""
    base = str(prefix)
    through: dict[str, bool] = {}
    out = []
    for path in paths:
        if path_syntax(path) is not None:
            continue
        cut = path.find("/")
        while cut != -1:
            parent = path[:cut]
            if parent not in through:
                through[parent] = os.path.islink(f"{base}/{parent}")  # noqa: PTH114 - hot path
            if through[parent]:
                break
            cut = path.find("/", cut + 1)
        else:
            out.append(path)
    return out


def write_json(path: Path, value: Any) -> None:
    """Write JSON atomically and durably."""
    write_atomic(path, json.dumps(value, sort_keys=True))


def load(tx: TxDir) -> Manifest:
    """The transaction's manifest; :class:`DamagedState` (naming the file) if it is damaged."""
    data = load_json(tx.manifest, "snapshot manifest")
    try:
        return Manifest.from_json(data)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise DamagedState(
            f"the snapshot manifest {tx.manifest} is damaged or names a path outside the "
            f"environment ({exc}); nothing was restored from it",
            hint=f"keep {tx.root} for inspection; cudafix will not act on it",
        ) from exc


def load_json(path: Path, what: str) -> Any:
    """A JSON state file, or :class:`DamagedState` saying which file and what is wrong."""
    try:
        return json.loads(read_bytes(path).decode("utf-8"))
    except FileNotFoundError:
        raise
    except (UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise DamagedState(
            f"the {what} {path} is damaged ({exc}); nothing was acted on from it",
            hint=f"keep {path.parent} for inspection; cudafix will not guess what it held",
        ) from exc


def remove_path(path: Path) -> None:
    """Remove whatever is at ``path`` without following symlinks; missing is fine."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path)
    else:
        path.unlink()


def detach(prefix: Path, manifest: Manifest) -> list[str]:
    """Unlink live files the backend will rewrite, so no write can reach the snapshot."""
    done = []
    for e in manifest.entries:
        live = prefix / e.path
        if e.detach and e.kind == "file" and _same_inode(live, e):
            live.unlink()
            done.append(e.path)
    return done


def _same_inode(live: Path, e: Entry) -> bool:
    try:
        st = os.lstat(live)
    except FileNotFoundError:
        return False
    return (st.st_dev, st.st_ino) == (e.dev, e.ino)


def written_in_place(prefix: Path, manifest: Manifest) -> list[str]:
    """Snapshotted files something rewrote in place (same inode, other bytes).

    A hard-link snapshot shares the inode, so its copy changed too: those paths cannot be
    restored from it. Writers that replace files (uv, pip) create new inodes and are safe.
    A write shows as another size or mtime, or, when those were put back, as a moved
    ctime with the same link count and mode (a link made or removed, or a chmod, moves
    ctime too, and changes those instead).
    """
    out = []
    for e in manifest.entries:
        if e.kind != "file" or e.sha256 is not None:
            continue  # copies (sha256 set) were not linked
        try:
            st = os.lstat(f"{prefix}/{e.path}")  # str: once per snapshotted file
        except FileNotFoundError:
            continue
        if (st.st_dev, st.st_ino) == (e.dev, e.ino) and _written(st, e):
            out.append(e.path)
    return out


def _written(st: os.stat_result, e: Entry) -> bool:
    if st.st_size != e.size or st.st_mtime_ns != e.mtime_ns:
        return True
    touched = e.ctime_ns != 0 and st.st_ctime_ns != e.ctime_ns
    return touched and st.st_nlink == e.nlink and stat.S_IMODE(st.st_mode) == e.mode


def mismatch(prefix: Path, e: Entry) -> str | None:
    """How the live path differs from entry ``e``, or None when it is identical."""
    live = prefix / e.path
    try:
        st = os.lstat(live)
    except FileNotFoundError:
        return None if e.kind == "absent" else f"{e.path}: missing"
    if e.kind == "absent":
        return f"{e.path}: exists, but did not before"
    if e.kind == "dir":
        return None if stat.S_ISDIR(st.st_mode) else f"{e.path}: not a directory"
    if e.kind == "symlink":
        ok = stat.S_ISLNK(st.st_mode) and str(live.readlink()) == e.target
        return None if ok else f"{e.path}: not the symlink -> {e.target}"
    if e.kind == "fifo":
        ok = stat.S_ISFIFO(st.st_mode) and stat.S_IMODE(st.st_mode) == e.mode
        return None if ok else f"{e.path}: not the FIFO it was"
    if not stat.S_ISREG(st.st_mode):
        return f"{e.path}: not a regular file"
    if e.sha256 is None:
        now = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        ok = now == (e.dev, e.ino, e.size, e.mtime_ns)
    else:
        ok = st.st_size == e.size and sha256_file(live) == e.sha256
    ok = ok and stat.S_IMODE(st.st_mode) == e.mode
    return None if ok else f"{e.path}: content or mode differs from the snapshot"


def restore_entry(prefix: Path, tx: TxDir, e: Entry) -> None:
    """Put one entry back (idempotent: an identical live path is left alone)."""
    if e.kind == "dir" or mismatch(prefix, e) is None:
        return
    live = prefix / e.path
    fail_point("restore", e.path)
    remove_path(live)
    if e.kind == "absent":
        return
    if e.kind == "symlink":
        live.symlink_to(str(e.target))
    elif e.kind == "fifo":
        os.mkfifo(live, e.mode)
        live.chmod(e.mode)
    else:
        _link_or_copy(tx.snapshot / e.path, live)
        live.chmod(e.mode)
    crash_point("restore-file")


def ensure_dir(prefix: Path, e: Entry) -> None:
    """Make ``e.path`` a real directory with its recorded mode (chmod only if it differs:
    an immutable directory with the right mode is left alone)."""
    live = prefix / e.path
    if not (live.is_dir() and not live.is_symlink()):
        remove_path(live)
        live.mkdir()
    set_dir_mode(live, e.mode)


def set_dir_mode(path: Path, mode: int) -> None:
    """chmod a real directory (never through a symlink), only when its mode differs."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) != mode:
            fail_point("restore", str(path))
            os.fchmod(fd, mode)
    finally:
        os.close(fd)


def new_names(prefix: Path, manifest: Manifest) -> list[str]:
    """Paths that appeared in a touched directory since the snapshot."""
    return [
        _join(directory, name)
        for directory, before in manifest.listings.items()
        for name in sorted(set(_listing(prefix, directory) or ()) - set(before))
    ]


def verify(prefix: Path, manifest: Manifest) -> list[str]:
    """Every way the live tree differs from the manifest (empty: byte-identical).

    Bytecode (``__pycache__``, ``*.pyc``) is derived data: Python writes it again on import,
    and uv deletes it beside every ``.py`` it removes, also where the snapshot never held
    it. Its absence is no difference; anything present is still compared."""
    problems = [
        m
        for e in manifest.entries
        if (m := mismatch(prefix, e)) is not None
        and not (_derived(e.path) and m.endswith(": missing"))
    ]
    modes = {e.path: e.mode for e in manifest.entries if e.kind == "dir"}
    for directory, before in manifest.listings.items():
        now = _listing(prefix, directory)
        if now is not None and now != before:
            extra = sorted(set(now) - set(before))
            if extra:
                problems.append(f"{directory}: unexpected {', '.join(extra)}")
            missing = sorted(n for n in set(before) - set(now) if not _derived(n))
            if missing:
                problems.append(f"{directory}: missing {', '.join(missing)}")
        if now is None:
            if not _derived(directory):
                problems.append(f"{directory}: missing directory")
        elif directory != ROOT and stat.S_IMODE(os.lstat(prefix / directory).st_mode) != modes.get(
            directory
        ):
            problems.append(f"{directory}: mode differs")
    return problems


def _derived(path: str) -> bool:
    """Bytecode: a ``__pycache__`` directory, anything in one, or a ``.pyc`` file."""
    name = posixpath.basename(path)
    return name == "__pycache__" or name.endswith(".pyc") or "/__pycache__/" in f"/{path}"


def restore(prefix: Path, tx: TxDir, manifest: Manifest) -> list[str]:
    """Roll the touched paths back to the manifest, best effort path by path.

    One path that cannot be restored (EPERM on an immutable file, ENOSPC for a copy) does
    not stop the others; the return value names every path that still differs, each with
    the error that stopped it. Nothing is done through a symlinked ancestor.
    """
    failed: dict[str, str] = {}

    def attempt(path: str, step: Callable[[], object]) -> None:
        if any(path == f or path.startswith(f + "/") for f in failed):
            return
        if (why := check_path(prefix, path)) is not None:
            failed[path] = why
            return
        try:
            step()
        except OSError as exc:
            failed[path] = f"{path}: {exc.strerror or exc}"

    dirs = sorted((e for e in manifest.entries if e.kind == "dir"), key=lambda e: e.path.count("/"))
    for e in dirs:
        attempt(e.path, partial(ensure_dir, prefix, e))
    for path in new_names(prefix, manifest):
        attempt(path, partial(_remove_new, prefix, path))
    for e in manifest.entries:
        attempt(e.path, partial(restore_entry, prefix, tx, e))
    for e in dirs:
        attempt(e.path, partial(set_dir_mode, prefix / e.path, e.mode))
    left = [p for p in verify(prefix, manifest) if not _explained(p, failed)]
    return [*failed.values(), *left]


def _remove_new(prefix: Path, path: str) -> None:
    """Remove a path that appeared since the snapshot (the fault hook sees it as a restore)."""
    fail_point("restore", path)
    remove_path(prefix / path)


def _explained(problem: str, failed: Mapping[str, str]) -> bool:
    """Whether a verify line only repeats a path whose restore failure is already reported."""
    where, _, what = problem.partition(": ")
    if where in failed or any(where.startswith(f + "/") for f in failed):
        return True
    names = what.removeprefix("missing ").split(", ") if what.startswith("missing ") else []
    return bool(names) and all(f"{where}/{n}" in failed for n in names)


def put_back(prefix: Path, tx: TxDir, manifest: Manifest, paths: Iterable[str]) -> None:
    """Restore ``paths`` (``--keep-shared``) and the directories above them."""
    entries = manifest.by_path()
    for path in paths:
        for parent in sorted(ancestors([path]), key=lambda p: p.count("/")):
            if parent in entries and not (prefix / parent).is_dir():
                ensure_dir(prefix, entries[parent])
        fail_point("keep")
        restore_entry(prefix, tx, entries[path])


def lstat_state(prefix: Path, paths: Iterable[str]) -> dict[str, list[Any]]:
    """Cheap identity of paths (kind, size, mode, inode, mtime, target) for undo's check."""
    out: dict[str, list[Any]] = {}
    for path in paths:
        live = f"{prefix}/{path}"  # str and os calls: once per path of a whole-venv run
        try:
            st = os.lstat(live)
        except FileNotFoundError:
            out[path] = ["absent"]
            continue
        target = os.readlink(live) if stat.S_ISLNK(st.st_mode) else None  # noqa: PTH115
        kind = "dir" if stat.S_ISDIR(st.st_mode) else "other"
        if kind == "dir":
            out[path] = ["dir", stat.S_IMODE(st.st_mode), sorted(os.listdir(live))]  # noqa: PTH208
        else:
            out[path] = [kind, st.st_size, st.st_mode, st.st_ino, st.st_mtime_ns, target]
    return out


def after_state(prefix: Path, manifest: Manifest) -> dict[str, list[Any]]:
    """:func:`lstat_state` of the touched paths now (the snapshot's, plus whatever appeared
    in the touched directories), each directory listed once: its row holds its names."""
    after = lstat_state(prefix, [e.path for e in manifest.entries])
    new = []
    for directory, before in manifest.listings.items():
        now = after.get(directory, [])
        names = now[2] if now[:1] == ["dir"] else (_listing(prefix, directory) or ())
        new += [_join(directory, n) for n in sorted(set(names) - set(before))]
    return after | lstat_state(prefix, expand(prefix, new))


POST_FORMAT = "cudafix-post-2"
"""The post-state written as what differs from its manifest (a whole-venv post-state of
24k paths is then a few rows, not 4 MB encoded and written durably on every commit)."""


def post_state_to_json(manifest: Manifest, after: Mapping[str, list[Any]]) -> dict[str, Any]:
    """``after`` (from :func:`lstat_state`) less every path whose state the manifest implies."""
    implied = _implied(manifest)
    changed = {p: state for p, state in after.items() if implied.get(p) != state}
    return {"format": POST_FORMAT, "changed": changed}


def post_state_from_json(data: Any, manifest: Manifest) -> dict[str, Any]:
    """The whole post-state again; ``ValueError`` when it is not one. A post-state written
    before :data:`POST_FORMAT` holds every path itself."""
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    if data.get("format") != POST_FORMAT:
        return data  # path -> state (a path's state is a list, never a format string)
    if set(data) != {"format", "changed"} or not isinstance(data["changed"], dict):
        raise ValueError("not a post-state")
    return {**_implied(manifest), **data["changed"]}


def _implied(manifest: Manifest) -> dict[str, list[Any]]:
    """What :func:`lstat_state` says of each path unchanged since the snapshot, where the
    manifest records enough to say it (symlinks and FIFOs are always written out)."""
    out: dict[str, list[Any]] = {}
    for e in manifest.entries:
        if e.kind == "file":
            out[e.path] = ["other", e.size, stat.S_IFREG | e.mode, e.ino, e.mtime_ns, None]
        elif e.kind == "dir" and e.path in manifest.listings:
            out[e.path] = ["dir", e.mode, list(manifest.listings[e.path])]
        elif e.kind == "absent":
            out[e.path] = ["absent"]
    return out


# -- state a command cannot take away --------------------------------------------------------


@dataclass
class Pins:
    """What survives a command that deletes cudafix's own state (``uv venv --clear``, a
    ``.cudafix`` replaced by a symlink): an open fd of every snapshotted file (an open file
    outlives its last name), the manifest and the journal as bytes."""

    fds: dict[str, int]
    manifest: Manifest
    journal: bytes
    missed: int = 0
    """Files no fd was left for (the process's open-file limit)."""
    settled: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    """``(dev, ino, ctime_ns)`` of the snapshot's directories last changed before the
    journal's last write: while one keeps them, none of its names was removed or
    replaced, so its files need no check of their own (:func:`state_lost`)."""

    def close(self) -> None:
        for fd in self.fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds.clear()


FD_RESERVE = 256
"""Descriptors :func:`pin` leaves free for the run itself (the lock, the journal, the
command's pipes, uv and the probes): a snapshot larger than the open-file limit allows is
pinned in part, never to the last descriptor."""


def pin(tx: TxDir, manifest: Manifest) -> Pins:
    """Hold the snapshot open (the soft open-file limit raised to the hard one), keeping
    :data:`FD_RESERVE` descriptors free; the files beyond that are counted as ``missed``."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    files = [e.path for e in manifest.entries if e.kind == "file"]
    if soft < hard and len(files) + FD_RESERVE > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    if soft != resource.RLIM_INFINITY:
        room = max(0, soft - FD_RESERVE - _open_fds())
        files, skipped = files[:room], len(files[room:])
    else:
        skipped = 0
    pins = Pins({}, manifest, read_bytes(tx.journal), missed=skipped)
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    store = tx.snapshot
    for path in files:
        try:
            pins.fds[path] = os.open(f"{store}/{path}", flags)
        except OSError:
            pins.missed += 1
    pins.settled = _settled(tx, manifest)
    return pins


def _settled(tx: TxDir, manifest: Manifest) -> dict[str, tuple[int, int, int]]:
    """The snapshot's directories (``""``: its root) whose ctime is older than the
    journal's: a change to a directory's names moves its ctime (which, unlike its mtime,
    cannot be set back), and any change after the journal's last write gets a ctime no
    older than it (one clock stamps both). One stamped in the same tick as the journal
    could change unseen, so it is left out."""
    store = tx.snapshot
    try:
        now = tx.journal.lstat().st_ctime_ns
    except OSError:
        return {}
    out = {}
    for directory in ("", *(e.path for e in manifest.entries if e.kind == "dir")):
        with contextlib.suppress(OSError):
            st = os.lstat(f"{store}/{directory}" if directory else store)
            if stat.S_ISDIR(st.st_mode) and st.st_ctime_ns < now:
                out[directory] = (st.st_dev, st.st_ino, st.st_ctime_ns)
    return out


def _open_fds() -> int:
    """Descriptors this process holds now (``/proc/self/fd``; a guess of 64 elsewhere)."""
    try:
        return sum(1 for _ in Path("/proc/self/fd").iterdir())
    except OSError:
        return 64


def state_lost(tx: TxDir, pins: Pins) -> bool:
    """Whether anything of the transaction's state is gone or replaced since :func:`pin`."""
    try:
        read_bytes(tx.manifest)
        read_bytes(tx.journal)
        store = tx.snapshot
        for directory, was in pins.settled.items():
            st = os.lstat(f"{store}/{directory}" if directory else store)
            if (st.st_dev, st.st_ino, st.st_ctime_ns) != was:
                return True
        for path, fd in pins.fds.items():
            if path.rpartition("/")[0] in pins.settled:
                continue  # its directory's names are as they were
            live, held = os.lstat(f"{store}/{path}"), os.fstat(fd)
            if (live.st_dev, live.st_ino) != (held.st_dev, held.st_ino):
                return True
    except (OSError, UnsafeState):
        return True
    return False


def rebuild(prefix: Path, tx: TxDir, pins: Pins) -> tuple[Manifest, list[str]]:
    """Write the transaction's state again from :class:`Pins`: the manifest, the journal
    (plus a ``state-rebuilt`` record), and a copy of each snapshotted file
    whose link is gone (its entry then carries the copy's sha256, so a restore is checked
    by content). Returns the manifest to restore and the files that cannot be restored."""
    state = prefix / STATE_DIR_NAME
    if state.is_symlink() or (os.path.lexists(state) and not state.is_dir()):
        state.unlink()  # the command put something else there; never followed
    statedir.ensure_dir(tx.snapshot, mode=0o700)
    entries, lost = [], []
    for e in pins.manifest.entries:
        fd = pins.fds.get(e.path)
        if e.kind != "file" or not _link_gone(tx.snapshot / e.path, fd):
            entries.append(e)
        elif fd is None:
            entries.append(e)
            lost.append(e.path)
        else:
            entries.append(replace(e, sha256=_copy_fd(fd, tx.snapshot / e.path)))
    manifest = Manifest(tuple(entries), pins.manifest.listings)
    write_json(tx.manifest, manifest.to_json())
    write_atomic(tx.journal, pins.journal.decode("utf-8"))
    journal_append(tx.journal, StateRebuilt(missed=pins.missed, unrestorable=tuple(lost)))
    return manifest, lost


def _link_gone(path: Path, fd: int | None) -> bool:
    try:
        live = os.lstat(path)
    except FileNotFoundError:
        return True
    if fd is None:
        return False
    held = os.fstat(fd)
    return (live.st_dev, live.st_ino) != (held.st_dev, held.st_ino)


def _copy_fd(fd: int, dest: Path) -> str:
    """Copy an open file's bytes to ``dest`` (not followed), with its mode; its sha256."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        remove_path(dest)
    mode = stat.S_IMODE(os.fstat(fd).st_mode)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    out = os.open(dest, flags, mode)
    digest = hashlib.sha256()
    try:
        offset = 0
        while chunk := os.pread(fd, 1 << 20, offset):
            digest.update(chunk)
            view = memoryview(chunk)
            while view:
                view = view[os.write(out, view) :]
            offset += len(chunk)
        os.fsync(out)
    finally:
        os.close(out)
    return digest.hexdigest()


def forget(tx: TxDir, manifest: Manifest, paths: Iterable[str]) -> Manifest:
    """Drop entries whose snapshot is not the old content (in-place writes) from the manifest,
    so the rollback restores everything else and finishes instead of failing on them."""
    gone = set(paths)
    narrowed = Manifest(tuple(e for e in manifest.entries if e.path not in gone), manifest.listings)
    write_json(tx.manifest, narrowed.to_json())  # what recover would restore
    return narrowed
