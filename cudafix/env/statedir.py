"""Layout of ``<prefix>/.cudafix/``: the one place paths under it are named.

::

    .cudafix/lock                          filelock: one mutating run at a time
    .cudafix/transactions/<id>/journal.jsonl   fsync'd steps, written before each step
    .cudafix/transactions/<id>/manifest.json   what the snapshot holds, and how to verify it
    .cudafix/transactions/<id>/snapshot/<EnvPath>  hard links (or copies) of the pre-state
    .cudafix/transactions/<id>/post.json       post-state of touched paths at commit (for undo)
    .cudafix/cache/                        caches other layers may keep (tree, answers, host)
    .cudafix/cache/index.sqlite            the index of facts (ELF verdicts, literals, hashes)
    .cudafix/trash/<id>-<random>           old snapshots moved aside, being deleted
    .cudafix/trash-pause.lock              flock: a transaction pauses that deletion
    .cudafix/view/<EnvPath>                what an undo would leave, read by its dry run
"""

from __future__ import annotations

import calendar
import errno
import json
import os
import re
import secrets
import time
from array import array
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any, BinaryIO

from cudafix.faults import crash_point, fail_point, hooks_armed
from cudafix.model.errors import UnsafeState

STATE_DIR_NAME = ".cudafix"
INSTALLER_LOCK = ".lock"
"""uv's environment lock (``<venv>/.lock``, an exclusive flock for every ``uv pip`` change)."""
TRANSACTIONS = "transactions"
"""The transaction log's directory in ``.cudafix/``, one directory per transaction."""
TOOLS_STATE = frozenset({STATE_DIR_NAME, INSTALLER_LOCK})
"""Names in the prefix that hold tools' state, not the environment's: never read as part of
it. cudafix's first command makes ``.cudafix/`` and uv's first lock makes ``.lock``; neither
changes an answer."""
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


@dataclass(frozen=True)
class TxDir:
    """One transaction's directory."""

    root: Path

    @property
    def txid(self) -> str:
        return self.root.name

    @property
    def journal(self) -> Path:
        return self.root / "journal.jsonl"

    @property
    def manifest(self) -> Path:
        return self.root / "manifest.json"

    @property
    def snapshot(self) -> Path:
        return self.root / "snapshot"

    @property
    def post(self) -> Path:
        return self.root / "post.json"


@dataclass(frozen=True)
class StateDir:
    """The state directory of one environment."""

    prefix: Path

    @property
    def root(self) -> Path:
        return self.prefix / STATE_DIR_NAME

    @property
    def lock(self) -> Path:
        return self.root / "lock"

    @property
    def transactions(self) -> Path:
        return self.root / TRANSACTIONS

    @property
    def trash(self) -> Path:
        """Snapshots moved aside to be deleted (:mod:`cudafix.tx.trash`)."""
        return self.root / "trash"

    @property
    def cache(self) -> Path:
        return self.root / "cache"

    @property
    def index(self) -> Path:
        """The index of facts, one SQLite file (:mod:`cudafix.env.memo.index`)."""
        return self.cache / "index.sqlite"

    @property
    def tree_cache(self) -> Path:
        """Directory listings and parsed dist-infos (:mod:`cudafix.env.memo.treecache`)."""
        return self.cache / "tree-cache.json"

    @property
    def answers(self) -> Path:
        """Read-only commands' last answers (:mod:`cudafix.env.memo.answers`)."""
        return self.cache / "answers.json"

    @property
    def interpreter_cache(self) -> Path:
        """The target interpreter's last answer (:func:`cudafix.env.target.query_interpreter`)."""
        return self.cache / "interpreter.json"

    @property
    def host_cache(self) -> Path:
        """Host facts by the stat of their files (:mod:`cudafix.linker.hostcache`)."""
        return self.cache / "host-cache.json"

    @property
    def view(self) -> Path:
        """The environment as an undo would leave it, built of hard links and read to
        predict it (:func:`cudafix.tx.undo.restored_view`); there only while it is read."""
        return self.root / "view"

    def tx(self, txid: str) -> TxDir:
        return TxDir(self.transactions / txid)

    def transaction_ids(self) -> list[str]:
        """Every transaction id, oldest first (:func:`txid_order`: by the time in the id,
        not by name, so an id past year 9999 still sorts last; names cudafix did not make
        sort first).

        Only real directories count: a symlink in ``transactions/`` is not cudafix's, and a
        symlinked ``.cudafix`` or ``transactions`` is refused (:class:`UnsafeState`).
        """
        try:
            with open_dir(self.transactions) as fd, os.scandir(fd) as it:
                return sorted(
                    (e.name for e in it if e.is_dir(follow_symlinks=False)), key=txid_order
                )
        except FileNotFoundError:
            return []


_STAMP = "%Y%m%dT%H%M%S"
"""A transaction id's UTC second: written by :func:`new_txid`, read back by :func:`_txid_ns`."""


def new_txid(newest: str | None = None) -> str:
    """A unique transaction id that sorts after ``newest`` (the newest id already there):
    UTC time in ns, plus randomness.

    ``undo last`` and ``gc`` take the order of ids for the order of creation, so the time is
    read once: ``time.gmtime()`` reads a coarse clock that lags ``time_ns()`` by up to a
    tick, so the second from one and the nanoseconds from the other misordered about one id
    in 200. A clock set back (NTP, a VM resumed) still yields an id after ``newest``: one ns
    past it."""
    now = time.time_ns()
    was = _txid_ns(newest) if newest else None
    if was is not None and now <= was:
        now = was + 1
    seconds, ns = divmod(now, 10**9)
    stamp = time.strftime(_STAMP, time.gmtime(seconds))
    return f"{stamp}-{ns:09d}-{secrets.token_hex(3)}"


_TXID = re.compile(r"(\d{4,})(\d\d)(\d\d)T(\d\d)(\d\d)(\d\d)-(\d{9})-")
"""What :func:`new_txid` writes: the UTC second (a year past 9999 has more digits), then
its nanoseconds."""


def _txid_ns(txid: str) -> int | None:
    """The time a transaction id was made, in ns since the epoch; None for another name."""
    made = _TXID.match(txid)
    if made is None:
        return None
    year, month, day, hour, minute, second, ns = (int(g) for g in made.groups())
    if not (1 <= month <= 12 and 1 <= day <= calendar.monthrange(year % 400 or 400, month)[1]):
        return None  # a month 13, a day 32: not one cudafix made
    if hour > 23 or minute > 59 or second > 60:
        return None
    seconds = _days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second
    return seconds * 10**9 + ns


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date, any year (H. Hinnant's
    algorithm: ``calendar.timegm`` stops at year 9999)."""
    year -= month <= 2
    era = year // 400
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def txid_order(name: str) -> tuple[int, str]:
    """Sort key of transaction ids: the time each was made (a name cudafix did not make
    first, as if oldest), then the name."""
    made = _txid_ns(name)
    return (-1 if made is None else made, name)


def write_durably(fd: int, data: bytes) -> None:
    """All of ``data`` to ``fd`` (``os.write`` may write less than asked), then fsync."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.fsync(fd)


def fsync_dir(path: Path) -> None:
    """Make a directory entry (create, rename, unlink) durable."""
    with open_dir(path) as fd:
        os.fsync(fd)


def _state_split(path: Path) -> tuple[Path, tuple[str, ...]]:
    """(a directory opened normally, the components below it opened without following).

    Below the last ``.cudafix`` component every name, ``.cudafix`` included, must be a real
    directory; elsewhere (a RECORD in site-packages) the path is opened as given.
    """
    parts = path.parts
    if STATE_DIR_NAME not in parts:
        return path, ()
    at = len(parts) - 1 - parts[::-1].index(STATE_DIR_NAME)
    return Path(*parts[:at]), parts[at:]


def _unsafe(path: Path, exc: OSError) -> UnsafeState:
    return UnsafeState(
        f"{path} is a symlink, or not the directory cudafix expects; cudafix keeps its "
        "lock, journal and snapshots only in real files and directories inside the environment",
        context=[f"{exc.strerror}: {path}"],
        hint=f"remove {path} (cudafix did not make it), then retry",
    )


def _unwritable(path: Path, exc: OSError) -> UnsafeState:
    return UnsafeState(
        f"cannot create cudafix's state directory {path}: {exc.strerror}",
        hint="run cudafix as a user who can write the environment, or make it writable",
    )


@contextmanager
def open_dir(path: Path, *, create: bool = False, mode: int = 0o755) -> Iterator[int]:
    """An fd of directory ``path``; under ``.cudafix`` no component is a followed symlink.

    Each component below the base is opened relative to its parent's fd with
    ``O_NOFOLLOW``, so a symlink swapped in anywhere fails the open (:class:`UnsafeState`)
    instead of leading the lock, journal or snapshot outside the environment.
    ``create`` makes missing components (``mode``).
    """
    base, rel = _state_split(path)
    if create and not rel:
        base.mkdir(mode=mode, parents=True, exist_ok=True)
    fd = os.open(base, _DIR_FLAGS)
    try:
        here = base
        for name in rel:
            here = here / name
            if create:
                try:
                    os.mkdir(name, mode, dir_fd=fd)
                except FileExistsError:
                    pass
                except OSError as exc:
                    raise _unwritable(here, exc) from exc
            try:
                sub = os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise _unsafe(here, exc) from exc
                raise
            os.close(fd)
            fd = sub
        yield fd
    finally:
        os.close(fd)


def ensure_dir(path: Path, mode: int = 0o755) -> None:
    """Create directory ``path`` (and parents below ``.cudafix``) without following symlinks."""
    with open_dir(path, create=True, mode=mode):
        pass


def open_file(path: Path, flags: int, mode: int = 0o644) -> int:
    """``os.open`` of a file under a real state directory, the file itself not followed."""
    with open_dir(path.parent) as dfd:
        try:
            return os.open(path.name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dfd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise _unsafe(path, exc) from exc
            raise


def read_bytes(path: Path) -> bytes:
    """The bytes of a state file, read without following a symlink anywhere under ``.cudafix``."""
    fd = open_file(path, os.O_RDONLY)
    with os.fdopen(fd, "rb") as fh:
        return fh.read()


def write_atomic(path: Path, text: str | Iterable[str]) -> None:
    """Replace ``path`` durably: temp file, fsync, rename over (a new inode), fsync the dir.
    ``text``: the text, or its parts in order (:func:`json_parts`).

    A rename never writes through a hard link, so a snapshot sharing the old inode keeps
    the old bytes; an existing file keeps its mode. Under ``.cudafix`` nothing is followed.
    """
    with open_dir(path.parent) as dfd:
        try:
            mode = os.stat(path.name, dir_fd=dfd, follow_symlinks=False).st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o644
        tmp = f".{path.name}.{secrets.token_hex(4)}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp, flags, mode, dir_fd=dfd)
        try:
            try:
                parts = [text] if isinstance(text, str) else text
                if hooks_armed():
                    write_durably(fd, _half_written(fd, "".join(parts).encode("utf-8"), path))
                else:
                    _write_text(fd, parts)
            finally:
                os.close(fd)
            os.rename(tmp, path.name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            with suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            raise
        os.fsync(dfd)


_CHARS_AT_ONCE = 1 << 20
"""Characters of a text encoded at a time: a cache of hundreds of megabytes is never held
twice, as text and as bytes."""


def _write_text(fd: int, parts: Iterable[str]) -> None:
    """:func:`write_durably` of the text ``parts`` make, in UTF-8, encoded a part at a time."""
    for text in parts:
        for start in range(0, len(text), _CHARS_AT_ONCE):
            view = memoryview(text[start : start + _CHARS_AT_ONCE].encode("utf-8"))
            while view:
                view = view[os.write(fd, view) :]
    os.fsync(fd)


def _half_written(fd: int, data: bytes, path: Path) -> bytes:
    """Test hook: write the first half of ``data``, then fail or crash there (a full disk,
    a power cut mid-write); the half still to write."""
    half = len(data) // 2
    write_durably(fd, data[:half])
    fail_point("write", str(path))
    crash_point("write-half", str(path))
    return data[half:]


def save_cache_file(path: Path, text: str | Iterable[str]) -> bool:
    """Write a cache file under a ``.cudafix/`` directory; False (never raise) when it can't.

    Caches only speed things up, so an unwritable location is not an error; but they are
    never written outside ``.cudafix/`` or through a symlinked directory.
    """
    if STATE_DIR_NAME not in path.parts[:-1]:
        return False
    try:
        ensure_dir(path.parent)
        write_atomic(path, text)
    except (OSError, UnsafeState):
        return False
    return True


def load_cache(path: Path, fmt: str, version: int, *, own: bool = False) -> dict[str, Any] | None:
    """A cache file :func:`save_cache` wrote with this format and version, else None.

    The one way caches are read: never through a final symlink (a planted link could
    point anywhere), and a missing, corrupt or foreign file is only a cold start. ``own``:
    only a file this user owns (checked on the open descriptor), for what is printed as
    it was stored.
    """
    text = _cache_text(path, own=own)
    try:
        data = json.loads(text) if text is not None else None
    except ValueError:
        return None
    return data if _stamped(data, fmt, version) else None


def load_cache_lines(
    path: Path, fmt: str, version: int, *, header_bytes: int = -1
) -> tuple[dict[str, Any], Iterator[str]] | None:
    """A cache :func:`save_cache_lines` wrote with this format and version: its header and
    its lines, each left as text for the caller to parse, read one at a time (a cache of
    millions of rows is never one string); else None, as :func:`load_cache`. A header line
    longer than ``header_bytes`` (when not -1) is no header, and is not read whole. The
    lines raise ValueError where the file was cut short (a last line with no line feed) or
    is not UTF-8, and OSError where it cannot be read on."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    fh = os.fdopen(fd, "rb", buffering=_READ_BUFFER)
    header: Any = None
    with suppress(OSError, ValueError):
        first = fh.readline(header_bytes)
        header = json.loads(first.decode("utf-8")) if first.endswith(b"\n") else None
    if not _stamped(header, fmt, version):
        fh.close()
        return None
    return dict(header), _lines(fh)


_READ_BUFFER = 1 << 16
"""Bytes read at a time by :func:`load_cache_lines` (a longer line is read whole)."""


def _lines(fh: BinaryIO) -> Iterator[str]:
    """The lines left in ``fh``, each decoded less its line feed; closes it when done."""
    with fh:
        for line in fh:
            if not line.endswith(b"\n"):
                raise ValueError("cut short")
            yield line[:-1].decode("utf-8")


def _cache_text(path: Path, *, own: bool = False) -> str | None:
    """A cache file's text, read without following a final symlink (``own``: only a file
    this user owns); None when there is none to read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as fh:
            if own and os.fstat(fd).st_uid != os.geteuid():
                return None
            return fh.read().decode("utf-8")  # the bytes let go before the parse
    except (OSError, ValueError):
        return None


def _stamped(data: Any, fmt: str, version: int) -> bool:
    """Whether ``data`` is a JSON object of this cache's format and version."""
    return isinstance(data, dict) and data.get("format") == fmt and data.get("version") == version


def save_cache_lines(
    path: Path, fmt: str, version: int, header: Mapping[str, Any], lines: Iterable[str]
) -> bool:
    """Write a cache of ``lines`` (JSON texts: none holds a newline) after a header line,
    ``header`` with the format and version (:func:`save_cache_file`'s rules)."""
    head = compact_json({"format": fmt, "version": version, **header})
    feeds = chain.from_iterable((text, "\n") for text in lines)  # a long line is not copied
    return save_cache_file(path, chain([head, "\n"], feeds))


def save_cache(path: Path, fmt: str, version: int, body: Mapping[str, Any]) -> bool:
    """Write ``body`` with its format and version (:func:`save_cache_file`'s rules)."""
    payload = {"format": fmt, "version": version, **body}
    return save_cache_file(path, json_parts(payload))


_ITEMS_AT_ONCE = 4096
"""Items of a long JSON array or object written at a time (:func:`json_parts`)."""
_FEW = 8
"""An array of at most this many items is looked into for a long one (a record's columns)."""
_CHARS_AT_ONCE = 1 << 16
"""Characters of a long JSON string written at a time (a RECORD's hashes, one string)."""


def json_parts(value: Any) -> Iterator[str]:
    """``json.dumps(value, separators=(",", ":"))``, a part at a time, so that a cache of
    millions of rows is never one string: an array or object of more than
    :data:`_ITEMS_AT_ONCE` items is written that many at a time, a string of more than
    :data:`_CHARS_AT_ONCE` characters that many at a time, and so is any object, or array
    of at most :data:`_FEW` items, holding one; anything else in one piece."""
    return _parts(value, _holds_long(value))


def _parts(value: Any, long: bool) -> Iterator[str]:
    """:func:`json_parts` of ``value``, whose :func:`_holds_long` is ``long`` (each value's
    is asked once: a tree cache holds 23k rows)."""
    if not long or (isinstance(value, dict) and not all(isinstance(k, str) for k in value)):
        yield compact_json(value)
    elif isinstance(value, str):  # JSON escapes a character at a time: any cut is a seam
        yield '"'
        for start in range(0, len(value), _CHARS_AT_ONCE):
            yield compact_json(value[start : start + _CHARS_AT_ONCE])[1:-1]
        yield '"'
    elif isinstance(value, dict):
        yield "{"
        comma, run = "", dict[str, Any]()
        for key, item in value.items():
            if _holds_long(item):
                if run:
                    yield comma + compact_json(run)[1:-1]
                    comma, run = ",", {}
                yield comma + compact_json(key) + ":"
                comma = ","
                yield from _parts(item, True)
                continue
            run[key] = item
            if len(run) == _ITEMS_AT_ONCE:
                yield comma + compact_json(run)[1:-1]
                comma, run = ",", {}
        if run:
            yield comma + compact_json(run)[1:-1]
        yield "}"
    elif len(value) > _ITEMS_AT_ONCE:
        yield "["
        for start in range(0, len(value), _ITEMS_AT_ONCE):
            yield ("," if start else "") + compact_json(value[start : start + _ITEMS_AT_ONCE])[1:-1]
        yield "]"
    else:
        yield "["
        for i, item in enumerate(value):
            if i:
                yield ","
            yield from json_parts(item)
        yield "]"


def _holds_long(value: Any) -> bool:
    """An array or object of more than :data:`_ITEMS_AT_ONCE` items, a string of more than
    :data:`_CHARS_AT_ONCE` characters, or an object or an array of :data:`_FEW` items or
    fewer holding one."""
    if isinstance(value, str):
        return len(value) > _CHARS_AT_ONCE
    if not isinstance(value, _CONTAINERS):
        return False
    if len(value) > _ITEMS_AT_ONCE:
        return True
    inner = value.values() if isinstance(value, dict) else value if len(value) <= _FEW else ()
    return any(_holds_long(v) for v in inner if isinstance(v, (str, *_CONTAINERS)))


def _as_list(value: object) -> list[Any]:
    """An array of numbers (a RECORD's size column) as the JSON array it is written as."""
    if isinstance(value, array):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


_CONTAINERS = (list, tuple, dict, array)
compact_json = json.JSONEncoder(separators=(",", ":"), default=_as_list).encode
"""``json.dumps(value, separators=(",", ":"))``, without making an encoder each time; an
:class:`array.array` is written as the JSON array of its numbers."""
