"""Running any command that changes the environment as a transaction, judged before and after.

``cudafix run -- uv pip install -U torch``: the environment is snapshotted, the command
runs, and the environment is diagnosed again; the run is rolled back when the command
introduced a problem doctor reports (``accept``: commit anyway) or a probe fails. The
reading before is doctor's last one when nothing it rests on changed
(:mod:`cudafix.env.memo.before`), else read now and kept for the next run. It is taken
under the lock once the snapshot is, from the snapshot's own stats: no path is statted
twice before the command starts.
"""

from __future__ import annotations

import functools
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cudafix.env.memo.answers import ReadSet, settled_stamp, stamp
from cudafix.env.memo.before import recall_before
from cudafix.env.target import TargetEnv
from cudafix.flows.probes import probe_set
from cudafix.flows.target import (
    before_run_memo,
    check_pending,
    facts_read_set,
    locate,
    read_facts,
    remember_answer,
    search_dirs,
    target_flags,
)
from cudafix.model.args import FactArgs, LiveArgs, RunArgs
from cudafix.model.commands import TargetFlags
from cudafix.model.names import DistName, EnvPath
from cudafix.model.transaction import GuardedRun, OnEvent, RunEvent, quiet
from cudafix.tx.context import StepFailed
from cudafix.tx.guard import Judged, Outside, outside_command, run_guarded

if TYPE_CHECKING:
    from cudafix.env.inventory import Distribution
    from cudafix.model.doctor import Finding, SayFindings


@dataclass(frozen=True)
class _Before:
    """What ``run`` judges its command against: the state the diagnosis read before it."""

    read: ReadSet
    """What the diagnosis read: unchanged after the command, nothing new can be wrong."""
    dist_infos: frozenset[str]
    """The distributions installed (their ``.dist-info`` EnvPaths): the others are probed."""
    findings: Callable[[], Sequence[Finding]]
    """doctor's findings (remembered, or read now and kept for the next run), asked for
    only when the command changed what they were read from."""
    owners: Callable[[Sequence[str]], list[str]]
    """``NAME==VERSION`` of the distributions whose RECORD claims any of the paths."""


def _remembered_before(args: FactArgs, target: TargetEnv, on_event: OnEvent) -> _Before | None:
    """The last reading doctor's findings were kept from (by ``doctor``, or by a ``run``
    that read first), when nothing it was read from has changed since but ctimes (None:
    none kept, or not this user's, or stale); the environment then need not be read
    again before the command."""
    found = recall_before(target.prefix, args)
    if found is None:
        return None
    on_event(
        RunEvent(
            "progress",
            f"Environment: {target.prefix}: nothing doctor's last reading depends on changed "
            "since; the command is judged against its findings",
        )
    )

    def owners(paths: Sequence[str]) -> list[str]:
        # asked only when the command wrote files in place, which keeps their owners
        # installed: those still installed that were installed before
        now = read_facts(args, target).inventory
        kept = {n: d for n, d in now.distributions.items() if d.dist_info in found.dist_infos}
        return _owners(kept, now.owners, paths)

    return _Before(found.read, found.dist_infos, found.findings, owners)


def _read_before(
    args: FactArgs, target: TargetEnv, flags: TargetFlags, on_event: OnEvent
) -> _Before:
    """The target's reading before the command, read now; its findings are kept for the
    next run, as doctor keeps them (:func:`_remembered_before`)."""
    from cudafix.plan.doctor import diagnose

    started = time.time_ns()
    facts = read_facts(args, target, on_event)
    inv = facts.inventory
    read = facts_read_set(
        args, target, facts.read_paths, search_dirs(facts), host=facts.host.consulted()
    )
    findings = diagnose(facts, flags).findings
    facts.host.save()
    kept = before_run_memo(args, facts, findings)
    if kept:
        remember_answer(args, kept, since_ns=started, read=read, ctimes=False, own_transaction=True)
    return _Before(
        read,
        frozenset(d.dist_info for d in inv.distributions.values()),
        lambda: findings,
        functools.partial(_owners, inv.distributions, inv.owners),
    )


def _owners(
    dists: Mapping[DistName, Distribution],
    owned: Mapping[EnvPath, Sequence[DistName]],
    paths: Sequence[str],
) -> list[str]:
    names = {n for p in paths for n in owned.get(EnvPath(p), ())}
    return sorted(f"{n}=={dists[n].version}" for n in names if n in dists)


def _outside_words(prefix: Path, outside: Outside) -> str:
    """One line: the command word acts on another environment, and what acts on this one."""
    where = f"runs {outside.found}" if outside.found else "is found nowhere"
    python = shlex.quote(str(prefix / "bin" / "python"))
    use = (
        f"`{python} -m pip` or `uv pip --python {shlex.quote(str(prefix))}`"
        if outside.pip
        else f"`{python}`"
    )
    return f"`{outside.word}` {where}, outside {prefix}: it does not act on it; use {use}"


def run_command(
    args: FactArgs,
    argv: Sequence[str],
    run: RunArgs,
    live: LiveArgs = LiveArgs(),  # noqa: B008 - frozen value
    *,
    accept: bool = False,
    on_event: OnEvent = quiet,
    say: SayFindings,
) -> GuardedRun:
    """Run any command that changes the environment (``uv pip install -U torch``,
    ``pip install -r req.txt``) as a transaction: the whole environment is snapshotted, the
    environment is diagnosed again after, and the run is rolled back when it introduced a
    problem doctor reports (``accept``: commit anyway) or a probe fails. The automatic
    probes import what the distributions the command added or changed provide. ``say``
    words the problems found, for the verdict."""
    target = locate(args.target)
    check_pending(target, mutating=True, on_event=on_event)
    if (outside := outside_command(target.prefix, argv)) is not None:
        on_event(RunEvent("warning", _outside_words(target.prefix, outside)))
    flags = target_flags(args.target, target)
    taken: list[_Before] = []
    start: list[str] = []

    def ready() -> None:
        # under the lock, the snapshot taken: this reading's stats are the snapshot's, so
        # nothing is statted again to see what doctor's last reading still holds
        before = _remembered_before(args, target, on_event) or _read_before(
            args, target, flags, on_event
        )
        taken.append(before)
        start.append(settled_stamp(target.prefix, before.read))

    def owners(paths: Sequence[str]) -> list[str]:
        return taken[0].owners(paths) if taken else []

    def judge() -> Judged:
        before = taken[0]
        if stamp(target.prefix, before.read) == start[0]:
            on_event(RunEvent("progress", "  nothing the diagnosis reads changed: no new problems"))
            return Judged((), probe_set(run))
        from cudafix.model.doctor import new_problems
        from cudafix.plan.doctor import diagnose

        now = read_facts(args, target)
        report = diagnose(now, flags)
        try:
            old = before.findings()
        except ValueError as exc:
            raise StepFailed(f"cannot judge the command: {exc}") from exc
        findings = say(report, new_problems(old, report.findings))
        dists = now.inventory.distributions.values()
        changed = [d for d in dists if d.dist_info not in before.dist_infos]
        modules = sorted({m for d in changed for m in d.top_level})
        return Judged(tuple(findings), probe_set(run, modules=modules))

    return run_guarded(
        target.prefix,
        argv,
        judge=judge,
        owners=owners,
        ready=ready,
        accept=accept,
        timeout=live.timeout,
        echo=live.echo,
        lock_timeout=run.lock_timeout,
        command=run.command,
        on_event=on_event,
    )
