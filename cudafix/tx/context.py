"""One run under the environment's locks: begin, snapshot, execute, commit or roll back.

The promise every flow (``apply``, ``guard``, ``undo``) keeps through this: when a run
returns, raises, is killed or loses power, the environment is either the after-state with
probes passing, or byte-for-byte the state before (after ``recover`` for the killed
cases). Every step is journaled before it happens.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar, cast

from cudafix.env.statedir import StateDir, TxDir, ensure_dir, new_txid
from cudafix.faults import fail_point
from cudafix.model.commands import cudafix_line, venv_flags
from cudafix.model.errors import (
    CommandFailed,
    CudafixError,
    LockedError,
    RollbackIncomplete,
    TransactionFailed,
)
from cudafix.model.names import normalize_name, split_dist_info_name
from cudafix.model.probe import ProbeSpec
from cudafix.model.transaction import DEFAULT_KEEP, OnEvent, RunEvent
from cudafix.process import Completed
from cudafix.tx import journal, poststate, snapshot, steps, trash
from cudafix.tx.history import gc
from cudafix.tx.lock import EnvLocks, Handover, LockIntrusion, hold
from cudafix.tx.manifest import Manifest, write_json
from cudafix.tx.pending import unfinished
from cudafix.tx.probe import exit_said, run_probes
from cudafix.tx.recovery import rollback

T = TypeVar("T")


class StepFailed(Exception):
    """A step of the apply phase failed; the transaction rolls back.

    ``restore`` narrows what the rollback restores (entries whose snapshot is no longer the
    old content are left out); None restores the whole snapshot. ``unheld`` names paths the
    step wrote that no snapshot holds: the rollback cannot restore them, and says so.
    """

    def __init__(
        self,
        message: str,
        restore: Manifest | None = None,
        status: int | None = None,
        unheld: Sequence[str] = (),
    ) -> None:
        super().__init__(message)
        self.restore = restore
        self.status = status
        """The exit status ``run`` returns: its command's, when the command itself failed."""
        self.unheld = tuple(unheld)
        """Paths written that were never snapshotted: a rollback cannot restore them."""


class Unchanged(Exception):
    """A step whose command changed nothing: the transaction is dropped, not committed, and
    :meth:`RunContext.execute` returns ``value``."""

    def __init__(self, value: object) -> None:
        super().__init__("nothing changed")
        self.value = value


class NotStarted(Exception):
    """A step that failed before it changed anything (its command not yet started): the
    transaction is dropped, as one that changed nothing, and ``error`` is raised as if no
    transaction had begun."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass(frozen=True)
class RunContext:
    """One run on ``prefix``: its state directory and the locks it holds (cudafix's, uv's)."""

    prefix: Path
    state: StateDir
    locks: EnvLocks
    on_event: OnEvent

    @classmethod
    @contextlib.contextmanager
    def open(cls, prefix: Path, timeout: float, on_event: OnEvent) -> Iterator[RunContext]:
        """Take both locks for the whole run; released (uv's lock file removed when this
        run created it and failed) when the block exits. No old snapshot is deleted while
        it runs (:func:`cudafix.tx.trash.quiet`): that would move the ctimes it judges by."""
        state = StateDir(prefix)
        ensure_dir(state.transactions)
        with hold(prefix, state.lock, timeout, on_event) as locks, trash.quiet(state):
            yield cls(prefix, state, locks, on_event)

    @contextlib.contextmanager
    def backend_runs(self, watched: bool = False) -> Iterator[Handover]:
        """Around our own backend call or command: it gets uv's lock, the run takes it back
        after; a process outside the transaction that would get in fails the step.
        ``watched``: a user's command, which is lent the lock only while it waits for it,
        with the writers outside the transaction watched (:meth:`EnvLocks.backend_runs`)."""
        try:
            with self.locks.backend_runs(self.prefix if watched else None) as hand:
                yield hand
        except LockIntrusion as exc:
            raise StepFailed(str(exc)) from exc

    def require_no_pending(self) -> None:
        pending, unreadable = unfinished(self.prefix)
        pending += unreadable
        if pending:
            raise LockedError(
                f"an unfinished cudafix transaction holds {self.prefix}",
                context=[f"transaction {t}" for t in pending],
                hint=cudafix_line("recover", target=venv_flags(self.prefix)),
            )

    def begin(self, opening: steps.Opening) -> TxDir:
        """A new transaction with its first journal record, or nothing at all (then raise)."""
        ids = self.state.transaction_ids()
        tx = self.state.tx(new_txid(ids[-1] if ids else None))
        try:
            ensure_dir(tx.root)  # readable: history and doctor work for any reader of the venv
            journal.append(tx.journal, opening)
        except BaseException as exc:  # an interrupt too: nothing changed, nothing left behind
            shutil.rmtree(tx.root, ignore_errors=True)
            if not isinstance(exc, OSError):
                raise
            raise TransactionFailed(
                f"could not write the journal in {tx.root}: {exc.strerror or exc}; "
                "nothing was changed",
                hint="free space or fix permissions under the environment, then retry",
            ) from exc
        return tx

    def snapshot(
        self,
        tx: TxDir,
        paths: list[str],
        rewritten: list[str],
        copy: snapshot.CopyWhen = snapshot.never,
        whole: bool = False,
        seen: dict[str, os.stat_result] | None = None,
        opened: snapshot.Opened | None = None,
    ) -> Manifest:
        """Snapshot, or refuse having changed nothing (the env is untouched before this).

        ``copy``, ``whole``, ``seen`` and ``opened`` as for
        :func:`cudafix.tx.snapshot.take`."""
        try:
            journal.append(tx.journal, steps.SnapshotBegin(paths=tuple(paths)))
            manifest = snapshot.take(self.prefix, tx, paths, rewritten, copy, whole, seen, opened)
            journal.append(tx.journal, steps.SnapshotDone(entries=len(manifest.entries)))
        except BaseException as exc:  # an interrupt too: nothing changed, nothing left behind
            with interrupts_held():
                self._discard(tx, exc)
            if not isinstance(exc, OSError | CudafixError):
                raise
            raise _not_snapshotted(self.prefix, exc) from exc
        self.on_event(
            RunEvent("progress", f"snapshot: {len(manifest.entries)} paths in {tx.snapshot}")
        )
        return manifest

    @staticmethod
    def _discard(tx: TxDir, exc: BaseException) -> None:
        shutil.rmtree(tx.snapshot, ignore_errors=True)
        with contextlib.suppress(OSError):
            tx.manifest.unlink()
        if journal.note(tx.journal, steps.Aborted(error=_reason(exc))) is not None:
            shutil.rmtree(tx.root, ignore_errors=True)  # nothing changed: nothing to keep

    def backend_step(self, tx: TxDir, what: str, done: Completed) -> None:
        """Journal what a backend call did; :class:`StepFailed` when it failed."""
        journal.append(
            tx.journal,
            steps.BackendCall(
                step=what,
                argv=tuple(done.argv),
                returncode=done.returncode,
                stdout=done.stdout,
                stderr=done.stderr,
            ),
        )
        if done.returncode != 0:
            raise StepFailed(f"{what} failed ({exit_said(done.returncode, done.stderr, 'stderr')})")

    def probe(self, tx: TxDir, python: Path, spec: ProbeSpec) -> tuple[str, ...]:
        """Run the probes; the labels that passed, or :class:`StepFailed`."""
        journal.append(tx.journal, steps.ProbeBegin())
        self.on_event(RunEvent("progress", "probing the environment"))
        results = run_probes(self.prefix, python, spec, tx.root)
        journal.append(tx.journal, steps.ProbeDone(results=tuple(results)))
        for note in (r.note for r in results if r.note):
            self.on_event(RunEvent("probe-note", note))
        failed = [f"{r.label}: {r.error}" for r in results if not r.ok]
        if failed:
            raise StepFailed("probe failed: " + "; ".join(failed))
        return tuple(r.label for r in results)

    def execute(self, tx: TxDir, manifest: Manifest, step: Callable[[], T]) -> T:
        """Run ``step`` and commit; on any failure (even KeyboardInterrupt) roll back and
        raise. Returns what ``step`` returned; a step that raises :class:`Unchanged` (it
        changed nothing) is neither committed nor rolled back but dropped, and its value
        returned, so the log holds only transactions that changed something; one that raises
        :class:`NotStarted` is dropped too, and its error raised."""
        try:
            done = step()
            self.on_event(RunEvent("progress", "committing"))  # the caller says it committed
            self.commit(tx, manifest)
        except Unchanged as same:
            self._drop(tx, manifest)
            return cast(T, same.value)
        except NotStarted as never:
            self._drop(tx, manifest)
            raise never.error from None
        except BaseException as exc:
            narrowed = exc.restore if isinstance(exc, StepFailed) else None
            unheld = exc.unheld if isinstance(exc, StepFailed) else ()
            with interrupts_held():
                self._fail(tx, _reason(exc), exc, narrowed or manifest, unheld)
        with contextlib.suppress(OSError, CudafixError):
            gc(self.prefix, keep=DEFAULT_KEEP, wait=False)
        return done

    def _drop(self, tx: TxDir, manifest: Manifest) -> None:
        """Forget a transaction that changed nothing: journaled as such first (then nothing
        is pending whatever interrupts the rest), its snapshot to the trash, its directory
        gone. Where the journal cannot say so, it is rolled back (there is nothing to
        restore, but only the rollback may prove it)."""
        with interrupts_held():
            if journal.note(tx.journal, steps.Aborted(error="nothing changed")) is not None:
                self._fail(tx, "the journal could not be written", OSError(), manifest)
            trash.discard(self.state, [tx.txid])
            shutil.rmtree(tx.root, ignore_errors=True)
        with contextlib.suppress(OSError, CudafixError):
            trash.empty(self.state, wait=False)
        self.on_event(RunEvent("progress", f"nothing changed: transaction {tx.txid} dropped"))

    def commit(self, tx: TxDir, manifest: Manifest) -> None:
        """The durable ``commit`` record is the commit point: any failure before it rolls back."""
        journal.append(tx.journal, steps.CommitBegin())
        fail_point("commit")
        after = poststate.after_state(self.prefix, manifest)
        write_json(tx.post, poststate.post_state_to_json(manifest, after))
        changed = tuple(distribution_changes(manifest, after))
        journal.append(tx.journal, steps.Commit(changed=changed))

    def _fail(
        self,
        tx: TxDir,
        reason: str,
        exc: BaseException,
        manifest: Manifest,
        unheld: Sequence[str] = (),
    ) -> NoReturn:
        self.on_event(RunEvent("progress", f"rolling back transaction {tx.txid}"))
        outcome = rollback(self.prefix, tx, reason, manifest, self.on_event)
        if unheld and not outcome.left:
            raise RollbackIncomplete(
                f"{reason}; rolled back {outcome.entries} snapshotted paths, but "
                f"{len(unheld)} path(s) written were never snapshotted and were not restored",
                context=[*unheld, *outcome.journal],
                hint="check them with " + cudafix_line("doctor", target=venv_flags(self.prefix)),
            ) from exc
        if outcome.left:
            raise RollbackIncomplete(
                f"{reason}; the rollback did not finish: {len(outcome.left)} path(s) differ",
                context=[*outcome.left, *unheld, *outcome.journal],
                hint=cudafix_line("recover", target=venv_flags(self.prefix)),
            ) from exc
        self.on_event(RunEvent("info", f"rolled back transaction {tx.txid}"))
        said = [
            f"restored the {outcome.changed} changed of {outcome.entries} snapshotted paths; "
            "all of them verified"
        ]
        if outcome.in_place:
            said.append(
                f"{len(outcome.in_place)} file(s) rewritten in place were not restored (their "
                f"hard-link snapshot changed with them): {', '.join(outcome.in_place[:5])}"
            )
        if outcome.journal:
            said += [
                *outcome.journal,
                "once there is space: " + cudafix_line("recover", target=venv_flags(self.prefix)),
            ]
        status = exc.status if isinstance(exc, StepFailed) else None
        if status is not None:
            raise CommandFailed(f"{reason}; rolled back", status=status, context=said) from exc
        raise TransactionFailed(f"{reason}; rolled back", context=said) from exc


def _not_snapshotted(prefix: Path, exc: OSError | CudafixError) -> TransactionFailed:
    """Why the snapshot failed, naming the path (a socket cudafix cannot snapshot)."""
    why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    where = exc.filename if isinstance(exc, OSError) and exc.filename else None
    odd = isinstance(exc, OSError) and exc.errno == errno.EINVAL
    return TransactionFailed(
        f"could not snapshot {where or prefix}: {why}; nothing was changed",
        hint="move the socket or device file out of the environment"
        if odd
        else "free space or fix permissions under the environment, then retry",
    )


_INTERRUPTS = frozenset({signal.SIGINT, signal.SIGTERM})


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
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
    if isinstance(exc, StepFailed):
        return str(exc)
    if isinstance(exc, KeyboardInterrupt):  # Ctrl-C, or SIGTERM (``Terminated``)
        return "interrupted"
    if isinstance(exc, OSError) and exc.strerror:
        where = f": {exc.filename}" if exc.filename else ""
        return f"{exc.strerror}{where}"
    return f"{type(exc).__name__}: {exc}"


def distribution_changes(manifest: Manifest, after: Mapping[str, Sequence[Any]]) -> list[str]:
    """Distributions a transaction took out (``-name version``), put in (``+name version``)
    or changed the version of, read from the dist-info directories before and after: what
    ``history`` shows for any transaction, a plan's or a command's."""
    before = _dist_infos(e.path for e in manifest.entries if e.kind != "absent")
    now = _dist_infos(p for p, state in after.items() if state[:1] != ["absent"])
    out = []
    for name in sorted(set(before) | set(now)):
        old, new = before.get(name), now.get(name)
        if old == new:
            continue
        if old is None or new is None:
            out.append(f"+{name} {new}" if old is None else f"-{name} {old}")
        else:
            out.append(f"{name} {old} -> {new}")
    return out


def _dist_infos(paths: Iterable[str]) -> dict[str, str]:
    """name -> version for every ``name-version.dist-info`` a path is in or is."""
    out: dict[str, str] = {}
    for path in paths:
        if ".dist-info" not in path:  # most paths of a whole-venv snapshot: no split
            continue
        for part in path.split("/"):
            split = split_dist_info_name(part)
            if split is not None:
                out[normalize_name(split[0])] = split[1]
    return out
