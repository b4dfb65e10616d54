"""Applying a plan as one transaction: check, snapshot, backend, keep, verify, install, probe.

Only the plan's paths are touched (each checked against the prefix before anything runs);
the backend is called with uv's lock handed to it; everything else goes through the
run context (:mod:`cudafix.tx.context`), which commits or rolls back.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cudafix.env.statedir import TxDir
from cudafix.fetch.backend import Backend, make_backend
from cudafix.model.errors import PlanRefused, StalePlan, TargetError
from cudafix.model.plan import Plan, refuse_unless_allowed
from cudafix.model.probe import ProbeSpec
from cudafix.model.transaction import DEFAULT_LOCK_TIMEOUT, OnEvent, TransactionResult, quiet
from cudafix.tx import files, journal, snapshot
from cudafix.tx.context import RunContext, StepFailed
from cudafix.tx.journal import Event
from cudafix.tx.verify import install_mismatches

Verify = Callable[[], list[str]]


def run_transaction(
    plan: Plan,
    *,
    probes: ProbeSpec = ProbeSpec(),  # noqa: B008 - frozen value
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    verify: Verify | None = None,
    force: bool = False,
    command: Sequence[str] = (),
    on_event: OnEvent = quiet,
    precondition: Verify | None = None,
    backend: Backend | None = None,
) -> TransactionResult:
    """Apply ``plan``; commit when verify and probes pass, else roll back and raise.

    ``precondition`` runs under the lock, before anything changes: a plan made while
    another run was changing the environment is refused there, not applied stale.
    ``backend`` defaults to the one the plan names (``plan.options.backend``).
    """
    prefix = _check_plan(plan, force)
    with RunContext.open(prefix, lock_timeout, on_event) as ctx:
        ctx.require_no_pending()
        if precondition is not None and (differences := precondition()):
            raise StalePlan(
                f"{prefix} changed since this plan was made; nothing was changed",
                context=differences[:25],
                hint="run the command again to plan on the environment as it is now",
            )
        paths, rewritten = _touched(prefix, plan)
        opening = journal.opening("apply", command, plan=plan.model_dump(mode="json"))
        tx = ctx.begin(opening)
        manifest = ctx.snapshot(tx, paths, rewritten)
        run = _Apply(ctx, tx, plan, manifest, probes, verify, backend)
        passed = ctx.execute(tx, manifest, run.steps)
    return TransactionResult(
        txid=tx.txid,
        prefix=prefix,
        removed=tuple(r.name for r in plan.remove),
        reinstalled=tuple(r.name for r in plan.reinstall),
        kept=tuple(plan.kept_paths),
        probes=passed,
        snapshot_entries=len(manifest.entries),
        installed=tuple(f"{i.name}=={i.version}" for i in plan.install),
    )


def _check_plan(plan: Plan, force: bool) -> Path:
    """Refuse, before anything is done, a plan that is refused or names an unsafe path."""
    prefix = Path(plan.target.prefix)
    if not prefix.is_absolute() or not prefix.is_dir():
        raise TargetError(f"no environment at {plan.target.prefix}")
    refuse_unless_allowed(plan, force)
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
        info = files.dist_info(prefix, plan, r.name, r.version)
        if info is not None:
            paths.add(info)
            rewritten.update(files.record_paths(prefix, info))
    detach = {p for p in rewritten if not any(c.endswith(".dist-info") for c in p.split("/"))}
    paths |= _backend_side_effects(prefix, paths | rewritten)
    return sorted(paths | rewritten), sorted(detach)


def _backend_side_effects(prefix: Path, touched: set[str]) -> set[str]:
    """What a backend changes beyond RECORD rows, so a rollback is byte-identical: the
    ``__pycache__`` next to every touched ``.py`` (uv and pip delete bytecode of the sources
    they remove). uv's lock file is the run context's: held for the whole run, and removed
    on rollback when this run created it."""
    caches = {
        f"{posixpath.dirname(p)}/__pycache__" if "/" in p else "__pycache__"
        for p in touched
        if p.endswith(".py")
    }
    return {c for c in caches if snapshot.check_path(prefix, c) is None and (prefix / c).is_dir()}


@dataclass(frozen=True)
class _Apply:
    """The apply phase of one plan, run by :meth:`RunContext.execute`."""

    ctx: RunContext
    tx: TxDir
    plan: Plan
    manifest: snapshot.Manifest
    probes: ProbeSpec
    verify: Verify | None
    backend: Backend | None

    def steps(self) -> tuple[str, ...]:
        """Detach, uninstall, reinstall, keep, verify, install, probe; raise at the first
        failure (the run context rolls back)."""
        ctx, tx, plan, manifest = self.ctx, self.tx, self.plan, self.manifest
        prefix = ctx.prefix
        detached = [e.path for e in manifest.entries if e.detach]
        journal.append(tx.journal, Event.DETACH_BEGIN, {"paths": detached})
        snapshot.detach(prefix, manifest)
        python = Path(plan.target.python or prefix / "bin" / "python")
        opts = plan.options
        backend = self.backend or make_backend(
            opts.backend, python, offline=opts.offline, find_links=opts.find_links
        )
        files.sanitize_records(prefix, tx, plan)
        if plan.remove:
            names = [r.name for r in plan.remove]
            journal.append(tx.journal, Event.UNINSTALL_BEGIN, {"names": names})
            ctx.on_event(f"uninstalling {', '.join(names)}")
            with ctx.backend_runs():
                done = backend.uninstall(names)
            ctx.backend_step(tx, f"{opts.backend} uninstall", done)
            files.complete_deletions(prefix, plan, manifest)
        if plan.reinstall:
            self._reinstall(backend)
        if plan.kept_paths:
            journal.append(tx.journal, Event.KEEP_BEGIN, {"paths": plan.kept_paths})
            snapshot.put_back(prefix, tx, manifest, plan.kept_paths)
        files.recompile(prefix, python, manifest)
        journal.append(tx.journal, Event.VERIFY_BEGIN)
        problems = files.builtin_verify(prefix, plan, manifest)
        problems += files.holders_verify(prefix, plan)
        problems += self.verify() if self.verify else []
        if problems:
            raise StepFailed("the result differs from the plan: " + "; ".join(problems))
        if plan.install:
            self._install(backend)
        return ctx.probe(tx, python, self.probes)

    def _reinstall(self, backend: Backend) -> None:
        ctx, tx, plan = self.ctx, self.tx, self.plan
        pins = [f"{r.name}=={r.version}" for r in plan.reinstall]
        journal.append(tx.journal, Event.REINSTALL_BEGIN, {"pins": pins})
        ctx.on_event(f"reinstalling {', '.join(pins)}")
        # Co-owners of one path in one backend call race for it: one call each, in order.
        for batch in [[p] for p in pins] if plan.holders_after else [pins]:
            with ctx.backend_runs():
                done = backend.reinstall(batch)
            ctx.backend_step(tx, f"{plan.options.backend} reinstall", done)

    def _install(self, backend: Backend) -> None:
        """Install the exact pins (after verify: they may re-create paths the removal deleted)."""
        ctx, tx, plan = self.ctx, self.tx, self.plan
        pins = [f"{i.name}=={i.version}" for i in plan.install]
        journal.append(tx.journal, Event.INSTALL_BEGIN, {"pins": pins})
        ctx.on_event(f"installing {', '.join(pins)}")
        with ctx.backend_runs():
            done = backend.reinstall(pins)
        ctx.backend_step(tx, f"{plan.options.backend} install", done)
        problems = install_mismatches(plan)
        if problems:
            more = f" and {len(problems) - 5} more" if len(problems) > 5 else ""
            raise StepFailed(
                "the install differs from the staged wheels: " + "; ".join(problems[:5]) + more
            )
