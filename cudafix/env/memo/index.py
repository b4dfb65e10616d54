"""The index of facts: what was read from each file of an environment, by its stat key.

One SQLite file, ``<prefix>/.cudafix/cache/index.sqlite`` (the standard library's
``sqlite3``, write-ahead log), that users and tools can inspect. Per path the stat key the
facts were read at (device, inode, size, mtime) and what was read: the ELF verdict
(:mod:`cudafix.linker.elfindex`: ``plain`` for a file without ELF magic, else the verdict as
``elf.verdict_to_json`` spells it) and the soname literals of a Python source
(:mod:`cudafix.env.pysources`). Per stat key, the sha256 of the bytes and the ctime they
were read at (:class:`cudafix.env.hashing.HashCache`). A fact is given back only while its
file's key is the one it was read at; a path whose key moved loses every fact read before.
A fact of a file whose mtime lies within ``RACY_NS`` of the index's opening is not kept
(git's "racy clean" rule, as the tree cache applies it): file times come from a coarse
clock, so a second write in the same tick, of the same size, would leave the key as it was.

Only ever a speed-up, never trusted: a file that is not a regular file this user owns
(a symlink, another user's), that is not an SQLite database, or that another program or
another version of this schema wrote, is removed and built again; where it cannot be (an
environment cudafix may not write), facts are read from the files each time. Writes are
short transactions; one that would wait on another process is dropped.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import time
from collections.abc import Iterable, Mapping
from contextlib import suppress
from pathlib import Path
from typing import Any

from cudafix.env.memo.stats import RACY_NS
from cudafix.env.statedir import StateDir, ensure_dir, open_dir
from cudafix.model.errors import UnsafeState

APPLICATION_ID = 0x43465846
"""``PRAGMA application_id`` of cudafix's index ("CFXF"): a database without it is not ours."""
SCHEMA_VERSION = 1
"""``PRAGMA user_version``: another number is another layout, rebuilt from scratch. Raise it
too when what a reader stores changes (``linker.elf.verdict_to_json``, what
``linker.elf.read_elf`` or ``env.pysources.source_literals`` find), so no fact read by an
older reader is given back."""
BUSY_MS = 500
"""How long a write waits for another process's; past it the write is dropped."""
PLAIN = "plain"
"""``files.elf_kind`` of a file read and found to have no ELF magic."""
UNREAD = "unread"
"""``files.elf_kind`` of a file no loader could load, never read: its key is kept, so what
was read from its bytes before (a digest) is forgotten when it changes."""

StatKey = tuple[int, int, int, int]
"""(device, inode, size, mtime_ns), each as SQLite stores it (:func:`stat_key`)."""
ElfRow = tuple[StatKey, str, str | None]
"""(key, kind, body): ``kind`` is :data:`PLAIN`, ``elf`` or ``problem``; ``body`` JSON text."""

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS files (
        path TEXT PRIMARY KEY,
        dev INTEGER NOT NULL, ino INTEGER NOT NULL,
        size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL,
        elf_kind TEXT, elf_body TEXT,
        literals TEXT
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS digests (
        dev INTEGER NOT NULL, ino INTEGER NOT NULL,
        size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL,
        sha256 TEXT NOT NULL, ctime_ns INTEGER NOT NULL,
        PRIMARY KEY (dev, ino, size, mtime_ns)
    ) WITHOUT ROWID""",
)
_COLUMNS = {
    "files": ("path", "dev", "ino", "size", "mtime_ns", "elf_kind", "elf_body", "literals"),
    "digests": ("dev", "ino", "size", "mtime_ns", "sha256", "ctime_ns"),
}
"""The layout :data:`_SCHEMA` makes: a file with other tables is another program's."""
_PUT_ELF = """INSERT INTO files (path, dev, ino, size, mtime_ns, elf_kind, elf_body)
    VALUES (?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (path) DO UPDATE SET
        literals = CASE WHEN files.dev = excluded.dev AND files.ino = excluded.ino
            AND files.size = excluded.size AND files.mtime_ns = excluded.mtime_ns
            THEN files.literals END,
        dev = excluded.dev, ino = excluded.ino, size = excluded.size,
        mtime_ns = excluded.mtime_ns,
        elf_kind = excluded.elf_kind, elf_body = excluded.elf_body"""
"""Store a verdict; the path's literals stay only while its key is the one they were read at."""
_PUT_LITERALS = """INSERT INTO files (path, dev, ino, size, mtime_ns, literals)
    VALUES (?, ?, ?, ?, ?, ?)
    ON CONFLICT (path) DO UPDATE SET
        elf_kind = CASE WHEN files.dev = excluded.dev AND files.ino = excluded.ino
            AND files.size = excluded.size AND files.mtime_ns = excluded.mtime_ns
            THEN files.elf_kind END,
        elf_body = CASE WHEN files.dev = excluded.dev AND files.ino = excluded.ino
            AND files.size = excluded.size AND files.mtime_ns = excluded.mtime_ns
            THEN files.elf_body END,
        dev = excluded.dev, ino = excluded.ino, size = excluded.size,
        mtime_ns = excluded.mtime_ns, literals = excluded.literals"""
"""Store literals; the path's verdict stays only while its key is the one it was read at."""
_FORGET_DIGEST = "DELETE FROM digests WHERE dev = ? AND ino = ? AND size = ? AND mtime_ns = ?"


def _i64(value: int) -> int:
    """A device or inode number as SQLite's signed 64-bit integer (one to one)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def stat_key(dev: int, ino: int, size: int, mtime_ns: int) -> StatKey:
    """The key facts are stored and compared under."""
    return (_i64(dev), _i64(ino), size, mtime_ns)


class FactIndex:
    """One environment's index; :meth:`open` it, or :meth:`none` for one that keeps nothing.

    Every read answers only what was stored (an empty answer when the index is unusable),
    every write says whether it was kept; neither raises.
    """

    def __init__(self, conn: sqlite3.Connection | None, path: Path | None = None) -> None:
        self._conn = conn
        self.path = path
        """The file, or None when nothing is kept between runs."""
        self.settled_before = time.time_ns() - RACY_NS
        """Facts of files with an mtime from here on are not kept: read before any of them,
        this instant's clock tick may still bring a write their key would not show."""

    @classmethod
    def none(cls) -> FactIndex:
        """An index that remembers nothing: every fact is read from the files."""
        return cls(None)

    @classmethod
    def open(cls, prefix: Path) -> FactIndex:
        """The index of the environment at ``prefix``, built anew when untrusted; one that
        keeps nothing where cudafix may not write ``.cudafix/``."""
        path = StateDir(prefix).index
        try:
            ensure_dir(path.parent)
            _remove_untrusted(path)
            conn = _connect(path)
            if conn is None:  # not this schema's index: built again
                _remove(path)
                conn = _connect(path)
        except (OSError, UnsafeState, sqlite3.Error):  # busy, read-only, unwritable
            return cls.none()
        return cls(conn, path) if conn is not None else cls.none()

    def copy_to(self, prefix: Path) -> None:
        """Make what this index holds the index of ``prefix``: a copy of this environment
        made of hard links, with the same paths and stat keys, read as warm as this one
        (nothing where either cannot be used)."""
        if self._conn is None:
            return
        with FactIndex.open(prefix) as dest:
            if dest._conn is not None:
                with suppress(sqlite3.Error):
                    self._conn.backup(dest._conn)

    @property
    def kept(self) -> bool:
        """Whether facts survive this run."""
        return self._conn is not None

    def close(self) -> None:
        """Close the file (the last one out folds the write-ahead log into it)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> FactIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- ELF verdicts -------------------------------------------------------------------

    def elf_rows(self) -> dict[str, ElfRow | None]:
        """Every path the index knows: its ELF verdict as stored, with the key it was read
        at; None for a path whose verdict was never stored."""
        query = "SELECT path, dev, ino, size, mtime_ns, elf_kind, elf_body FROM files"
        rows = self._read(query, ())
        return {r[0]: ((r[1], r[2], r[3], r[4]), r[5], r[6]) if r[5] else None for r in rows}

    def save_elf(
        self, fresh: Mapping[str, ElfRow], gone: Iterable[str] = (), moved: Iterable[StatKey] = ()
    ) -> bool:
        """Store the verdicts just read; forget every fact of the paths ``gone``, and the
        digests of the keys ``moved`` (those a path was read at before it changed or went:
        no file holds those bytes under that key now, so the table keeps only what may be
        asked again)."""
        rows = [
            (p, *key, kind, body) for p, (key, kind, body) in fresh.items() if self._keeps(p, key)
        ]
        forget = [(p,) for p in gone if _storable(p)]
        return self._write(
            [
                (_PUT_ELF, rows),
                ("DELETE FROM files WHERE path = ?", forget),
                (_FORGET_DIGEST, list(set(moved))),
            ]
        )

    # --- Python sources -----------------------------------------------------------------

    def literal_rows(self) -> dict[str, tuple[StatKey, str]]:
        """Every path's stored soname literals (newline-separated), with the key they were
        read at."""
        query = "SELECT path, dev, ino, size, mtime_ns, literals FROM files"
        rows = self._read(query + " WHERE literals IS NOT NULL", ())
        return {r[0]: ((r[1], r[2], r[3], r[4]), r[5]) for r in rows}

    def save_literals(self, fresh: Mapping[str, tuple[StatKey, str]]) -> bool:
        rows = [(p, *key, names) for p, (key, names) in fresh.items() if self._keeps(p, key)]
        return self._write([(_PUT_LITERALS, rows)])

    # --- digests ------------------------------------------------------------------------

    def digest(self, key: StatKey) -> tuple[str, int] | None:
        """(sha256, ctime_ns it was read at) of the bytes of the file with ``key``."""
        query = "SELECT sha256, ctime_ns FROM digests WHERE dev = ? AND ino = ? AND size = ?"
        query += " AND mtime_ns = ?"
        rows = self._read(query, key)
        return (str(rows[0][0]), int(rows[0][1])) if rows else None

    def save_digests(self, fresh: Mapping[StatKey, tuple[str, int]]) -> bool:
        rows = [(*k, digest, ctime) for k, (digest, ctime) in fresh.items() if self._keeps("", k)]
        put = "INSERT OR REPLACE INTO digests VALUES (?, ?, ?, ?, ?, ?)"
        return self._write([(put, rows)])

    # --- plumbing -----------------------------------------------------------------------

    def _keeps(self, path: str, key: StatKey) -> bool:
        """Whether a fact read under ``key`` may be kept: its file settled (mtime) before
        the index was opened, and its path can be a key."""
        return key[3] < self.settled_before and _storable(path)

    def _read(self, query: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        if self._conn is None:
            return []
        try:
            return self._conn.execute(query, args).fetchall()
        except sqlite3.Error as exc:
            self._failed(exc)
            return []

    def _write(self, batches: list[tuple[str, list[tuple[Any, ...]]]]) -> bool:
        """One short transaction; dropped (False) when it fails or would wait too long."""
        if self._conn is None:
            return False
        if not any(rows for _, rows in batches):
            return True
        try:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                for sql, rows in batches:
                    if rows:
                        self._conn.executemany(sql, rows)
                self._conn.execute("COMMIT")
            except BaseException:
                with suppress(sqlite3.Error):
                    self._conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            self._failed(exc)
            return False
        return True

    def _failed(self, exc: sqlite3.Error) -> None:
        """A damaged file is built again, empty (this read answers nothing); a busy or
        read-only one only loses this read or write."""
        if isinstance(exc, sqlite3.OperationalError):
            return
        self.close()
        if type(exc) is sqlite3.DatabaseError and self.path is not None:  # damaged, not ours
            with suppress(OSError, UnsafeState, sqlite3.Error):
                _remove(self.path)
                self._conn = _connect(self.path)


def _storable(path: str) -> bool:
    """Whether ``path`` can be a key: a name of bytes that are not UTF-8 (which the walk
    keeps as surrogates) cannot, and its file is read every time."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _connect(path: Path) -> sqlite3.Connection | None:
    """A connection to the index at ``path`` (a new one made); None when the file there is
    not this schema's index. Raises ``sqlite3.OperationalError`` when it cannot be used now
    (busy, read-only): that is no reason to remove it."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=BUSY_MS / 1000)
    try:
        if _ours(conn):
            conn.execute("PRAGMA synchronous = NORMAL")
            return conn
    except sqlite3.OperationalError:
        conn.close()
        raise
    except sqlite3.Error:  # not a database, damaged
        pass
    conn.close()
    return None


def _ours(conn: sqlite3.Connection) -> bool:
    """Whether ``conn`` is this schema's index; a new, empty file is made one."""

    def pragma(name: str) -> int:
        return int(conn.execute(f"PRAGMA {name}").fetchone()[0])

    if pragma("page_count") == 0:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("BEGIN IMMEDIATE")
        try:
            if pragma("user_version") == 0:
                for ddl in _SCHEMA:
                    conn.execute(ddl)
                conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            with suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise
    if pragma("application_id") != APPLICATION_ID or pragma("user_version") != SCHEMA_VERSION:
        return False
    return all(
        [row[1] for row in conn.execute(f"PRAGMA table_info({table})")] == list(columns)
        for table, columns in _COLUMNS.items()
    )


_SIDE_FILES = ("", "-wal", "-shm", "-journal")


def _remove_untrusted(path: Path) -> None:
    """Remove the index (and its log) unless each is a regular file this user owns, and
    give this environment a copy of its own where one is shared.

    SQLite opens what a name points to: a symlink planted there could lead it anywhere, and
    another user's file (or log) is never read. SQLite also writes in place, so an index
    with other hard links (a ``cp -al`` copy of the environment shares it with the original)
    would write the other environment's index too: it is copied first (its shared log
    dropped: the index is only a speed-up). Raises OSError where it cannot remove one.
    """
    with open_dir(path.parent) as dfd:
        for suffix in _SIDE_FILES:
            name = path.name + suffix
            try:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                if suffix:
                    os.unlink(name, dir_fd=dfd)
                else:
                    _remove(path)
                    return
            elif st.st_nlink > 1:
                if suffix:
                    os.unlink(name, dir_fd=dfd)
                else:
                    _unshare(name, dfd)


def _unshare(name: str, dfd: int) -> None:
    """Replace the file ``name`` (in the directory open as ``dfd``) by a copy of its bytes,
    so writing it writes no other hard link's file."""
    copy = f"{name}.unshared-{os.getpid()}"
    src = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
    try:
        made = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        with (
            os.fdopen(src, "rb") as reader,
            os.fdopen(os.open(copy, made, 0o600, dir_fd=dfd), "wb") as writer,
        ):
            shutil.copyfileobj(reader, writer, 1 << 20)  # every byte: short writes retried
        os.replace(copy, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(copy, dir_fd=dfd)
        raise


def _remove(path: Path) -> None:
    """The index and its side files, gone (to be built again)."""
    with open_dir(path.parent) as dfd:
        for suffix in _SIDE_FILES:
            with suppress(FileNotFoundError):
                os.unlink(path.name + suffix, dir_fd=dfd)
