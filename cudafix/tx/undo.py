"""``cudafix undo TXID``: restore a committed transaction's snapshot, as a new transaction.

Refused when anything the old transaction left has changed since its commit (its
post-state) or its snapshot was modified: undo restores bytes, it never merges.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from cudafix.env.memo.index import FactIndex
from cudafix.env.statedir import STATE_DIR_NAME, StateDir, TxDir, ensure_dir, open_file
from cudafix.env.target import interpreter, layout_site_packages
from cudafix.model.errors import DamagedState, StalePlan, UnsafeState, UsageError
from cudafix.model.names import site_relative
from cudafix.model.probe import ProbeSpec
from cudafix.model.transaction import (
    DEFAULT_LOCK_TIMEOUT,
    OnEvent,
    TransactionResult,
    UndoPreview,
    quiet,
)
from cudafix.tx import journal, poststate, steps
from cudafix.tx.context import RunContext, StepFailed
from cudafix.tx.history import entry, existing
from cudafix.tx.lock import acquired
from cudafix.tx.manifest import Manifest, load_json, path_syntax, stored
from cudafix.tx.manifest import load as load_manifest
from cudafix.tx.restore import mismatch, remove_path
from cudafix.tx.restore import restore as restore_snapshot
from cudafix.tx.snapshot import _link_or_copy

Judge = Callable[[], list[str]]
"""What the environment looks like after the restore: problems doctor did not find before."""


def _nothing_new() -> list[str]:
    return []


def preview(prefix: Path, txid: str) -> UndoPreview:
    """What undoing ``txid`` would do, read without the lock (``undo --dry-run`` and the
    plan shown before asking); :class:`UsageError` when it cannot be undone at all."""
    old = existing(Path(prefix), txid)
    done = entry(old)
    if done.state != "committed" or not done.snapshot or not old.post.is_file():
        raise UsageError(f"transaction {txid} is {done.state} and has no snapshot to undo")
    try:
        manifest = load_manifest(old)
        post = _post_state(old, manifest)
        conflicts = tuple(_undo_conflicts(Path(prefix), old, manifest, post))
    except PermissionError:
        return UndoPreview(entry=done, paths=0, conflicts=(), readable=False)
    restores = frozenset(e.path for e in manifest.entries if e.kind in ("file", "symlink"))
    return UndoPreview(entry=done, paths=len(post), conflicts=conflicts, restores=restores)


@contextlib.contextmanager
def restored_view(
    prefix: Path, txid: str, lock_timeout: float = DEFAULT_LOCK_TIMEOUT
) -> Iterator[Path]:
    """The environment as undoing ``txid`` would leave it, to be read and not changed:
    every path of the prefix (cudafix's own state left out) hard-linked under
    ``.cudafix/view/``, with ``txid``'s snapshot restored into it as the undo restores the
    prefix. Built and read under cudafix's lock: a link moves a file's ctime, which a
    transaction in progress would take for a write in place. Removed after, also on an
    error or Ctrl-C (and, before it is built, one a killed run left)."""
    prefix = Path(prefix)
    state = StateDir(prefix)
    lock = acquired(prefix, state.lock, lock_timeout)
    try:
        _remove_view(state.view)
        try:
            ensure_dir(state.view, mode=0o700)
            _mirror(prefix, state.view)
            _seed(state, StateDir(state.view))
            old = existing(prefix, txid)
            left = restore_snapshot(state.view, old, load_manifest(old)).left
        except OSError as exc:
            raise UnsafeState(
                f"cannot build the state undoing {txid} would leave, under {state.view} "
                f"({exc.strerror or exc}); nothing was changed",
                hint="free space or permissions under .cudafix/, then retry",
            ) from exc
        if left:
            raise UnsafeState(
                f"cannot build the state undoing {txid} would leave ({left[0]}); "
                "nothing was changed"
            )
        yield state.view
    finally:
        try:
            _remove_view(state.view)
        finally:
            lock.release()


def _mirror(prefix: Path, view: Path) -> None:
    """Hard links (copies where linking is impossible) of the prefix's regular files under
    ``view``, its directories made again with their modes (owner-writable) and its
    symlinks as symlinks, never followed; cudafix's state and other kinds left out."""
    for top, dirs, files in os.walk(prefix):  # symlinked directories listed, not entered
        root = Path(top)
        if root == prefix:
            dirs[:] = [d for d in dirs if d != STATE_DIR_NAME]
        into = view / root.relative_to(prefix)
        for name in (*dirs, *files):
            src, dst = root / name, into / name
            st = src.lstat()
            if stat.S_ISDIR(st.st_mode):
                dst.mkdir()
                dst.chmod(stat.S_IMODE(st.st_mode) | 0o700)
            elif stat.S_ISLNK(st.st_mode):
                dst.symlink_to(src.readlink())
            elif stat.S_ISREG(st.st_mode):
                _link_or_copy(src, dst)


_SEEDS = ("host-cache.json", "last-seen.json")
"""Caches a view starts from besides the index, so it reads as the environment does (what
provides each library, remembered) and as fast."""


def _seed(state: StateDir, view: StateDir) -> None:
    """Copy the index of facts and the caches in :data:`_SEEDS` into the view's state (none
    followed if a symlink)."""
    ensure_dir(view.cache, mode=0o700)
    with FactIndex.open(state.prefix) as index:
        index.copy_to(view.prefix)
    for name in _SEEDS:
        try:
            fd = open_file(state.cache / name, os.O_RDONLY)
        except (OSError, UnsafeState):
            continue
        with os.fdopen(fd, "rb") as src, (view.cache / name).open("xb") as dst:
            shutil.copyfileobj(src, dst)


def _remove_view(view: Path) -> None:
    """Remove a view, never through a symlink; a directory the restore left without the
    owner's write bit is made writable first."""
    try:
        remove_path(view)
    except PermissionError:
        for root, dirs, _files in os.walk(view):
            for name in dirs:
                path = Path(root, name)
                if stat.S_ISDIR(path.lstat().st_mode):
                    path.chmod(0o700)
        remove_path(view)


def undo(
    prefix: Path,
    txid: str,
    *,
    probes: ProbeSpec = ProbeSpec(),  # noqa: B008 - frozen value
    judge: Judge = _nothing_new,
    accept: bool = False,
    gone: Sequence[str] = (),
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    command: Sequence[str] = (),
    on_event: OnEvent = quiet,
) -> TransactionResult:
    """Restore a committed transaction's snapshot, itself as a new transaction: probed and
    judged like any other, so an undo that breaks an import (it put back a broken state) is
    rolled back and says why, unless ``accept``. The imports its plan probed are probed
    again, but for ``gone``: modules of what the undo takes back out."""
    prefix = Path(prefix)
    with RunContext.open(prefix, lock_timeout, on_event) as ctx:
        ctx.require_no_pending()
        old = existing(prefix, txid)
        done = entry(old)
        if done.state != "committed" or not done.snapshot or not old.post.is_file():
            raise UsageError(f"transaction {txid} is {done.state} and has no snapshot to undo")
        old_manifest = load_manifest(old)
        post = _post_state(old, old_manifest)
        conflicts = _undo_conflicts(prefix, old, old_manifest, post)
        if conflicts:
            raise StalePlan(f"cannot undo {txid}: the environment changed since", context=conflicts)
        again = [m for m in journal.head(journal.read(old.journal)).probe_modules if m not in gone]
        probes = replace(probes, modules=tuple(dict.fromkeys((*probes.modules, *again))))
        tx = ctx.begin(steps.Opening(kind="undo", command=tuple(command), undo=txid))
        manifest = ctx.snapshot(tx, sorted(post), [])

        def restore() -> tuple[str, ...]:
            journal.append(tx.journal, steps.UndoBegin(from_=txid))
            problems = restore_snapshot(prefix, old, old_manifest).left
            if problems:
                raise StepFailed("undo did not restore: " + "; ".join(problems))
            found = judge()
            if found and not accept:
                raise StepFailed(
                    f"undoing {txid} would leave problems that were not there before "
                    "(`--accept` undoes it anyway): " + "; ".join(found)
                )
            if accept:
                return ()  # the problems were shown and accepted: a probe would only repeat them
            return ctx.probe(tx, interpreter(prefix), probes)

        passed = ctx.execute(tx, manifest, restore)
    # Undoing swaps the sides on purpose: what the old transaction removed is put back
    # (reinstalled now), and what it reinstalled is taken back out (removed now).
    return TransactionResult(
        txid=tx.txid,
        prefix=prefix,
        removed=done.reinstalled,
        reinstalled=done.removed,
        kept=(),
        probes=passed,
        snapshot_entries=len(manifest.entries),
    )


def _post_state(tx: TxDir, manifest: Manifest) -> dict[str, list[Any]]:
    """A committed transaction's post-state, every path checked like the manifest's."""
    try:
        post = poststate.post_state_from_json(load_json(tx.post, "post-state"), manifest)
        bad = [w for p in post if (w := path_syntax(p)) is not None]
    except ValueError as exc:
        bad = [str(exc)]
    if bad:
        raise DamagedState(
            f"the post-state {tx.post} is damaged or names a path outside the environment "
            f"({bad[0]}); nothing was undone",
            hint=f"keep {tx.root} for inspection; cudafix will not act on it",
        )
    return dict(post)


def _undo_conflicts(
    prefix: Path, old: TxDir, manifest: Manifest, post: dict[str, list[Any]]
) -> list[str]:
    now = poststate.lstat_state(prefix, post)
    sites = layout_site_packages(prefix)  # paths spelt as everywhere else: nvidia/...
    conflicts = [
        f"{site_relative(p, sites)}: changed since the commit"
        for p in sorted(post)
        if now[p] != post[p]
    ]
    for e in manifest.entries:
        linked = e.kind == "file" and e.sha256 is None
        if linked and mismatch(old.snapshot, e._replace(path=stored(e))) is not None:
            conflicts.append(f"{site_relative(e.path, sites)}: its snapshot was modified")
    return conflicts
