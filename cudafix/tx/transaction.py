"""Apply a plan as a transaction: lock, journal, snapshot, apply, verify, probe, commit/roll back.

The promise: when this returns, raises, is killed or loses power, the environment is
either the planned after-state with probes passing, or byte-for-byte the state before
(after ``recover`` for the killed cases). Every step is journaled before it happens.
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import shlex
import shutil
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from cudafix.env.hashing import hash_path
from cudafix.env.record import Refusal, parse_record, resolve_record_path, without_entries
from cudafix.env.statedir import (
    STATE_DIR_NAME,
    StateDir,
    TxDir,
    ensure_dir,
    new_txid,
    write_atomic,
)
from cudafix.model.errors import (
    CudafixError,
    DamagedState,
    LockedError,
    PlanRefused,
    RollbackIncomplete,
    StalePlan,
    TargetError,
    TransactionFailed,
    UsageError,
)
from cudafix.model.names import EnvPath, normalize_name, split_dist_info_name
from cudafix.model.plan import Plan
from cudafix.process import Completed, activated, group_members, run, run_live
from cudafix.tx import DEFAULT_KEEP, journal, snapshot
from cudafix.tx.backend import Backend, make_backend
from cudafix.tx.journal import Event
from cudafix.tx.lock import Lock, is_held, outsiders
from cudafix.tx.probe import ProbeSpec, run_probes
from cudafix.tx.verify import install_mismatches

DEFAULT_LOCK_TIMEOUT = 60.0
Verify = Callable[[], list[str]]
OnEvent = Callable[[str], None]


def _quiet(_message: str) -> None:
    """Default ``on_event``: say nothing."""


@dataclass(frozen=True)
class TransactionResult:
    """A committed transaction."""

    txid: str
    prefix: Path
    removed: tuple[str, ...]
    reinstalled: tuple[str, ...]
    kept: tuple[str, ...]
    probes: tuple[str, ...]
    """Labels of the probes that passed."""
    snapshot_entries: int
    installed: tuple[str, ...] = ()
    """``name==version`` pins the plan's install step put in."""


@dataclass(frozen=True)
class RecoveryReport:
    """What ``recover`` did (or, with ``dry_run``, would do)."""

    prefix: Path
    dry_run: bool
    transactions: tuple[str, ...]
    actions: tuple[str, ...]


@dataclass(frozen=True)
class HistoryEntry:
    """One transaction as ``cudafix history`` lists it."""

    txid: str
    time: float
    kind: str
    """``apply`` or ``undo``."""
    command: tuple[str, ...]
    verdict: str
    state: str
    """``committed``, ``rolled-back``, ``aborted`` or ``pending``."""
    removed: tuple[str, ...]
    reinstalled: tuple[str, ...]
    kept: tuple[str, ...]
    error: str | None
    snapshot: bool
    """Its snapshot is still there (so it can be undone)."""


@dataclass(frozen=True)
class TransactionDetail:
    """``cudafix show``: one transaction's entry, journal and snapshot manifest."""

    entry: HistoryEntry
    journal: tuple[dict[str, Any], ...]
    paths: tuple[str, ...]


class _StepFailed(Exception):
    """A step of the apply phase failed; the transaction rolls back.

    ``restore`` narrows what the rollback restores (entries whose snapshot is no longer the
    old content are left out); None restores the whole snapshot.
    """

    def __init__(self, message: str, restore: snapshot.Manifest | None = None) -> None:
        super().__init__(message)
        self.restore = restore


# -- locking and pending transactions ------------------------------------------------------


INSTALLER_LOCK = ".lock"
"""uv's environment lock (``<venv>/.lock``, an exclusive flock for every ``uv pip`` change)."""


@contextlib.contextmanager
def _locked(prefix: Path, timeout: float, on_event: OnEvent) -> Iterator[StateDir]:
    """cudafix's lock, then uv's, for the whole run (see :func:`_backend_runs`).

    Holding uv's own lock makes a concurrent ``uv pip install`` wait until the transaction
    has committed or rolled back, instead of being wiped by the rollback.
    """
    state = StateDir(prefix)
    ensure_dir(state.transactions)
    lock = Lock(state.lock)
    wait = partial(on_event, f"waiting for another cudafix run on {prefix} (lock {state.lock})")
    if not lock.acquire(timeout, on_wait=wait):
        raise LockedError(
            f"another cudafix run holds {prefix}",
            context=[f"lock file: {state.lock}", f"waited {timeout:g} s"],
            hint="wait for it to finish, then retry",
        )
    try:
        installer = Lock(prefix / INSTALLER_LOCK)
        created = not os.path.lexists(installer.path)
        said = f"waiting for uv, which is changing {prefix} (lock {installer.path})"
        if not installer.acquire(timeout, on_wait=partial(on_event, said)):
            raise LockedError(
                f"uv is changing {prefix}",
                context=[f"lock file: {installer.path}", f"waited {timeout:g} s"],
                hint="wait for it to finish, then retry",
            )
        _INSTALLER_LOCKS[prefix] = installer
        try:
            yield state
        except BaseException:
            if created:  # rolled back: the environment had no lock file before this run
                with contextlib.suppress(OSError):
                    installer.path.unlink()
            raise
        finally:
            _INSTALLER_LOCKS.pop(prefix, None)
            installer.release()
    finally:
        lock.release()


_INSTALLER_LOCKS: dict[Path, Lock] = {}
"""uv's lock held by this process, per environment, while a run holds cudafix's lock."""


@dataclass
class _Handover:
    """uv's lock while this transaction's own command has it: who else was seen using it."""

    path: Path | None
    groups: set[int] = field(default_factory=set)
    """Process groups of the transaction's own commands."""
    seen: dict[int, str] = field(default_factory=dict)

    def watch(self) -> None:
        """Note every process outside the transaction that holds the lock (one waiting for
        it is blocked until the transaction ends, unless it gets it: then it is noted)."""
        if self.path is not None:
            users = outsiders(self.path, self.groups)
            self.seen.update((u.pid, u.describe()) for u in users if not u.waiting)

    def started(self, pgid: int) -> None:
        self.groups.add(pgid)


@contextlib.contextmanager
def _backend_runs(prefix: Path) -> Iterator[_Handover]:
    """Hand uv's lock to our own backend call or command (uv waits for it), take it back.

    A process outside the transaction queued on the lock would get it at the hand-over and
    change the environment inside the transaction: then nothing is handed over (the step
    fails, and the rollback leaves the environment to it). One that takes the lock while
    the transaction's command has it is named, and the transaction is rolled back, saying
    its changes went too.
    """
    installer = _INSTALLER_LOCKS.get(prefix)
    if installer is None or not installer.held:
        yield _Handover(None)
        return
    if waiting := outsiders(installer.path):
        raise _StepFailed(
            f"another process is {waiting[0].describe()} (uv's lock {installer.path}); "
            "handing the lock over would let it change the environment inside this "
            "transaction, so it was not handed over"
        )
    hand = _Handover(installer.path)
    installer.release()
    try:
        yield hand
    finally:
        if not installer.try_acquire():
            hand.watch()
            installer.acquire(DEFAULT_LOCK_TIMEOUT * 5)
    if hand.seen:
        raise _StepFailed(
            f"a process outside this transaction used uv's lock {installer.path} while the "
            f"transaction's own command had it ({'; '.join(hand.seen.values())}): what it "
            "changed is rolled back with the rest; run it again once this is over"
        )


def lock_is_held(prefix: Path) -> bool:
    """Whether another process holds the environment's lock now: a run is in progress."""
    return is_held(StateDir(prefix).lock)


def pending_transactions(prefix: Path) -> list[str]:
    """Ids of transactions that were interrupted and need ``cudafix recover``.

    A transaction directory with no journal record and no snapshot never started (its
    first journal write failed): it holds nothing and blocks nothing.
    """
    state = StateDir(Path(prefix))
    return [t for t in state.transaction_ids() if _is_pending(state.tx(t)) is True]


def unreadable_transactions(prefix: Path) -> list[str]:
    """Ids of transactions this user cannot read (another user's, made private): whether
    they are finished is unknown, so only their owner may change the environment."""
    state = StateDir(Path(prefix))
    return [t for t in state.transaction_ids() if _is_pending(state.tx(t)) is None]


def _is_pending(tx: TxDir) -> bool | None:
    """Whether ``tx`` needs ``recover``; None when this user cannot read it."""
    try:
        return _needs_recovery(tx)
    except PermissionError:
        return None


def _needs_recovery(tx: TxDir) -> bool:
    records = _records(tx)
    if not records:
        return tx.snapshot.exists() or tx.manifest.exists()
    return not journal.is_done(records)


def _records(tx: TxDir) -> list[dict[str, Any]]:
    return journal.read(tx.journal)


def _require_no_pending(state: StateDir) -> None:
    pending = pending_transactions(state.prefix) + unreadable_transactions(state.prefix)
    if pending:
        raise LockedError(
            f"an unfinished cudafix transaction holds {state.prefix}",
            context=[f"transaction {t}" for t in pending],
            hint=f"cudafix recover --venv {state.prefix}",
        )


# -- what the plan touches -----------------------------------------------------------------


def _check_plan(plan: Plan, force: bool) -> Path:
    """Refuse, before anything is done, a plan that is refused or names an unsafe path."""
    prefix = Path(plan.target.prefix)
    if not prefix.is_absolute() or not prefix.is_dir():
        raise TargetError(f"no environment at {plan.target.prefix}")
    if plan.verdict == "refused" and not force:
        raise PlanRefused(
            "the plan was refused; it would break the environment",
            context=plan.reasons,
            hint="apply a safer alternative, or --force (to test a rollback)",
        )
    named = [*plan.deleted_paths, *plan.kept_paths, *plan.rewritten_paths]
    named += [r.dist_info for r in plan.remove]
    named += [p for i in plan.install for p in i.paths]
    problems = [p for path in named if (p := snapshot.check_path(prefix, path)) is not None]
    problems += [
        f"{k!r}: kept but not deleted" for k in plan.kept_paths if k not in plan.deleted_paths
    ]
    if problems:
        raise PlanRefused("the plan names paths cudafix will not act on", context=problems)
    return prefix


def _dist_info(prefix: Path, plan: Plan, name: str, version: str) -> str | None:
    for sp in plan.target.site_packages:
        for info in sorted((prefix / sp).glob("*.dist-info")):
            split = split_dist_info_name(info.name)
            if split and normalize_name(split[0]) == normalize_name(name) and split[1] == version:
                return f"{sp}/{info.name}"
    return None


def _record_paths(prefix: Path, info: str) -> list[str]:
    """RECORD paths of an installed dist, as EnvPaths; unsafe ones left out (never touched)."""
    record = prefix / info / "RECORD"
    if not record.is_file() or record.is_symlink():
        return []
    site = EnvPath(posixpath.dirname(info))
    rows = parse_record(record.read_text(encoding="utf-8")).entries
    resolved = (resolve_record_path(site, row.path) for row in rows)
    return [
        p for p in resolved if not isinstance(p, Refusal) and snapshot.check_path(prefix, p) is None
    ]


def _touched(prefix: Path, plan: Plan) -> tuple[list[str], list[str]]:
    """(paths to snapshot, paths the backend will rewrite and must be detached first).

    ``plan.rewritten_paths`` is the planner's word; the reinstalled dists' RECORDs are read
    again here so that an older plan without it is still snapshotted completely.
    """
    paths = {*plan.deleted_paths, *plan.kept_paths, *(r.dist_info for r in plan.remove)}
    rewritten = set(plan.rewritten_paths)
    installed = {p for i in plan.install for p in i.paths if snapshot.check_path(prefix, p) is None}
    paths |= installed
    rewritten |= {p for p in installed if (prefix / p).is_file() and not (prefix / p).is_symlink()}
    for r in plan.reinstall:
        info = _dist_info(prefix, plan, r.name, r.version)
        if info is not None:
            paths.add(info)
            rewritten.update(_record_paths(prefix, info))
    detach = {p for p in rewritten if not any(c.endswith(".dist-info") for c in p.split("/"))}
    paths |= _backend_side_effects(prefix, paths | rewritten)
    return sorted(paths | rewritten), sorted(detach)


def _backend_side_effects(prefix: Path, touched: set[str]) -> set[str]:
    """What a backend changes beyond RECORD rows, so a rollback is byte-identical: the
    ``__pycache__`` next to every touched ``.py`` (uv and pip delete bytecode of the sources
    they remove). uv's lock file is :func:`_locked`'s: held for the whole run, and removed on
    rollback when this run created it."""
    caches = {
        f"{posixpath.dirname(p)}/__pycache__" if "/" in p else "__pycache__"
        for p in touched
        if p.endswith(".py")
    }
    return {c for c in caches if snapshot.check_path(prefix, c) is None and (prefix / c).is_dir()}


# -- the run -------------------------------------------------------------------------------


def run_transaction(
    plan: Plan,
    *,
    probes: ProbeSpec = ProbeSpec(),  # noqa: B008 - frozen value
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    verify: Verify | None = None,
    force: bool = False,
    command: Sequence[str] = (),
    on_event: OnEvent = _quiet,
    precondition: Verify | None = None,
    backend: Backend | None = None,
) -> TransactionResult:
    """Apply ``plan``; commit when verify and probes pass, else roll back and raise.

    ``precondition`` runs under the lock, before anything changes: a plan made while
    another run was changing the environment is refused there, not applied stale.
    ``backend`` defaults to the one the plan names (``plan.options.backend``).
    """
    prefix = _check_plan(plan, force)
    with _locked(prefix, lock_timeout, on_event) as state:
        _require_no_pending(state)
        if precondition is not None and (differences := precondition()):
            raise StalePlan(
                f"{prefix} changed since this plan was made; nothing was changed",
                context=differences[:25],
                hint="run the command again to plan on the environment as it is now",
            )
        paths, rewritten = _touched(prefix, plan)
        tx = _begin(state, {"kind": "apply", "plan": plan.model_dump(mode="json")}, command)
        manifest = _snapshot(prefix, tx, paths, rewritten, on_event)
        apply = partial(_apply_plan, prefix, tx, plan, manifest, probes, verify, on_event, backend)
        passed = _execute(prefix, tx, manifest, apply, on_event)
    return TransactionResult(
        tx.txid,
        prefix,
        tuple(r.name for r in plan.remove),
        tuple(r.name for r in plan.reinstall),
        tuple(plan.kept_paths),
        passed,
        len(manifest.entries),
        tuple(f"{i.name}=={i.version}" for i in plan.install),
    )


def _begin(state: StateDir, what: dict[str, Any], command: Sequence[str]) -> TxDir:
    """A new transaction with its first journal record, or nothing at all (then raise)."""
    tx = state.tx(new_txid())
    try:
        ensure_dir(tx.root)  # readable: history and doctor work for any reader of the venv
        journal.append(tx.journal, Event.PLAN, {**what, "command": list(command)})
    except BaseException as exc:  # an interrupt too: nothing changed, nothing left behind
        shutil.rmtree(tx.root, ignore_errors=True)
        if not isinstance(exc, OSError):
            raise
        raise TransactionFailed(
            f"could not write the journal in {tx.root}: {exc.strerror or exc}; nothing was changed",
            hint="free space or fix permissions under the environment, then retry",
        ) from exc
    return tx


def _note(tx: TxDir, event: str, data: dict[str, Any] | None = None) -> str | None:
    """Journal a step of a rollback, best effort: None, or why it could not be written.

    A rollback restores from the snapshot whatever the journal can record (hard links
    need no space); what the journal could not say is reported, and ``recover`` finishes.
    """
    try:
        journal.append(tx.journal, event, data)
    except OSError as exc:
        return f"the journal could not record '{event}': {exc.strerror or exc}"
    return None


def _snapshot(
    prefix: Path,
    tx: TxDir,
    paths: list[str],
    rewritten: list[str],
    on_event: OnEvent,
    copy: snapshot.CopyWhen = snapshot.never,
    whole: bool = False,
) -> snapshot.Manifest:
    """Snapshot, or refuse having changed nothing (the env is not touched before this is done)."""
    try:
        journal.append(tx.journal, Event.SNAPSHOT_BEGIN, {"paths": paths})
        manifest = snapshot.take(prefix, tx, paths, rewritten, copy, whole)
        journal.append(tx.journal, Event.SNAPSHOT_DONE, {"entries": len(manifest.entries)})
    except BaseException as exc:  # an interrupt too: nothing changed, nothing left behind
        with _interrupts_held():
            shutil.rmtree(tx.snapshot, ignore_errors=True)
            with contextlib.suppress(OSError):
                tx.manifest.unlink()
            if _note(tx, Event.ABORTED, {"error": _reason(exc)}) is not None:
                shutil.rmtree(tx.root, ignore_errors=True)  # nothing changed: nothing to keep
        if not isinstance(exc, OSError | CudafixError):
            raise
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        where = exc.filename if isinstance(exc, OSError) and exc.filename else None
        raise TransactionFailed(
            f"could not snapshot {where or prefix}: {why}; nothing was changed",
            hint="move a socket or device file out of the environment"
            if isinstance(exc, OSError) and exc.errno == errno.EINVAL
            else "free space or fix permissions under the environment, then retry",
        ) from exc
    on_event(f"snapshot: {len(manifest.entries)} paths in {tx.snapshot}")
    return manifest


def _backend_step(tx: TxDir, what: str, done: Completed) -> None:
    journal.append(
        tx.journal,
        Event.BACKEND,
        {
            "step": what,
            "argv": list(done.argv),
            "returncode": done.returncode,
            "stdout": done.stdout,
            "stderr": done.stderr,
        },
    )
    if done.returncode != 0:
        lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
        said = lines[-1].strip() if lines else "no output"
        raise _StepFailed(f"{what} failed (exit status {done.returncode}): {said}")


def _apply_plan(
    prefix: Path,
    tx: TxDir,
    plan: Plan,
    manifest: snapshot.Manifest,
    probes: ProbeSpec,
    verify: Verify | None,
    on_event: OnEvent,
    backend: Backend | None = None,
) -> tuple[str, ...]:
    """Detach, uninstall, reinstall, keep, verify, probe; raise on the first failure."""
    detached = [e.path for e in manifest.entries if e.detach]
    journal.append(tx.journal, Event.DETACH_BEGIN, {"paths": detached})
    snapshot.detach(prefix, manifest)
    python = Path(plan.target.python or prefix / "bin" / "python")
    opts = plan.options
    if backend is None:
        backend = make_backend(
            opts.backend, python, offline=opts.offline, find_links=opts.find_links
        )
    _sanitize_records(prefix, tx, plan)
    if plan.remove:
        names = [r.name for r in plan.remove]
        journal.append(tx.journal, Event.UNINSTALL_BEGIN, {"names": names})
        on_event(f"uninstalling {', '.join(names)}")
        with _backend_runs(prefix):
            done = backend.uninstall(names)
        _backend_step(tx, f"{opts.backend} uninstall", done)
        _complete_deletions(prefix, plan, manifest)
    if plan.reinstall:
        pins = [f"{r.name}=={r.version}" for r in plan.reinstall]
        journal.append(tx.journal, Event.REINSTALL_BEGIN, {"pins": pins})
        on_event(f"reinstalling {', '.join(pins)}")
        # Co-owners of one path in one backend call race for it: one call each, in order.
        for batch in [[p] for p in pins] if plan.holders_after else [pins]:
            with _backend_runs(prefix):
                done = backend.reinstall(batch)
            _backend_step(tx, f"{opts.backend} reinstall", done)
    if plan.kept_paths:
        journal.append(tx.journal, Event.KEEP_BEGIN, {"paths": plan.kept_paths})
        snapshot.put_back(prefix, tx, manifest, plan.kept_paths)
    _recompile(prefix, python, manifest)
    journal.append(tx.journal, Event.VERIFY_BEGIN)
    problems = _builtin_verify(prefix, plan, manifest) + _holders_verify(prefix, plan)
    problems += verify() if verify else []
    if problems:
        raise _StepFailed("the result differs from the plan: " + "; ".join(problems))
    if plan.install:
        _install(prefix, tx, plan, backend, on_event)
    return _probe(prefix, tx, python, probes, on_event)


_COMPILE = """\
import py_compile, sys
args = sys.argv[1:]
for source, cfile, level in zip(args[0::3], args[1::3], args[2::3]):
    py_compile.compile(source, cfile=cfile, optimize=int(level), doraise=False)
"""


def _recompile(prefix: Path, python: Path, manifest: snapshot.Manifest) -> None:
    """Write again the bytecode that was there and the backend deleted (reinstalls run with
    ``--no-compile``), with the target interpreter, so the post-state has it as before."""
    args: list[str] = []
    for e in manifest.entries:
        head, name = posixpath.split(e.path)
        if (
            e.kind != "file"
            or posixpath.basename(head) != "__pycache__"
            or not name.endswith(".pyc")
        ):
            continue
        source = prefix / posixpath.dirname(head) / (name.split(".", 1)[0] + ".py")
        if os.path.lexists(prefix / e.path) or not source.is_file():
            continue
        level = name.split(".opt-")[1].split(".")[0] if ".opt-" in name else "0"
        args += [str(source), str(prefix / e.path), level]
    if args:
        run([python, "-c", _COMPILE, *args], timeout=600)


def _install(prefix: Path, tx: TxDir, plan: Plan, backend: Backend, on_event: OnEvent) -> None:
    """Install the exact pins (after verify: they may re-create paths the removal deleted)."""
    pins = [f"{i.name}=={i.version}" for i in plan.install]
    journal.append(tx.journal, Event.INSTALL_BEGIN, {"pins": pins})
    on_event(f"installing {', '.join(pins)}")
    with _backend_runs(prefix):
        done = backend.reinstall(pins)
    _backend_step(tx, f"{plan.options.backend} install", done)
    problems = install_mismatches(plan)
    if problems:
        more = f" and {len(problems) - 5} more" if len(problems) > 5 else ""
        raise _StepFailed(
            "the install differs from the staged wheels: " + "; ".join(problems[:5]) + more
        )


def _sanitize_records(prefix: Path, tx: TxDir, plan: Plan) -> None:
    """Rewrite the RECORDs the backend reads so the outcome does not depend on the backend.

    Dropped before the backend runs: rows that leave the environment, in the RECORD of every
    distribution the backend uninstalls or reinstalls (a reinstall uninstalls first); and,
    for removed distributions, rows of paths a remaining distribution also claims. uv and pip
    delete every RECORD row today, a change proposed to uv would keep shared ones; here
    neither is relied on: :func:`_complete_deletions` then deletes what the plan deletes
    and ``--keep-shared`` keeps what it keeps. The RECORDs are in the snapshot (their
    dist-info is) and replaced by rename, so a rollback gets the original bytes back.
    """
    refused: dict[str, set[str]] = {}
    for bad in plan.refused_paths:
        refused.setdefault(normalize_name(bad.distribution), set()).add(bad.entry)
    shared = {EnvPath(s.path) for s in plan.shared_paths}
    touched = [(d.name, d.dist_info, True) for d in plan.remove]
    for again in plan.reinstall:
        info = _dist_info(prefix, plan, again.name, again.version)
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
            journal.append(
                tx.journal, Event.SANITIZE_RECORD, {"dist": name, "entries": sorted(drop)}
            )
            write_atomic(record, without_entries(text, drop))


def _complete_deletions(prefix: Path, plan: Plan, manifest: snapshot.Manifest) -> None:
    """Delete what the plan deletes and the backend left (shared rows it was not shown).

    Only files and symlinks, never through a symlinked directory (each parent must resolve
    inside the prefix); kept paths stay; directories left empty are removed.
    """
    entries = manifest.by_path()
    kept = set(plan.kept_paths)
    real_prefix = os.path.realpath(prefix)
    for path in plan.deleted_paths:
        entry = entries.get(path)
        if path in kept or (entry is not None and entry.kind == "dir"):
            continue
        live = prefix / path
        if not os.path.lexists(live) or (live.is_dir() and not live.is_symlink()):
            continue
        parent = os.path.realpath(live.parent)
        if parent != real_prefix and not parent.startswith(real_prefix + os.sep):
            continue
        live.unlink()
    _prune_empty_parents(prefix, plan)


def _prune_empty_parents(prefix: Path, plan: Plan) -> None:
    """Remove directories the deletions left empty, up to site-packages, as uv does (pip
    leaves some), so the post-state is the same whichever backend ran."""
    stops = {"", *plan.target.site_packages}
    for path in sorted(plan.deleted_paths, key=lambda p: -p.count("/")):
        parent = posixpath.dirname(path)
        while parent not in stops and not (prefix / parent).is_symlink():
            here = prefix / parent
            if here.is_dir():
                try:
                    here.rmdir()
                except OSError:  # not empty
                    break
            parent = posixpath.dirname(parent)


def _builtin_verify(prefix: Path, plan: Plan, manifest: snapshot.Manifest) -> list[str]:
    """Deleted paths are gone (unless a reinstall re-created them); kept paths are intact."""
    entries = manifest.by_path()
    rewritten = {e.path for e in manifest.entries if e.detach}
    problems = []
    for path in plan.deleted_paths:
        entry = entries.get(path)
        skip = path in plan.kept_paths or path in rewritten or (entry and entry.kind == "dir")
        if not skip and ((prefix / path).is_symlink() or (prefix / path).exists()):
            problems.append(f"{path}: still present")
    for path in plan.kept_paths:
        if (why := snapshot.mismatch(prefix, entries[path])) is not None:
            problems.append(f"kept {why}")
    return problems


def _holders_verify(prefix: Path, plan: Plan) -> list[str]:
    """Each path several reinstalled distributions claim holds its planned holder's bytes."""
    problems = []
    for holder in sorted(set(plan.holders_after.values())):
        version = next(r.version for r in plan.reinstall if r.name == holder)
        info = _dist_info(prefix, plan, holder, version)
        if info is None:
            continue  # the version check reports it
        site = EnvPath(posixpath.dirname(info))
        record = parse_record((prefix / info / "RECORD").read_text(encoding="utf-8"))
        want = {resolve_record_path(site, e.path): e.sha256 for e in record.entries}
        for path, who in plan.holders_after.items():
            expected = want.get(EnvPath(path)) if who == holder else None
            if expected and hash_path(prefix / path) != expected:
                problems.append(f"{path} should hold {holder}'s bytes")
    return problems


def _probe(
    prefix: Path, tx: TxDir, python: Path, spec: ProbeSpec, on_event: OnEvent
) -> tuple[str, ...]:
    journal.append(tx.journal, Event.PROBE_BEGIN)
    on_event("probing the environment")
    results = run_probes(prefix, python, spec, tx.root)
    journal.append(tx.journal, Event.PROBE_DONE, {"results": [r.__dict__ for r in results]})
    for note in (r.note for r in results if r.note):
        on_event(f"probe note: {note}")
    failed = [f"{r.label}: {r.error}" for r in results if not r.ok]
    if failed:
        raise _StepFailed("probe failed: " + "; ".join(failed))
    return tuple(r.label for r in results)


def _execute(
    prefix: Path,
    tx: TxDir,
    manifest: snapshot.Manifest,
    apply: Callable[[], tuple[str, ...]],
    on_event: OnEvent,
) -> tuple[str, ...]:
    """Run ``apply``; on any failure (even KeyboardInterrupt) roll back and raise."""
    try:
        passed = apply()
        _commit(prefix, tx, manifest)
    except BaseException as exc:
        reason = _reason(exc)
        narrowed = exc.restore if isinstance(exc, _StepFailed) else None
        with _interrupts_held():
            _fail(prefix, tx, reason, exc, on_event, narrowed or manifest)
    on_event(f"committed transaction {tx.txid}")
    with contextlib.suppress(OSError, CudafixError):
        gc(prefix, keep=DEFAULT_KEEP)
    return passed


_INTERRUPTS = frozenset({signal.SIGINT, signal.SIGTERM})


@contextlib.contextmanager
def _interrupts_held() -> Iterator[None]:
    """Ctrl-C and SIGTERM wait while a rollback runs, and are then dropped: the run is
    ending anyway, and an interrupted rollback would leave work for ``recover``."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _INTERRUPTS)
    try:
        yield
    finally:
        while signal.sigtimedwait(_INTERRUPTS, 0) is not None:
            pass
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, _StepFailed):
        return str(exc)
    if isinstance(exc, OSError) and exc.strerror:
        where = f": {exc.filename}" if exc.filename else ""
        return f"{exc.strerror}{where}"
    return f"{type(exc).__name__}: {exc}"


def _fail(
    prefix: Path,
    tx: TxDir,
    reason: str,
    exc: BaseException,
    on_event: OnEvent,
    manifest: snapshot.Manifest,
) -> None:
    outcome = _rollback(prefix, tx, reason, manifest)
    if outcome.left:
        raise RollbackIncomplete(
            f"{reason}; the rollback did not finish: {len(outcome.left)} path(s) differ",
            context=[*outcome.left, *outcome.journal],
            hint=f"cudafix recover --venv {prefix}",
        ) from exc
    on_event(f"rolled back transaction {tx.txid}")
    said = [f"restored {outcome.entries} snapshotted paths and verified them"]
    if outcome.journal:
        said += [*outcome.journal, f"once there is space: cudafix recover --venv {prefix}"]
    raise TransactionFailed(f"{reason}; rolled back", context=said) from exc


@dataclass(frozen=True)
class _Outcome:
    left: list[str]
    """Paths that still differ from the snapshot, each with the reason."""
    entries: int
    journal: list[str]
    """Journal records that could not be written (the rollback went on without them)."""
    in_place: list[str] = field(default_factory=list)
    """Files rewritten in place: left as they are (their snapshot changed with them)."""


_BEFORE_CHANGES = frozenset({"plan", "snapshot-begin", "snapshot-done", "rollback-begin"})
"""Journal events that precede any change to the environment."""


def _loaded(tx: TxDir) -> snapshot.Manifest | None:
    """The manifest, None when there is none; :class:`DamagedState` when it is damaged."""
    try:
        return snapshot.load(tx)
    except FileNotFoundError:
        return None


def _untouched(tx: TxDir, manifest: snapshot.Manifest | None, prefix: Path) -> bool:
    """Whether the environment provably was never changed: an intact journal that stops
    before the first change, and (with a manifest) every snapshotted path as it was."""
    log = journal.load(tx.journal)
    if not log.intact or any(e not in _BEFORE_CHANGES for e in journal.events(log.records)):
        return False
    if manifest is None:
        return True
    return all(snapshot.mismatch(prefix, e) is None for e in manifest.entries)


def _rollback(prefix: Path, tx: TxDir, reason: str, manifest: snapshot.Manifest | None) -> _Outcome:
    """Restore the snapshot (idempotent, restartable), whatever the journal can record.

    The snapshot and its manifest are the truth: they are discarded only when the journal
    proves the environment was never changed; a missing manifest the journal says was
    written is refused (:class:`DamagedState`), never guessed at.
    """
    unwritten = [m for m in [_note(tx, "rollback-begin", {"reason": reason})] if m]
    if _untouched(tx, manifest, prefix):
        if _note(tx, "aborted", {"error": reason}) is None:
            shutil.rmtree(tx.snapshot, ignore_errors=True)
        else:  # the journal cannot say so, and nothing changed: keep nothing that blocks
            shutil.rmtree(tx.root, ignore_errors=True)
        return _Outcome([], 0, [])
    if manifest is None:
        raise DamagedState(
            f"transaction {tx.txid} changed the environment, but its snapshot manifest "
            f"{tx.manifest} is missing; nothing was restored",
            hint=f"keep {tx.root} for inspection; cudafix will not guess what it held",
        )
    manifest, in_place = _written_in_place_first(prefix, tx, manifest)
    begin = {"entries": len(manifest.entries), "in_place": in_place}
    unwritten += [m for m in [_note(tx, "restore-begin", begin)] if m]
    left = snapshot.restore(prefix, tx, manifest)
    done = "rollback-incomplete" if left else "rolled-back"
    m = _note(tx, done, {"problems": left} if left else None)
    if m is None and not left:
        shutil.rmtree(tx.snapshot, ignore_errors=True)
    return _Outcome(left, len(manifest.entries), [*unwritten, *([m] if m else [])], in_place)


def _written_in_place_first(
    prefix: Path, tx: TxDir, manifest: snapshot.Manifest
) -> tuple[snapshot.Manifest, list[str]]:
    """A ``run`` rolled back by ``recover``: files its command rewrote in place (their
    hard-link snapshot changed with them) are left out and named, never called restored.
    Checked only before a first restore, which itself links files back (and moves ctime)."""
    records = _records(tx)
    head = records[0] if records else {}
    if head.get("kind") != "run" or any(r.get("event") == "restore-begin" for r in records):
        return manifest, []
    found = snapshot.written_in_place(prefix, manifest)
    return (_forget(tx, manifest, found) if found else manifest), found


def _after_paths(prefix: Path, manifest: snapshot.Manifest) -> list[str]:
    """Touched paths now: the snapshot's, plus whatever appeared in the touched directories."""
    new = snapshot.new_names(prefix, manifest)
    return sorted({e.path for e in manifest.entries} | set(snapshot.expand(prefix, new)))


def _commit(prefix: Path, tx: TxDir, manifest: snapshot.Manifest) -> None:
    """The durable ``commit`` record is the commit point: any failure before it rolls back."""
    journal.append(tx.journal, "commit-begin")
    journal.fail_point("commit")
    snapshot.write_json(tx.post, snapshot.lstat_state(prefix, _after_paths(prefix, manifest)))
    journal.append(tx.journal, "commit")


# -- run: any command as a transaction ----------------------------------------------------


@dataclass(frozen=True)
class GuardedRun:
    """A command that ran inside a transaction and was committed."""

    txid: str
    prefix: Path
    completed: Completed
    findings: tuple[str, ...]
    """Problems the command introduced, accepted with ``accept``."""
    probes: tuple[str, ...]
    in_place: tuple[str, ...]
    """Files the command rewrote in place (the snapshot could not have restored them)."""


def _forget(tx: TxDir, manifest: snapshot.Manifest, paths: Sequence[str]) -> snapshot.Manifest:
    """Drop entries whose snapshot is not the old content (in-place writes) from the manifest,
    so the rollback restores everything else and finishes instead of failing on them."""
    gone = set(paths)
    narrowed = snapshot.Manifest(
        tuple(e for e in manifest.entries if e.path not in gone), manifest.listings
    )
    snapshot.write_json(tx.manifest, narrowed.to_json())  # what recover would restore
    return narrowed


@dataclass(frozen=True)
class Judged:
    """What ``run``'s judge says of the environment after the command."""

    findings: tuple[str, ...]
    """Problems doctor finds now and did not find before."""
    probes: ProbeSpec
    """The probes to run (what the command changed, and the user's)."""


def prefix_roots(prefix: Path) -> list[str]:
    """Every top-level entry of the environment but cudafix's own state: what ``run``
    snapshots, since a command may write anywhere (``share/``, ``include/``, ``pyvenv.cfg``)."""
    with os.scandir(prefix) as it:
        return sorted(e.name for e in it if e.name != STATE_DIR_NAME)


COPY_LIMIT = 1 << 20
"""Files up to this size outside site-packages (``pyvenv.cfg``, ``bin/`` scripts, ``etc/``)
are snapshotted by copy for ``run``: tools append to them in place."""


def _small_outside_site_packages(path: str, size: int) -> bool:
    return size <= COPY_LIMIT and "site-packages" not in path.split("/")


def run_guarded(
    prefix: Path,
    argv: Sequence[str],
    *,
    judge: Callable[[], Judged],
    accept: bool = False,
    timeout: float | None = None,
    echo: tuple[int, int] = (1, 2),
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    command: Sequence[str] = (),
    on_event: OnEvent = _quiet,
) -> GuardedRun:
    """Snapshot the whole environment (hard links), run ``argv`` with its output shown live,
    then commit only when it succeeded, ``judge`` (what the environment looks like now) has
    nothing new and the probes pass; otherwise roll back and raise. ``accept`` commits
    despite ``judge``'s findings. ``timeout`` stops the command and rolls back."""
    python = prefix / "bin" / "python"
    outcome: dict[str, Any] = {}
    with _locked(prefix, lock_timeout, on_event) as state:
        _require_no_pending(state)
        tx = _begin(state, {"kind": "run", "argv": list(argv)}, command)
        roots = prefix_roots(prefix)
        manifest = _snapshot(
            prefix, tx, roots, [], on_event, copy=_small_outside_site_packages, whole=True
        )

        def step() -> tuple[str, ...]:
            journal.append(tx.journal, Event.RUN_BEGIN, {"argv": list(argv)})
            on_event(f"running {shlex.join(argv)}")
            pins = snapshot.pin(tx, manifest)
            try:
                done, intrusion = _run_handed_over(prefix, tx, argv, timeout, echo)
                taken = _state_taken(prefix, tx, pins, on_event)
            finally:
                pins.close()
            if taken is not None:
                outcome["completed"] = done
                raise taken
            outcome["completed"] = done
            in_place = snapshot.written_in_place(prefix, manifest)
            outcome["in_place"] = tuple(in_place)
            try:
                if done.timed_out or intrusion is not None:
                    with contextlib.suppress(_StepFailed):
                        _backend_step(tx, "the command", done)  # journals what it said
                    raise intrusion or _StepFailed(
                        f"the command did not finish within {timeout:g} s"
                    )
                _backend_step(tx, "the command", done)  # journals it; raises when it failed
                judged = judge()
                outcome["findings"] = judged.findings
                if judged.findings and not accept:
                    raise _StepFailed(
                        "the command left the environment with new problems: "
                        + "; ".join(judged.findings)
                    )
                passed = _probe(prefix, tx, python, judged.probes, on_event)
                if in_place:  # committed with them: undo restores the rest, names these
                    _forget(tx, manifest, in_place)
                return passed
            except _StepFailed as failed:
                if not in_place:
                    raise
                raise _StepFailed(
                    f"{failed}; {len(in_place)} file(s) were rewritten in place, so their "
                    f"snapshot (a hard link) changed too and they stay as the command left "
                    f"them: {', '.join(in_place[:5])}; after the rollback, `cudafix doctor "
                    f"--venv {prefix}` names their distributions to repair",
                    restore=_forget(tx, manifest, in_place),
                ) from failed

        try:
            passed = _execute(prefix, tx, manifest, step, on_event)
        finally:
            while _RELOCKED:
                _RELOCKED.pop().release()
    return GuardedRun(
        tx.txid,
        prefix,
        outcome["completed"],
        outcome.get("findings", ()),
        passed,
        outcome.get("in_place", ()),
    )


def _state_taken(
    prefix: Path, tx: TxDir, pins: snapshot.Pins, on_event: OnEvent
) -> _StepFailed | None:
    """When the command removed or replaced cudafix's state (``uv venv --clear``), write it
    again from what was held open, take cudafix's lock again, and fail the step so the
    rollback restores the environment from it (a command that removes the state cannot be
    judged against it)."""
    if not snapshot.state_lost(tx, pins):
        return None
    manifest, lost = snapshot.rebuild(prefix, tx, pins, {"missed": pins.missed})
    relock = Lock(StateDir(prefix).lock)
    if relock.try_acquire():
        _RELOCKED.append(relock)
    on_event(f"the command removed cudafix's state in {StateDir(prefix).root}; rebuilt it")
    unrestorable = (
        f"; {len(lost)} file(s) cannot be restored: {', '.join(lost[:5])}" if lost else ""
    )
    return _StepFailed(
        f"the command removed or replaced cudafix's own state ({StateDir(prefix).root}), "
        f"so it cannot be judged; the state was rebuilt from files held open{unrestorable}",
        restore=manifest,
    )


_RELOCKED: list[Lock] = []
"""cudafix's lock taken again on a state directory a command re-created (released at the
end of the run)."""


def _run_handed_over(
    prefix: Path, tx: TxDir, argv: Sequence[str], timeout: float | None, echo: tuple[int, int]
) -> tuple[Completed, _StepFailed | None]:
    """Run ``run``'s command with uv's lock handed to it; returns what it did, and the
    failure of the hand-over when a process outside the transaction used the lock."""
    done: Completed | None = None
    try:
        with _backend_runs(prefix) as hand:

            def started(pgid: int) -> None:
                hand.started(pgid)
                journal.append(tx.journal, Event.PROCESS, {"pgid": pgid, "boot": _boot_id()})

            done = run_live(
                argv,
                env=activated(prefix),
                timeout=timeout,
                echo=echo,
                on_start=started,
                watch=hand.watch,
            )
    except _StepFailed as failed:
        if done is None:
            raise  # refused before the command ran
        return done, failed
    assert done is not None
    return done, None


def _boot_id() -> str:
    """This boot's id: a process group recorded before a reboot is certainly gone."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


# -- recover -------------------------------------------------------------------------------


def _describe(prefix: Path, tx: TxDir) -> str:
    records = _records(tx)
    last = records[-1]["event"] if records else "start"
    if lock_is_held(prefix):
        return f"{tx.txid}: running now (another cudafix run holds {prefix}); nothing to recover"
    if alive := live_processes(tx):
        return f"{tx.txid}: interrupted, but its command is still running ({_processes(alive)})"
    try:
        manifest = _loaded(tx)
    except DamagedState as err:
        return f"{tx.txid}: interrupted at '{last}'; cannot restore: {err.message}"
    if _untouched(tx, manifest, prefix):
        return f"{tx.txid}: interrupted at '{last}' before anything changed; discard it"
    if manifest is None:
        return f"{tx.txid}: interrupted at '{last}'; cannot restore: its manifest is missing"
    entries = len(manifest.entries)
    return f"{tx.txid}: interrupted at '{last}'; restore {entries} paths from its snapshot"


def live_processes(tx: TxDir) -> list[tuple[int, str]]:
    """Processes of the transaction's commands still running (this boot): while one runs,
    rolling back would race it, so ``recover`` refuses."""
    boot = _boot_id()
    groups = {
        r["pgid"]
        for r in _records(tx)
        if r.get("event") == Event.PROCESS and isinstance(r.get("pgid"), int)
        if r.get("boot") == boot
    }
    return [p for g in sorted(groups) for p in group_members(g)]


def _processes(alive: Sequence[tuple[int, str]]) -> str:
    return ", ".join(f"pid {pid}: {cmd[:80]}" for pid, cmd in alive[:5])


def _require_no_live_processes(prefix: Path, tx: TxDir) -> None:
    if alive := live_processes(tx):
        raise LockedError(
            f"transaction {tx.txid}: its command is still running ({_processes(alive)}); "
            "nothing was rolled back",
            context=[f"process group {os.getpgid(alive[0][0])}"],
            hint=f"let it finish or stop it (kill -- -{os.getpgid(alive[0][0])}), then "
            f"cudafix recover --venv {shlex.quote(str(prefix))}",
        )


def recover(
    prefix: Path,
    *,
    dry_run: bool = False,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    on_event: OnEvent = _quiet,
) -> RecoveryReport:
    """Roll back every interrupted transaction (``dry_run``: only say what would be done)."""
    prefix = Path(prefix)
    state = StateDir(prefix)
    pending = tuple(pending_transactions(prefix))
    actions = tuple(_describe(prefix, state.tx(t)) for t in pending)
    hidden = unreadable_transactions(prefix)
    actions += tuple(f"{t}: this user cannot read it; its owner can recover it" for t in hidden)
    if dry_run or not pending:
        return RecoveryReport(prefix, dry_run, pending, actions)
    with _locked(prefix, lock_timeout, on_event) as state:
        for txid in pending_transactions(prefix):
            _require_no_live_processes(prefix, state.tx(txid))
        for txid in pending_transactions(prefix):
            tx = state.tx(txid)
            outcome = _rollback(prefix, tx, "recover after an interruption", _loaded(tx))
            if outcome.left or outcome.journal:
                raise RollbackIncomplete(
                    f"could not finish transaction {txid}: "
                    + (f"{len(outcome.left)} path(s) differ" if outcome.left else "journal full"),
                    context=[*outcome.left, *outcome.journal],
                    hint="fix the cause (space, permissions), then run "
                    f"cudafix recover --venv {prefix}",
                )
            on_event(f"rolled back transaction {txid}")
            for path in outcome.in_place:
                on_event(f"warning: {path} was rewritten in place by the command; it stays so")
    return RecoveryReport(prefix, dry_run, pending, actions)


# -- history, show, gc, undo ---------------------------------------------------------------


def _state(records: list[dict[str, Any]]) -> str:
    last = records[-1]["event"] if records else ""
    return {"commit": "committed", "rolled-back": "rolled-back", "aborted": "aborted"}.get(
        last, "pending"
    )


def _strings(value: Any, key: str | None = None) -> tuple[str, ...]:
    """A list of strings (or of ``{key: str}``) from a journal record; junk becomes ()."""
    if not isinstance(value, list):
        return ()
    items = [v.get(key) if key and isinstance(v, dict) else v for v in value]
    return tuple(str(v) for v in items if isinstance(v, str | int | float))


def _entry(tx: TxDir) -> HistoryEntry:
    """One transaction for ``history``; a damaged or unreadable journal still yields an
    entry (it says so)."""
    try:
        log = journal.load(tx.journal)
    except PermissionError as exc:
        return HistoryEntry(
            tx.txid, 0.0, "?", (), "", "unreadable", (), (), (),
            f"this user cannot read it ({exc.strerror})", False,
        )  # fmt: skip
    records = log.records
    head = records[0] if records and records[0].get("event") == "plan" else {}
    plan: dict[str, Any] = head["plan"] if isinstance(head.get("plan"), dict) else {}
    error = next((r.get("reason") for r in records if r["event"] == "rollback-begin"), None)
    if log.damaged:
        lines = ", ".join(map(str, log.damaged[:5]))
        error = f"journal {tx.journal} is damaged (line {lines})" + (f"; {error}" if error else "")
    time_ = head.get("time")
    return HistoryEntry(
        txid=tx.txid,
        time=float(time_) if isinstance(time_, int | float) else 0.0,
        kind=str(head.get("kind", "apply")),
        command=_strings(head.get("command")),
        verdict=str(plan.get("verdict", "pass" if head.get("kind") == "undo" else "")),
        state=_state(records),
        removed=_strings(plan.get("remove"), "name"),
        reinstalled=_strings(plan.get("reinstall"), "name"),
        kept=_strings(plan.get("kept_paths")),
        error=None if error is None else str(error),
        snapshot=tx.snapshot.is_dir() and tx.manifest.is_file(),
    )


def history(prefix: Path) -> list[HistoryEntry]:
    """Every transaction on ``prefix``, oldest first."""
    state = StateDir(Path(prefix))
    return [_entry(state.tx(t)) for t in state.transaction_ids()]


def show(prefix: Path, txid: str) -> TransactionDetail:
    """One transaction in full."""
    tx = _existing(Path(prefix), txid)
    manifest = _loaded(tx)
    paths = tuple(e.path for e in manifest.entries) if manifest else ()
    return TransactionDetail(_entry(tx), tuple(_records(tx)), paths)


def _existing(prefix: Path, txid: str) -> TxDir:
    state = StateDir(prefix)
    if txid not in state.transaction_ids():
        raise UsageError(
            f"no transaction {txid!r} in {prefix}", hint=f"cudafix history --venv {prefix}"
        )
    return state.tx(txid)


def gc(prefix: Path, keep: int = DEFAULT_KEEP) -> list[str]:
    """Delete snapshots of all but the newest ``keep`` committed transactions (journals stay)."""
    entries = [e for e in history(Path(prefix)) if e.snapshot and e.state != "pending"]
    committed = [e for e in entries if e.state == "committed"]
    doomed = [e for e in entries if e.state != "committed"] + committed[
        : max(0, len(committed) - keep)
    ]
    state = StateDir(Path(prefix))
    for e in doomed:
        shutil.rmtree(state.tx(e.txid).snapshot, ignore_errors=True)
    return [e.txid for e in doomed]


def _post_state(tx: TxDir) -> dict[str, list[Any]]:
    """A committed transaction's post-state, every path checked like the manifest's."""
    post = snapshot.load_json(tx.post, "post-state")
    bad = (
        ["not a JSON object"]
        if not isinstance(post, dict)
        else [w for p in post if (w := snapshot.path_syntax(p)) is not None]
    )
    if bad:
        raise DamagedState(
            f"the post-state {tx.post} is damaged or names a path outside the environment "
            f"({bad[0]}); nothing was undone",
            hint=f"keep {tx.root} for inspection; cudafix will not act on it",
        )
    return dict(post)


def _undo_conflicts(prefix: Path, old: TxDir, post: dict[str, list[Any]]) -> list[str]:
    now = snapshot.lstat_state(prefix, post)
    conflicts = [f"{p}: changed since the commit" for p in sorted(post) if now[p] != post[p]]
    for e in snapshot.load(old).entries:
        if e.kind == "file" and e.sha256 is None:
            live = snapshot.Entry(**{**e.__dict__, "path": f"snapshot/{e.path}"})
            if snapshot.mismatch(old.root, live) is not None:
                conflicts.append(f"{e.path}: its snapshot was modified")
    return conflicts


def undo(
    prefix: Path,
    txid: str,
    *,
    probes: ProbeSpec = ProbeSpec(),  # noqa: B008 - frozen value
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    command: Sequence[str] = (),
    on_event: OnEvent = _quiet,
) -> TransactionResult:
    """Restore a committed transaction's snapshot, itself as a new transaction."""
    prefix = Path(prefix)
    with _locked(prefix, lock_timeout, on_event) as state:
        _require_no_pending(state)
        old = _existing(prefix, txid)
        entry = _entry(old)
        if entry.state != "committed" or not entry.snapshot or not old.post.is_file():
            raise UsageError(f"transaction {txid} is {entry.state} and has no snapshot to undo")
        post = _post_state(old)
        old_manifest = snapshot.load(old)
        conflicts = _undo_conflicts(prefix, old, post)
        if conflicts:
            raise StalePlan(f"cannot undo {txid}: the environment changed since", context=conflicts)
        paths = sorted(post)
        tx = _begin(state, {"kind": "undo", "undo": txid}, command)
        manifest = _snapshot(prefix, tx, paths, [], on_event)

        def apply() -> tuple[str, ...]:
            journal.append(tx.journal, Event.UNDO_BEGIN, {"from": txid})
            problems = snapshot.restore(prefix, old, old_manifest)
            if problems:
                raise _StepFailed("undo did not restore: " + "; ".join(problems))
            python = prefix / "bin" / "python"
            return _probe(prefix, tx, python, probes, on_event)

        passed = _execute(prefix, tx, manifest, apply, on_event)
    return TransactionResult(
        tx.txid, prefix, entry.reinstalled, entry.removed, (), passed, len(manifest.entries)
    )
