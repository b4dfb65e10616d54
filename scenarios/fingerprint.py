"""Read-only fingerprint of a whole environment, to prove a rollback or dry run byte-identical."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from cudafix.env.statedir import STATE_DIR_NAME
from cudafix.tx.snapshot import sha256_file

Fingerprint = dict[str, tuple[object, ...]]


def _one(path: Path) -> tuple[object, ...]:
    st = os.lstat(path)
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISLNK(st.st_mode):
        return ("symlink", str(path.readlink()))
    if stat.S_ISDIR(st.st_mode):
        return ("dir", mode)
    if stat.S_ISREG(st.st_mode):
        return ("file", mode, st.st_size, sha256_file(path))
    return ("other", mode)


def fingerprint(prefix: Path) -> Fingerprint:
    """Type, mode, size, sha256, link target of every path under ``prefix`` but .cudafix/."""
    out: Fingerprint = {}
    for root, dirs, files in os.walk(prefix):
        here = Path(root)
        if here == prefix and STATE_DIR_NAME in dirs:
            dirs.remove(STATE_DIR_NAME)
        for name in (*dirs, *files):
            path = here / name
            out[path.relative_to(prefix).as_posix()] = _one(path)
    return out


def diff_fingerprints(a: Fingerprint, b: Fingerprint) -> list[str]:
    """Readable differences between two fingerprints (for assertion messages)."""
    lines = [f"- {p} {a[p]}" for p in sorted(a.keys() - b.keys())]
    lines += [f"+ {p} {b[p]}" for p in sorted(b.keys() - a.keys())]
    lines += [f"~ {p} {a[p]} -> {b[p]}" for p in sorted(a.keys() & b.keys()) if a[p] != b[p]]
    return lines
