"""``cudafix run -- CMD``: any command that changes the environment, as a transaction.

The whole environment is snapshotted, the command runs with its output shown live and
uv's lock handed to it, and the run commits only when the command succeeded in time, the
judge found nothing new (or it was accepted) and the probes pass; otherwise it rolls back
through the run context. The command lives in its own process group (it dies with
cudafix); while it runs, cudafix's own state is held open, so a command that deletes it
(``uv venv --clear``) is still rolled back.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from cudafix.env.memo import stats
from cudafix.env.statedir import STATE_DIR_NAME, TxDir
from cudafix.env.target import interpreter
from cudafix.fetch.backend import UvBackend, uv_path_dirs
from cudafix.model.commands import cudafix_line, venv_flags
from cudafix.model.probe import ProbeSpec
from cudafix.model.transaction import (
    DEFAULT_LOCK_TIMEOUT,
    GuardedRun,
    OnEvent,
    RunEvent,
    exit_status,
    quiet,
)
from cudafix.process import Completed, activated, resolve_command, run_live
from cudafix.tx import hold, journal, restore, steps
from cudafix.tx.context import NotStarted, RunContext, StepFailed, Unchanged
from cudafix.tx.lock import Writer
from cudafix.tx.manifest import Manifest
from cudafix.tx.recovery import boot_id
from cudafix.tx.snapshot import Opened


@dataclass(frozen=True)
class Judged:
    """What ``run``'s judge says of the environment after the command."""

    findings: tuple[str, ...]
    """Problems doctor finds now and did not find before."""
    probes: ProbeSpec
    """The probes to run (what the command changed, and the user's)."""


Judge = Callable[[], Judged]
"""What the environment looks like now: the problems the command introduced, the probes."""

Owners = Callable[[Sequence[str]], list[str]]
"""``NAME==VERSION`` of the distributions whose RECORD claims any of the paths."""


def _nothing() -> None:
    return None


def _no_owners(_paths: Sequence[str]) -> list[str]:
    return []


@dataclass(frozen=True)
class GuardArgs:
    """What one guarded run is asked to do."""

    argv: tuple[str, ...]
    judge: Judge
    accept: bool
    timeout: float | None
    echo: tuple[int, int]
    """File descriptors the command's stdout and stderr are copied to."""
    owners: Owners = _no_owners
    ready: Callable[[], None] = _nothing
    """Called last before the command starts (the snapshot taken): the state it starts
    from. It runs as one reading (:func:`cudafix.env.memo.stats.one_reading`) of the
    snapshot's stats; what it raises drops the transaction and is raised as it is."""


COPY_LIMIT = 1 << 20
"""Files up to this size outside site-packages (``pyvenv.cfg``, ``bin/`` scripts, ``etc/``)
are snapshotted by copy: tools append to them in place."""


def _small_outside_site_packages(path: str, size: int) -> bool:
    # asked of each of a torch venv's 22k files: a search, not a split
    return size <= COPY_LIMIT and "/site-packages/" not in f"/{path}"


def prefix_roots(prefix: Path) -> list[str]:
    """Every top-level entry of the environment but cudafix's own state: a command may
    write anywhere (``share/``, ``include/``, ``etc/``, ``pyvenv.cfg``)."""
    with os.scandir(prefix) as it:
        return sorted(e.name for e in it if e.name != STATE_DIR_NAME)


def run_guarded(
    prefix: Path,
    argv: Sequence[str],
    *,
    judge: Judge,
    accept: bool = False,
    timeout: float | None = None,
    echo: tuple[int, int] = (1, 2),
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    command: Sequence[str] = (),
    owners: Owners = _no_owners,
    ready: Callable[[], None] = _nothing,
    on_event: OnEvent = quiet,
) -> GuardedRun:
    """Snapshot the whole environment, run ``argv`` (output copied live to ``echo``), then
    commit only when it succeeded, ``judge`` (what the environment looks like now) has
    nothing new and its probes pass; otherwise roll back and raise. ``accept`` commits
    despite ``judge``'s findings; ``timeout`` stops the command and rolls back.
    ``ready``'s reading is given the snapshot's stats."""
    args = GuardArgs(tuple(argv), judge, accept, timeout, echo, owners, ready)
    with RunContext.open(prefix, lock_timeout, on_event) as ctx:
        ctx.require_no_pending()
        tx = ctx.begin(steps.Opening(kind="run", command=tuple(command), argv=tuple(argv)))
        roots = prefix_roots(prefix)
        copy = _small_outside_site_packages
        stats_seen: dict[str, os.stat_result] = {}
        seen = restore.Seen(stats_seen, time.time_ns())
        opened = hold.opened_as_stored()
        try:
            manifest = ctx.snapshot(
                tx, roots, [], copy=copy, whole=True, seen=stats_seen, opened=opened
            )
            done = ctx.execute(tx, manifest, _Guarded(ctx, tx, manifest, args, seen, opened).step)
        finally:
            opened.close()
    if not done.committed:
        return done
    return replace(done, changed=journal.changes(journal.read(tx.journal)) or ())


_PYTHON_WORDS = re.compile(r"(pip|python)(3(\.\d+)?)?")
"""Command words that act on whichever environment they come from."""


@dataclass(frozen=True)
class Outside:
    """A command word that resolves outside the environment (``pip`` where ``uv venv``
    made no ``bin/pip``): the command would act on another one."""

    word: str
    found: str | None
    """The file it runs instead (None: found nowhere)."""
    pip: bool
    """A pip word (else a python one)."""


def outside_command(prefix: Path, argv: Sequence[str]) -> Outside | None:
    """Whether the command's first word is pip or python and runs from outside ``prefix``
    with the environment activated (``VIRTUAL_ENV``, ``bin/`` first on ``PATH``)."""
    word = argv[0] if argv else ""
    made = _PYTHON_WORDS.fullmatch(Path(word).name)
    if made is None:
        return None
    found = resolve_command(word, activated(prefix))
    if found is not None and Path(found).absolute().parent.resolve() == (prefix / "bin").resolve():
        return None
    return Outside(word, found, made[1] == "pip")


def _reinstall_hint(prefix: Path, pins: Sequence[str]) -> str:
    """What brings files rewritten in place back: reinstalling their distributions."""
    if not pins:
        return "no distribution claims them, so nothing can reinstall them"
    # The bundled uv, with --no-cache: uv hard-links installed files from its cache, so a
    # write in place may have gone through the link into the cached copy itself, which a
    # reinstall (even with --refresh) would link back.
    argv = UvBackend(interpreter(prefix)).reinstall_argv(pins, options=["--no-cache"])
    line = cudafix_line("run", target=venv_flags(prefix), tail=["--", *argv])
    return f"reinstall their distributions to bring them back: `{line}`"


@dataclass(frozen=True)
class _Guarded:
    """The command's step of one guarded run, run by :meth:`RunContext.execute`."""

    ctx: RunContext
    tx: TxDir
    manifest: Manifest
    args: GuardArgs
    seen: restore.Seen | None = None
    """Each path's stat as snapshotted (:func:`cudafix.tx.snapshot.take`)."""
    opened: Opened | None = None
    """The snapshot's files it held open as it stored them."""

    def step(self) -> GuardedRun:
        ctx, tx, args = self.ctx, self.tx, self.args
        try:
            with stats.one_reading(self.seen.stats if self.seen else None):
                args.ready()
        except BaseException as exc:
            raise NotStarted(exc) from exc
        journal.append(tx.journal, steps.RunBegin(argv=args.argv))
        ctx.on_event(RunEvent("progress", f"running {shlex.join(args.argv)}"))
        held = hold.hold_state(tx, self.manifest, self.opened)
        found: restore.Changes | None = None
        try:
            done, intrusion, foreign = self._run()
            taken = self._state_taken(held)
            if taken is None and not foreign:  # read while the snapshot is still held
                found = restore.changes(
                    ctx.prefix, self.manifest, in_place=True, seen=self.seen, held=held.fds
                )
        finally:
            held.close()
        if taken is not None:
            raise taken
        if not foreign:
            return self._conclude(done, intrusion, found)
        kept = replace(self, manifest=self._keep_out(foreign))
        try:
            return kept._conclude(done, intrusion)
        except StepFailed as failed:
            if failed.restore is None:  # the rollback leaves the other writer's files too
                failed.restore = kept.manifest
            raise

    def _keep_out(self, foreign: Mapping[str, Writer]) -> Manifest:
        """Name what processes outside the transaction wrote into the environment while the
        command ran, and keep it out of the rollback and of any later undo."""
        said = "; ".join(w.describe() for w in list(foreign.values())[:10])
        more = f" and {len(foreign) - 10} more" if len(foreign) > 10 else ""
        self.ctx.on_event(
            RunEvent(
                "warning",
                f"a process outside this transaction changed the environment while the command "
                f"ran ({said}{more}): its files are left as it wrote them, neither rolled back "
                f"nor undone with this transaction",
            )
        )
        return restore.adopt(self.tx, self.manifest, foreign)

    def _conclude(
        self, done: Completed, intrusion: StepFailed | None, found: restore.Changes | None = None
    ) -> GuardedRun:
        """Judge the command's changes (``found``, else read now): drop, commit or fail
        the transaction."""
        ctx, tx, args, prefix = self.ctx, self.tx, self.args, self.ctx.prefix
        if found is None:
            found = restore.changes(prefix, self.manifest, in_place=True, seen=self.seen)
        if not done.timed_out and intrusion is None and found.derived_only():
            raise Unchanged(GuardedRun(tx.txid, prefix, done, (), (), (), committed=False))
        in_place = list(found.in_place)
        try:
            judged = self._judge(done, intrusion)
            passed = ctx.probe(tx, interpreter(prefix), judged.probes)
        except StepFailed as failed:
            if not in_place:
                raise
            hint = _reinstall_hint(prefix, args.owners(in_place))
            raise StepFailed(
                f"{failed}; {len(in_place)} file(s) were rewritten in place, so their "
                f"snapshot (a hard link) changed too and they stay as the command left "
                f"them: {', '.join(in_place[:5])}; {hint}",
                restore=restore.forget(tx, self.manifest, in_place),
                status=failed.status,
            ) from failed
        if in_place:  # committed with them: undo restores the rest and names these
            restore.forget(tx, self.manifest, in_place)
        return GuardedRun(
            txid=tx.txid,
            prefix=prefix,
            completed=done,
            findings=judged.findings,
            probes=passed,
            in_place=tuple(in_place),
        )

    def _run(self) -> tuple[Completed, StepFailed | None, dict[str, Writer]]:
        """Run the command with uv's lock lent to it; returns what it did, the failure of
        the hand-over when a process outside the transaction used the lock, and the files
        processes outside the transaction were seen writing."""
        ctx, tx, args = self.ctx, self.tx, self.args
        done: Completed | None = None
        hand = None
        try:
            with ctx.backend_runs(watched=True) as hand:

                def started(pgid: int) -> None:
                    hand.started(pgid)
                    journal.append(tx.journal, steps.Process(pgid=pgid, boot=boot_id()))

                done = run_live(
                    args.argv,
                    env=activated(ctx.prefix, last=uv_path_dirs()),
                    timeout=args.timeout,
                    echo=args.echo,
                    on_start=started,
                    watch=hand.watch,
                )
        except StepFailed as failed:
            if done is None:
                raise  # refused before the command ran
            return done, failed, hand.written if hand is not None else {}
        assert done is not None and hand is not None
        return done, None, hand.written

    def _judge(self, done: Completed, intrusion: StepFailed | None) -> Judged:
        """Journal what the command did; fail on its exit, time, an intrusion or findings."""
        ctx, tx, args = self.ctx, self.tx, self.args
        if done.timed_out or intrusion is not None:
            with contextlib.suppress(StepFailed):
                ctx.backend_step(tx, "the command", done)  # journals what it said
            raise intrusion or StepFailed(f"the command did not finish within {args.timeout:g} s")
        try:
            ctx.backend_step(tx, "the command", done)  # journals it; raises when it failed
        except StepFailed as failed:  # run exits with the command's own status
            raise StepFailed(str(failed), status=exit_status(done.returncode)) from None
        judged = args.judge()
        if judged.findings and not args.accept:
            raise StepFailed(
                "the command left the environment with new problems: " + "; ".join(judged.findings)
            )
        return judged

    def _state_taken(self, held: hold.HeldState) -> StepFailed | None:
        """When the command removed or replaced cudafix's state (``uv venv --clear``), write
        it again from what was held open, take cudafix's lock again, and fail the step so the
        rollback restores the environment from it (a command that removes the state cannot
        be judged against it)."""
        ctx, tx = self.ctx, self.tx
        if not hold.state_lost(tx, held):
            return None
        manifest, lost = hold.rebuild(ctx.prefix, tx, held)
        ctx.locks.retake_own()
        ctx.on_event(
            RunEvent("info", f"the command removed cudafix's state in {ctx.state.root}; rebuilt it")
        )
        unrestorable = f"; {len(lost)} file(s) cannot be restored: {', '.join(lost[:5])}"
        return StepFailed(
            f"the command removed or replaced cudafix's own state ({ctx.state.root}), so it "
            f"cannot be judged; the state was rebuilt from files held open"
            + (unrestorable if lost else ""),
            restore=manifest,
        )
