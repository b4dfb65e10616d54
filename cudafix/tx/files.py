"""What a transaction does to files beside the backend, so the outcome is the plan's.

RECORD rows the backend must not act on are dropped first, deletions the backend left are
completed, bytecode it deleted is written again, and the result is checked against the
plan. Only ``tx/`` calls this: it writes inside the environment, never through a symlink.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
from pathlib import Path

from cudafix.env.hashing import hash_path
from cudafix.env.inventory import pyc_source
from cudafix.env.reading import find_dist_info
from cudafix.env.record import Refusal, parse_record, resolve_record_path, without_entries
from cudafix.env.statedir import TxDir, write_atomic
from cudafix.model.names import EnvPath, normalize_name
from cudafix.model.plan import Plan
from cudafix.process import run
from cudafix.tx import journal, restore, steps
from cudafix.tx.difference import Deviation
from cudafix.tx.manifest import Manifest, checked


def dist_info(prefix: Path, plan: Plan, name: str, version: str) -> str | None:
    return find_dist_info(prefix, plan.target.site_packages, name, version)


def record_paths(prefix: Path, info: str, *, through_symlinks: bool = False) -> list[str]:
    """RECORD paths of an installed dist, as EnvPaths; unsafe ones left out (never touched),
    but paths through a symlinked directory kept with ``through_symlinks`` (what an
    installer wrote, wherever that led)."""
    record = prefix / info / "RECORD"
    if not record.is_file() or record.is_symlink():
        return []
    site = EnvPath(posixpath.dirname(info))
    rows = parse_record(record.read_text(encoding="utf-8")).entries
    resolved = (resolve_record_path(site, row.path) for row in rows)
    paths: list[str] = [p for p in resolved if not isinstance(p, Refusal)]
    return paths if through_symlinks else [p for p, why in checked(prefix, paths) if why is None]


_COMPILE = """\
import py_compile, sys
args = sys.argv[1:]
for source, cfile, level in zip(args[0::3], args[1::3], args[2::3]):
    py_compile.compile(source, cfile=cfile, optimize=int(level), doraise=False)
"""


def recompile(prefix: Path, python: Path, manifest: Manifest) -> None:
    """Write again the bytecode that was there and the backend deleted (reinstalls run with
    ``--no-compile``), with the target interpreter, so the post-state has it as before."""
    args: list[str] = []
    base = f"{prefix}/"  # str joins: a removal's snapshot names every path it deletes
    for e in manifest.entries:
        cached = pyc_source(e.path) if e.kind == "file" else None
        if cached is None:
            continue
        source = base + cached
        if os.path.lexists(base + e.path) or not os.path.isfile(source):  # noqa: PTH113
            continue
        name = posixpath.basename(e.path)
        level = name.split(".opt-")[1].split(".")[0] if ".opt-" in name else "0"
        args += [source, base + e.path, level]
    if args:
        run([python, "-c", _COMPILE, *args], timeout=600)


def sanitize_records(prefix: Path, tx: TxDir, plan: Plan) -> None:
    """Rewrite the RECORDs the backend reads so the outcome does not depend on the backend.

    Dropped before the backend runs: rows that leave the environment, in the RECORD of every
    distribution the backend uninstalls or reinstalls (a reinstall uninstalls first); and,
    for removed distributions, rows of paths a remaining distribution also claims. uv and pip
    delete every RECORD row today, a change proposed to uv would keep shared ones; here
    neither is relied on: :func:`complete_deletions` then deletes what the plan deletes
    and ``--keep-shared`` keeps what it keeps. The RECORDs are in the snapshot (their
    dist-info is) and replaced by rename, so a rollback gets the original bytes back.
    """
    refused: dict[str, set[str]] = {}
    for bad in plan.refused_paths:
        refused.setdefault(normalize_name(bad.distribution), set()).add(bad.entry)
    shared = {EnvPath(s.path) for s in plan.shared_paths}
    touched = [(d.name, d.dist_info, True) for d in plan.remove]
    for again in plan.reinstall:
        info = dist_info(prefix, plan, again.name, again.version)
        if info is not None:
            touched.append((again.name, info, False))
    for name, info, removed in touched:
        record = prefix / info / "RECORD"
        if not record.is_file() or record.is_symlink():
            continue
        text = record.read_text(encoding="utf-8")
        drop = set(refused.get(normalize_name(name), ()))
        if removed:
            site = EnvPath(posixpath.dirname(info))
            drop |= {
                e.path
                for e in parse_record(text).entries
                if resolve_record_path(site, e.path) in shared
            }
        if drop:
            journal.append(tx.journal, steps.SanitizeRecord(dist=name, entries=tuple(sorted(drop))))
            write_atomic(record, without_entries(text, drop))


def complete_deletions(prefix: Path, plan: Plan, manifest: Manifest) -> None:
    """Delete what the plan deletes and the backend left (shared rows it was not shown).

    Only files and symlinks, never through a symlinked directory (each parent must resolve
    inside the prefix); kept paths stay; directories left empty are removed.
    """
    entries = manifest.by_path()
    kept = set(plan.kept_paths)
    real_prefix = os.path.realpath(prefix)
    base = f"{prefix}/"
    for path in plan.deleted_paths:
        entry = entries.get(path)
        if path in kept or (entry is not None and entry.kind == "dir"):
            continue
        if not os.path.lexists(base + path):  # the backend deleted it: the common case
            continue
        live = prefix / path
        if live.is_dir() and not live.is_symlink():
            continue
        parent = os.path.realpath(live.parent)
        if parent != real_prefix and not parent.startswith(real_prefix + os.sep):
            continue
        live.unlink()
    _prune_empty_parents(prefix, plan)


def _prune_empty_parents(prefix: Path, plan: Plan) -> None:
    """Remove directories the deletions left empty, up to site-packages, as uv does (pip
    leaves some), so the post-state is the same whichever backend ran.

    Each ancestor is tried once, deepest first (a directory empties only once its
    subdirectories are gone); none at or below a symlink is touched.
    """
    stops = {"", *plan.target.site_packages}
    dirs: set[str] = set()
    for path in plan.deleted_paths:
        parent = posixpath.dirname(path)
        while parent not in stops and parent not in dirs:
            dirs.add(parent)
            parent = posixpath.dirname(parent)
    linked: set[str] = set()
    for directory in sorted(dirs, key=lambda d: d.count("/")):
        if posixpath.dirname(directory) in linked or (prefix / directory).is_symlink():
            linked.add(directory)
    for directory in sorted(dirs - linked, key=lambda d: -d.count("/")):
        with contextlib.suppress(OSError):  # not empty, or not there
            (prefix / directory).rmdir()


def builtin_verify(prefix: Path, plan: Plan, manifest: Manifest) -> list[Deviation]:
    """Deleted paths are gone (unless a reinstall re-created them); kept paths are intact."""
    entries = manifest.by_path()
    rewritten = {e.path for e in manifest.entries if e.detach}
    problems = []
    base, kept = f"{prefix}/", set(plan.kept_paths)
    for path in plan.deleted_paths:
        entry = entries.get(path)
        skip = path in kept or path in rewritten or (entry and entry.kind == "dir")
        if not skip and os.path.lexists(base + path):  # a symlink, even a dangling one, too
            problems.append(Deviation("still-present", path))
    for path in plan.kept_paths:
        if (why := restore.mismatch(prefix, entries[path])) is not None:
            problems.append(Deviation("kept-differs", path, difference=why))
    return problems


def holders_verify(prefix: Path, plan: Plan) -> list[Deviation]:
    """Each path several reinstalled distributions claim holds its planned holder's bytes."""
    problems = []
    for holder in sorted(set(plan.holders_after.values())):
        version = next(r.version for r in plan.reinstall if r.name == holder)
        info = dist_info(prefix, plan, holder, version)
        if info is None:
            continue  # the version check reports it
        site = EnvPath(posixpath.dirname(info))
        record = parse_record((prefix / info / "RECORD").read_text(encoding="utf-8"))
        want = {resolve_record_path(site, e.path): e.sha256 for e in record.entries}
        for path, who in plan.holders_after.items():
            expected = want.get(EnvPath(path)) if who == holder else None
            if expected and hash_path(prefix / path) != expected:
                problems.append(Deviation("other-holder", path, distribution=holder))
    return problems
