"""RECORD-style sha256 of files in the environment, remembered by stat key.

CUDA libraries are hundreds of megabytes each, so a file is hashed in chunks and only
once per (dev, ino, size, mtime_ns); the digests survive runs in the environment's index of
facts (:mod:`cudafix.env.memo.index`). A symlink is followed only when its target stays
inside the environment.

ctime is not in the key but kept beside the digest. A hard link (``cp -al``, a
transaction's snapshot) or a chmod moves it without touching a byte, and with it in the key
every run after a snapshot or on a linked copy re-read gigabytes. Installers write new
inodes or move mtime; a write in place that puts size and mtime back moves only ctime, so
the check under the lock (``strict``) still re-reads a file whose ctime moved.
"""

from __future__ import annotations

import base64
import hashlib
import os
import stat
from pathlib import Path

from cudafix.env.memo.index import FactIndex, StatKey, stat_key
from cudafix.env.record import is_inside
from cudafix.model.names import EnvPath

CHUNK = 1 << 20

Known = tuple[str, int]
"""(digest, ctime_ns when the bytes were read)."""


def encode_digest(raw: bytes) -> str:
    """A sha256 digest as RECORD spells it: urlsafe base64, unpadded (PEP 376)."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def hash_bytes(data: bytes) -> str:
    """RECORD-encoded sha256 of bytes in memory (wheel builders write RECORD with it)."""
    return encode_digest(hashlib.sha256(data).digest())


def hash_fd(fd: int) -> str:
    """Stream an open file through sha256."""
    h = hashlib.sha256()
    while chunk := os.read(fd, CHUNK):
        h.update(chunk)
    return encode_digest(h.digest())


def hash_path(path: Path) -> str | None:
    """RECORD-encoded sha256 of a regular file, never through a final symlink; None if absent."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        return hash_fd(fd)
    finally:
        os.close(fd)


def _key(st: os.stat_result) -> StatKey:
    return stat_key(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class HashCache:
    """Digest files of one environment, remembering results by stat identity.

    Mutable on purpose: it is a memo, not part of the environment's frozen view.
    """

    def __init__(
        self, prefix: Path, index: FactIndex | None = None, *, strict: bool = False
    ) -> None:
        self.prefix = prefix
        self.index = index
        """Where digests are looked up and :meth:`save` keeps the new ones (None: nowhere)."""
        self.strict = strict
        """Trust an entry only while the file's ctime is the one it was read at: for the
        check under the lock, which must see a write in place that restored size and mtime.
        Otherwise (doctor, planning) a ctime-only change reuses the digest; the plan it
        leads to is checked strictly before anything changes."""
        self._real_prefix = Path(os.path.realpath(prefix))
        self._entries: dict[StatKey, Known | None] = {}
        """Digests asked of the index this run (None: it had none), and those read now."""
        self._learnt: dict[StatKey, Known] = {}
        self.hashed = 0
        """Files whose bytes this cache read (cache misses of non-empty files)."""

    def __call__(self, path: EnvPath) -> str | None:
        """Digest of the regular file at ``path``; None if missing, not a file, or escaping."""
        target = self._regular_file(self.prefix / path)
        if target is None:
            return None
        try:
            fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return None
            key = _key(st)
            known = self._known(key)
            if known is not None and (not self.strict or known[1] == st.st_ctime_ns):
                return known[0]  # a ctime-only hit leaves the entry as read, never vouched for
            digest = hash_fd(fd)
            self._entries[key] = self._learnt[key] = (digest, st.st_ctime_ns)
            self.hashed += st.st_size > 0
            return digest
        except OSError:
            return None
        finally:
            os.close(fd)

    def _regular_file(self, full: Path) -> Path | None:
        """``full`` itself, or its symlink target when that resolves inside the environment."""
        try:
            st = full.lstat()
        except OSError:
            return None
        if not stat.S_ISLNK(st.st_mode):
            return full
        real = Path(os.path.realpath(full))
        return real if is_inside(self._real_prefix, real) else None

    def _known(self, key: StatKey) -> Known | None:
        if key not in self._entries:
            self._entries[key] = self.index.digest(key) if self.index is not None else None
        return self._entries[key]

    def __len__(self) -> int:
        """Digests known to this run."""
        return sum(known is not None for known in self._entries.values())

    def save(self) -> bool:
        """Keep the digests read this run in the index; False where they could not be kept.

        Nothing is written when this run hashed nothing new (a warm run must not fsync).
        """
        if not self._learnt:
            return True
        if self.index is None or not self.index.save_digests(self._learnt):
            return False
        self._learnt = {}
        return True
