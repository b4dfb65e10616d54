"""The post-state: what each touched path was when a transaction committed, for ``undo``.

Undo restores bytes, it never merges: it refuses when anything a transaction left has
changed since its commit, and this is the cheap identity (lstat, no hashing) it compares.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from cudafix.tx.manifest import Manifest
from cudafix.tx.snapshot import _join, _listing, expand


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


def unchanged(manifest: Manifest, after: Mapping[str, list[Any]]) -> bool:
    """Whether ``after`` (:func:`after_state`) is the state the snapshot recorded: no path
    appeared, went, or changed kind, size, mode, inode or mtime; a symlink still points
    where it did. (A write in place that keeps size and mtime is
    :func:`cudafix.tx.restore.written_in_place`'s to find.)"""
    implied = _implied(manifest)
    links = {e.path: e.target for e in manifest.entries if e.kind == "symlink"}
    for path, state in after.items():
        if implied.get(path) == state:
            continue
        if path in links and state[:1] == ["other"] and state[5] == links[path]:
            continue
        return False
    return True
