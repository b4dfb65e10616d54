"""What a snapshot holds: one entry per touched path, and each touched directory's names.

The manifest is the truth a rollback restores from, so its codec validates every field: a
tampered manifest can never make a restore act outside the environment. :func:`check_path`
is the rule every path a transaction acts on passes first (inside the prefix, no symlinked
ancestor).
"""

from __future__ import annotations

import json
import os
import posixpath
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from cudafix.env.statedir import STATE_DIR_NAME, TxDir, read_bytes, write_atomic
from cudafix.model.errors import DamagedState

KINDS = frozenset({"file", "symlink", "dir", "fifo", "absent"})


class Entry(NamedTuple):
    """One snapshotted path, with what it takes to prove a restore byte-identical.

    A named tuple rather than a frozen dataclass, as ``FileStat`` is: ``run`` makes one per
    file of the environment (22k on a torch venv) before its command starts, and a tuple
    is several times cheaper to make.
    """

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
    slot: int = -1
    """A file's number in the store, which keeps it by that number alone (:func:`stored`),
    so a snapshot makes no directory per snapshotted one. -1: a snapshot taken before the
    store was flat, which mirrors the prefix (the file is kept at its own path there)."""


SLOTS_PER_DIR = 128
"""Files per directory of the store: a link into an ext4 directory past one block (about
250 names) costs twice one into a smaller one, so slots go 128 to a directory."""


def stored(e: Entry) -> str:
    """Where ``e``'s snapshot of a file is kept, relative to the transaction's store
    (:attr:`TxDir.snapshot`): every reader of the store goes through this. Slot ``n`` is
    ``{n // 128}/{n}``; an entry without a slot is at its own path (a mirrored store)."""
    return slot_name(e.slot) if e.slot >= 0 else e.path


def slot_name(slot: int) -> str:
    """The name of slot ``slot`` in the store (:func:`stored`)."""
    return f"{slot // SLOTS_PER_DIR}/{slot}"


@dataclass(frozen=True)
class Manifest:
    """Everything a snapshot holds; ``listings`` names what each touched directory held."""

    entries: tuple[Entry, ...]
    listings: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        # one row per entry under one list of field names: a whole-venv manifest holds 24k
        # entries, and a dict per entry doubled its size and its encoding time. An entry is
        # a named tuple, which JSON writes as the array of its fields in order: no copy
        rows = list(self.entries)
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


FIELDS = Entry._fields


def _entry_dicts(data: Mapping[str, Any]) -> Iterator[Any]:
    """The entries of either form: rows under ``fields`` (written now), or one dict per
    entry (written before; a transaction left pending by an older cudafix still restores).
    Rows under fewer fields (written before one was added) take the others' defaults."""
    if "rows" not in data:
        yield from data["entries"]
        return
    names = data["fields"]
    if (
        not isinstance(names, list)
        or not all(isinstance(n, str) for n in names)
        or set(names) - set(FIELDS)
        or len(set(names)) != len(names)
        or "path" not in names
    ):
        raise ValueError(f"unknown manifest fields {str(names)[:80]}")
    for row in data["rows"]:
        if not isinstance(row, list) or len(row) != len(names):
            raise ValueError(f"not a snapshot row: {str(row)[:80]}")
        yield dict(zip(names, row, strict=True))


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
    "slot": (int,),
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
    if entry.slot < -1 or (entry.slot != -1 and entry.kind != "file"):
        raise ValueError(f"entry {entry.path!r}: kind {entry.kind!r} in store slot {entry.slot}")
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
    return next(checked(prefix, [path]))[1]


def checked(prefix: Path, paths: Iterable[str]) -> Iterator[tuple[str, str | None]]:
    """Each of ``paths`` with :func:`check_path`'s answer, each ancestor directory asked
    once: a plan names every path of what it removes (24k for a torch venv)."""
    base = str(prefix)  # str and os.path, not pathlib: this runs for every path a plan names
    through: dict[str, bool] = {}
    for path in paths:
        why = path_syntax(path)
        cut = path.find("/") if why is None else -1
        while cut != -1:
            parent = path[:cut]
            if parent not in through:
                through[parent] = os.path.islink(f"{base}/{parent}")  # noqa: PTH114 - hot path
            if through[parent]:
                why = f"{path!r}: goes through the symlink {parent}"
                break
            cut = path.find("/", cut + 1)
        yield path, why


ROOT = ""
"""The listing key of the prefix itself (``run`` snapshots the whole environment)."""


def write_json(path: Path, value: Any) -> None:
    """Write JSON atomically and durably (compact: a whole-venv manifest is 5 MB, written
    before ``run``'s command starts)."""
    write_atomic(path, json.dumps(value, sort_keys=True, separators=(",", ":")))


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
