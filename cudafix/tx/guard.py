"""``cudafix run -- CMD``: any command that changes the environment, as a transaction.

The roots are snapshotted by hard link, the command runs with uv's lock handed to it,
and the run commits only when the command succeeded, the judge found nothing new (or it
was accepted) and the probes pass; otherwise it rolls back through the run context.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cudafix.env.statedir import TxDir
from cudafix.model.commands import cudafix_line, shell_join, venv_flags
from cudafix.model.probe import ProbeSpec
from cudafix.model.transaction import DEFAULT_LOCK_TIMEOUT, GuardedRun, OnEvent, quiet
from cudafix.process import activated, run
from cudafix.tx import journal, snapshot
from cudafix.tx.context import RunContext, StepFailed
from cudafix.tx.journal import Event

Judge = Callable[[], list[str]]
"""What the environment looks like now: the problems the command introduced."""


@dataclass(frozen=True)
class GuardArgs:
    """What one guarded run is asked to do."""

    argv: tuple[str, ...]
    judge: Judge
    probes: ProbeSpec
    accept: bool
    timeout: float | None


def run_guarded(
    prefix: Path,
    roots: Sequence[str],
    argv: Sequence[str],
    *,
    judge: Judge,
    probes: ProbeSpec,
    accept: bool = False,
    timeout: float | None = None,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    command: Sequence[str] = (),
    on_event: OnEvent = quiet,
) -> GuardedRun:
    """Snapshot ``roots`` (hard links), run ``argv``, then commit only when it succeeded,
    ``judge`` (what the environment looks like now) has nothing new and the probes pass;
    otherwise roll back and raise. ``accept`` commits despite ``judge``'s findings."""
    args = GuardArgs(tuple(argv), judge, probes, accept, timeout)
    with RunContext.open(prefix, lock_timeout, on_event) as ctx:
        ctx.require_no_pending()
        tx = ctx.begin(journal.opening("run", command, argv=list(argv)))
        manifest = ctx.snapshot(tx, list(roots), [])
        return ctx.execute(tx, manifest, _Guarded(ctx, tx, manifest, args).step)


@dataclass(frozen=True)
class _Guarded:
    """The command's step of one guarded run, run by :meth:`RunContext.execute`."""

    ctx: RunContext
    tx: TxDir
    manifest: snapshot.Manifest
    args: GuardArgs

    def step(self) -> GuardedRun:
        ctx, tx, args, prefix = self.ctx, self.tx, self.args, self.ctx.prefix
        journal.append(tx.journal, Event.RUN_BEGIN, {"argv": list(args.argv)})
        ctx.on_event(f"running {shell_join(args.argv)}")
        with ctx.backend_runs():  # the command may be uv: hand it uv's lock
            done = run(args.argv, env=activated(prefix), timeout=args.timeout)
        in_place = snapshot.written_in_place(prefix, self.manifest)
        try:
            ctx.backend_step(tx, "the command", done)  # journals it; raises when it failed
            findings = args.judge()
            if findings and not args.accept:
                raise StepFailed(
                    "the command left the environment with new problems: " + "; ".join(findings)
                )
            passed = ctx.probe(tx, prefix / "bin" / "python", args.probes)
        except StepFailed as failed:
            if not in_place:
                raise
            raise StepFailed(
                f"{failed}; {len(in_place)} file(s) were rewritten in place, so their "
                f"snapshot (a hard link) changed too and they stay as the command left "
                f"them: {', '.join(in_place[:5])}; after the rollback, "
                f"`{cudafix_line('doctor', target=venv_flags(prefix))}` names their "
                "distributions to repair",
                restore=_forget(tx, self.manifest, in_place),
            ) from failed
        return GuardedRun(
            txid=tx.txid,
            prefix=prefix,
            completed=done,
            findings=tuple(findings),
            probes=passed,
            in_place=tuple(in_place),
        )


def _forget(tx: TxDir, manifest: snapshot.Manifest, paths: Sequence[str]) -> snapshot.Manifest:
    """Drop entries whose snapshot is not the old content (in-place writes) from the manifest,
    so the rollback restores everything else and finishes instead of failing on them."""
    gone = set(paths)
    narrowed = snapshot.Manifest(
        tuple(e for e in manifest.entries if e.path not in gone), manifest.listings
    )
    snapshot.write_json(tx.manifest, narrowed.to_json())  # what recover would restore
    return narrowed
