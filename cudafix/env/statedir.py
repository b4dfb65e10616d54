"""Layout of ``<prefix>/.cudafix/``: the one place paths under it are named.

::

    .cudafix/lock                          filelock: one mutating run at a time
    .cudafix/transactions/<id>/journal.jsonl   fsync'd steps, written before each step
    .cudafix/transactions/<id>/manifest.json   what the snapshot holds, and how to verify it
    .cudafix/transactions/<id>/snapshot/<EnvPath>  hard links (or copies) of the pre-state
    .cudafix/transactions/<id>/post.json       post-state of touched paths at commit (for undo)
    .cudafix/cache/                        caches other layers may keep (tree, ELF, hashes)
"""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

STATE_DIR_NAME = ".cudafix"


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
        return self.root / "transactions"

    @property
    def cache(self) -> Path:
        return self.root / "cache"

    @property
    def hash_cache(self) -> Path:
        """sha256 of files by stat key (:class:`cudafix.env.hashing.HashCache`)."""
        return self.cache / "hash-cache.json"

    @property
    def elf_cache(self) -> Path:
        """Parsed ELF dynamic sections by stat key (:mod:`cudafix.linker.elfindex`)."""
        return self.cache / "elf-cache.json"

    @property
    def tree_cache(self) -> Path:
        """Directory listings and parsed dist-infos (:mod:`cudafix.env.treecache`)."""
        return self.cache / "tree-cache.json"

    @property
    def interpreter_cache(self) -> Path:
        """The target interpreter's last answer (:func:`cudafix.env.target.query_interpreter`)."""
        return self.cache / "interpreter.json"

    @property
    def host_cache(self) -> Path:
        """Host facts by the stat of their files (:mod:`cudafix.linker.hostcache`)."""
        return self.cache / "host-cache.json"

    def tx(self, txid: str) -> TxDir:
        return TxDir(self.transactions / txid)

    def transaction_ids(self) -> list[str]:
        """Every transaction id, oldest first (ids sort by creation time)."""
        if not self.transactions.is_dir():
            return []
        return sorted(p.name for p in self.transactions.iterdir() if p.is_dir())


def new_txid() -> str:
    """A sortable, unique transaction id: UTC time plus randomness."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    return f"{stamp}-{time.time_ns() % 10**9:09d}-{secrets.token_hex(3)}"


def fsync_dir(path: Path) -> None:
    """Make a directory entry (create, rename, unlink) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` durably: temp file, fsync, rename over (a new inode), fsync the dir.

    A rename never writes through a hard link, so a snapshot sharing the old inode keeps
    the old bytes.
    """
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        Path(tmp).replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            Path(tmp).unlink()
        raise
    fsync_dir(path.parent)


def save_cache_file(path: Path, text: str) -> bool:
    """Write a cache file under a ``.cudafix/`` directory; False (never raise) when it can't.

    Caches only speed things up, so an unwritable location is not an error; but they are
    never written outside ``.cudafix/`` or through a symlinked directory.
    """
    parts = path.parts
    if STATE_DIR_NAME not in parts[:-1]:
        return False
    directory = Path(*parts[: parts.index(STATE_DIR_NAME) + 1])
    try:
        for name in (None, *parts[parts.index(STATE_DIR_NAME) + 1 : -1]):
            directory = directory / name if name else directory
            if directory.is_symlink():
                return False
            directory.mkdir(exist_ok=True)
        write_atomic(path, text)
    except OSError:
        return False
    return True
