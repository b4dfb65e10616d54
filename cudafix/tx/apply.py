"""Applying a plan as one transaction: check, snapshot, backend, keep, verify, install, probe.

Only the plan's paths are touched (each checked against the prefix before anything runs);
the backend is called with uv's lock handed to it; everything else goes through the
run context (:mod:`cudafix.tx.context`), which commits or rolls back.
"""

from __future__ import annotations

import contextlib
import posixpath
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cudafix.env.statedir import TxDir
from cudafix.env.target import interpreter
from cudafix.fetch.backend import Backend, make_backend
from cudafix.fetch.staging import scratch_dir
from cudafix.fetch.wheelfile import checked_copy, written_paths
from cudafix.model.errors import InputError, PlanRefused, StalePlan, TargetError
from cudafix.model.names import EnvPath
from cudafix.model.plan import Plan
from cudafix.model.probe import ProbeSpec
from cudafix.model.sources import Sources
from cudafix.model.transaction import (
    DEFAULT_LOCK_TIMEOUT,
    OnEvent,
    RunEvent,
    TransactionResult,
    quiet,
)
from cudafix.plan.admit import input_problems, refuse_unless_allowed
from cudafix.tx import files, journal, restore, steps
from cudafix.tx.context import RunContext, StepFailed
from cudafix.tx.difference import Deviation, deviation_text
from cudafix.tx.manifest import Manifest, check_path, checked
from cudafix.tx.verify import install_mismatches

Verify = Callable[[], list[Deviation]]
"""What the result differs from the plan in, beyond the built-in checks (empty: as planned)."""
Precondition = Callable[[], list[str]]
"""What the environment differs from the plan in, before anything changes."""
_Call = tuple[Backend, list[str]]


def run_transaction(
    plan: Plan,
    *,
    probes: ProbeSpec = ProbeSpec(),  # noqa: B008 - frozen value
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    verify: Verify | None = None,
    force: bool = False,
    command: Sequence[str] = (),
    on_event: OnEvent = quiet,
    precondition: Precondition | None = None,
    backend: Backend | None = None,
) -> TransactionResult:
    """Apply ``plan``; commit when verify and probes pass, else roll back and raise.

    ``precondition`` runs under the lock, before anything changes: a plan made while
    another run was changing the environment is refused there, not applied stale.
    ``backend`` defaults to the one the plan names (``plan.options.backend``).
    """
    prefix = _check_plan(plan, force)
    pinned = any(p.wheel for p in [*plan.reinstall, *plan.install])
    scratch_cm = scratch_dir() if pinned else contextlib.nullcontext(None)
    with RunContext.open(prefix, lock_timeout, on_event) as ctx, scratch_cm as scratch:
        ctx.require_no_pending()
        if precondition is not None and (differences := precondition()):
            raise StalePlan(
                f"{prefix} changed since this plan was made; nothing was changed",
                context=differences[:25],
                hint="run the command again to plan on the environment as it is now",
            )
        wheels = _checked_wheels(plan, scratch)
        paths, rewritten = _touched(prefix, plan, wheels)
        plan_json = plan.model_dump(mode="json")
        tx = ctx.begin(steps.Opening(kind="apply", command=tuple(command), plan=plan_json))
        manifest = ctx.snapshot(tx, paths, rewritten)
        run = _Apply(ctx, tx, plan, manifest, probes, verify, backend, wheels)
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
    if problems := input_problems(plan):
        raise InputError("the plan holds fields cudafix will not pass on", context=problems)
    named = [*plan.uninstalled_paths, *plan.rewritten_paths]
    named += [r.dist_info for r in plan.remove]
    named += [p for i in plan.install for p in i.paths]
    problems = [why for _, why in checked(prefix, named) if why is not None]
    if problems:
        raise PlanRefused("the plan names paths cudafix will not act on", context=problems)
    return prefix


def _checked_wheels(plan: Plan, scratch: Path | None) -> list[Path | None]:
    """For each reinstall, then each install, a private copy of the wheel file it was staged
    from, checked against the plan's sha256 (:class:`StalePlan` before anything changes
    when it differs); None for a pin staged from an index or uv's cache."""
    return [
        checked_copy(p.wheel, p.wheel_sha256, scratch)
        if scratch is not None and p.wheel and p.wheel_sha256
        else None
        for p in [*plan.reinstall, *plan.install]
    ]


def _touched(
    prefix: Path, plan: Plan, wheels: Sequence[Path | None] = ()
) -> tuple[list[str], list[str]]:
    """(paths to snapshot, paths the backend will rewrite and must be detached first).

    ``plan.rewritten_paths`` is the planner's word; the reinstalled dists' RECORDs are read
    again here so that an older plan without it is still snapshotted completely, and the
    checked wheels' own RECORDs, so every path an install writes is snapshotted whatever
    the plan says.
    """
    paths = {*plan.uninstalled_paths, *(r.dist_info for r in plan.remove)}
    rewritten = set(plan.rewritten_paths)
    site = EnvPath(plan.target.site_packages[0]) if plan.target.site_packages else EnvPath("")
    named = {p for i in plan.install for p in i.paths}
    named |= {p for w in wheels if w is not None for p in written_paths(w, site)}
    if unsafe := sorted({why for _, why in checked(prefix, named) if why is not None}):
        raise PlanRefused("a wheel to install writes paths cudafix will not act on", context=unsafe)
    installed = named
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
    return {c for c in caches if check_path(prefix, c) is None and (prefix / c).is_dir()}


@dataclass(frozen=True)
class _Apply:
    """The apply phase of one plan, run by :meth:`RunContext.execute`."""

    ctx: RunContext
    tx: TxDir
    plan: Plan
    manifest: Manifest
    probes: ProbeSpec
    verify: Verify | None
    backend: Backend | None
    wheels: Sequence[Path | None] = ()
    """Checked private copies of the reinstall, then install, wheels (:func:`_checked_wheels`)."""

    def _calls(self, backend: Backend, pins: Sequence[str], first: int) -> list[_Call]:
        """The backend calls for ``pins`` (the plan's entries from ``first`` on): those staged
        from a local file from the checked copies alone (``--no-index``, the private
        directory as the only source, so no ``direct_url.json`` points at it), the rest
        from the plan's sources."""
        copies = list(self.wheels[first : first + len(pins)])
        copies += [None] * (len(pins) - len(copies))
        local = [pin for pin, w in zip(pins, copies, strict=True) if w is not None]
        rest = [pin for pin, w in zip(pins, copies, strict=True) if w is None]
        calls: list[_Call] = []
        if local:
            scratch = str(next(w for w in copies if w is not None).parent)
            python = interpreter(self.ctx.prefix, self.plan.target.python)
            only = Sources(offline=True, find_links=(scratch,))
            private = make_backend(self.plan.options.backend, python, only, fresh=True)
            calls.append((private, local))
        if rest:
            calls.append((backend, rest))
        return calls

    def steps(self) -> tuple[str, ...]:
        """Detach, uninstall, reinstall, keep, verify, install, probe; raise at the first
        failure (the run context rolls back)."""
        ctx, tx, plan, manifest = self.ctx, self.tx, self.plan, self.manifest
        prefix = ctx.prefix
        detached = [e.path for e in manifest.entries if e.detach]
        journal.append(tx.journal, steps.DetachBegin(paths=tuple(detached)))
        restore.detach(prefix, manifest)
        python = interpreter(prefix, plan.target.python)
        opts = plan.options
        backend = self.backend or make_backend(opts.backend, python, opts.sources)
        files.sanitize_records(prefix, tx, plan)
        if plan.remove:
            names = [r.name for r in plan.remove]
            journal.append(tx.journal, steps.UninstallBegin(names=tuple(names)))
            ctx.on_event(RunEvent("progress", f"uninstalling {', '.join(names)}"))
            with ctx.backend_runs():
                done = backend.uninstall(names)
            ctx.backend_step(tx, f"{opts.backend} uninstall", done)
            files.complete_deletions(prefix, plan, manifest)
        if plan.reinstall:
            self._reinstall(backend)
        if plan.kept_paths:
            journal.append(tx.journal, steps.KeepBegin(paths=tuple(plan.kept_paths)))
            restore.put_back(prefix, tx, manifest, plan.kept_paths)
        files.recompile(prefix, python, manifest)
        journal.append(tx.journal, steps.VerifyBegin())
        problems = files.builtin_verify(prefix, plan, manifest)
        problems += files.holders_verify(prefix, plan)
        problems += self.verify() if self.verify else []
        if problems:
            raise StepFailed(
                "the result differs from the plan: " + "; ".join(map(deviation_text, problems))
            )
        if plan.install:
            self._install(backend)
        return ctx.probe(tx, python, self.probes)

    def _reinstall(self, backend: Backend) -> None:
        ctx, tx, plan = self.ctx, self.tx, self.plan
        pins = [f"{r.name}=={r.version}" for r in plan.reinstall]
        journal.append(tx.journal, steps.ReinstallBegin(pins=tuple(pins)))
        ctx.on_event(RunEvent("progress", f"reinstalling {', '.join(pins)}"))
        # Co-owners of one path in one backend call race for it: one call each, in order.
        for i, batch in enumerate([[p] for p in pins] if plan.holders_after else [pins]):
            for chosen, group in self._calls(backend, batch, i if plan.holders_after else 0):
                with ctx.backend_runs():
                    done = chosen.reinstall(group)
                ctx.backend_step(tx, f"{plan.options.backend} reinstall", done)
                self._held(group, "reinstall")

    def _held(self, pins: Sequence[str], what: str) -> None:
        """:class:`StepFailed` when the backend wrote a path the snapshot does not hold (its
        wheel is not the one planned on: an index serving another build under the version),
        naming each: the rollback cannot put those back and must not claim it did."""
        prefix = self.ctx.prefix
        written: list[str] = []
        for pin in pins:
            name, _, version = pin.partition("==")
            info = files.dist_info(prefix, self.plan, name, version)
            if info is not None:
                written += files.record_paths(prefix, info, through_symlinks=True)
        if stray := restore.unheld(prefix, self.manifest, written):
            raise StepFailed(
                f"{self.plan.options.backend} {what} wrote {len(stray)} path(s) beyond the "
                "snapshot (the wheel is not the one planned on)",
                unheld=stray,
            )

    def _install(self, backend: Backend) -> None:
        """Install the exact pins (after verify: they may re-create paths the removal deleted)."""
        ctx, tx, plan = self.ctx, self.tx, self.plan
        pins = [f"{i.name}=={i.version}" for i in plan.install]
        journal.append(tx.journal, steps.InstallBegin(pins=tuple(pins)))
        ctx.on_event(RunEvent("progress", f"installing {', '.join(pins)}"))
        for chosen, group in self._calls(backend, pins, len(plan.reinstall)):
            with ctx.backend_runs():
                done = chosen.reinstall(group)
            ctx.backend_step(tx, f"{plan.options.backend} install", done)
            self._held(group, "install")
        problems = install_mismatches(plan)
        if problems:
            more = f" and {len(problems) - 5} more" if len(problems) > 5 else ""
            raise StepFailed(
                "the install differs from the staged wheels: "
                + "; ".join(map(deviation_text, problems[:5]))
                + more
            )
