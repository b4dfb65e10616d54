"""Opening a target: locating it, checking for unfinished transactions, reading its facts.

Every flow opens its target here (:func:`open_target`), so pending transactions are
checked before any planning and facts are read once, whichever command asked; ``doctor``,
which only reads, is here too, with what it remembers for a later ``run``
(:mod:`cudafix.env.memo.before`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from cudafix.env.memo.answers import Answer, ReadSet, read_set, remember
from cudafix.env.memo.before import KEPT_PATHS, before_run_answer, before_run_key
from cudafix.env.memo.treecache import TreeCache
from cudafix.env.statedir import StateDir
from cudafix.env.target import TargetEnv, locate_target
from cudafix.linker.hostcache import last_consulted
from cudafix.model.args import FactArgs, TargetArgs
from cudafix.model.commands import TargetFlags, cudafix_line, venv_flags
from cudafix.model.errors import LockedError, UnsafeState
from cudafix.model.transaction import OnEvent, RunEvent, quiet
from cudafix.tx.pending import lock_is_held, unfinished

if TYPE_CHECKING:
    from cudafix.model.doctor import DoctorReport, Finding
    from cudafix.plan.facts import Facts


def locate(target: TargetArgs) -> TargetEnv:
    """The target environment, chosen the way uv chooses it."""
    return locate_target(target.python, target.venv, os.environ, Path.cwd())


def target_flags(args: TargetArgs, target: TargetEnv) -> TargetFlags:
    """How a printed next command names this target, so it runs as printed from anywhere:
    the interpreter if the user named one, else the environment's prefix."""
    if args.python is not None and target.python is not None:
        return ("--python", str(target.python))
    return venv_flags(target.prefix)


def check_pending(
    target: TargetEnv, *, mutating: bool, on_event: OnEvent = quiet, warn: bool = True
) -> tuple[str, ...]:
    """An unfinished transaction blocks changes (before any planning) and taints reads.

    Returns the unfinished transactions a read goes on over (none while another run holds
    the lock: that one is in progress, not killed); ``warn=False`` for a caller that
    reports them itself (doctor's finding)."""
    pending, hidden = unfinished(target.prefix)
    if hidden and mutating:
        raise UnsafeState(
            f"transaction {hidden[0]} in {target.prefix} is not readable by this user; "
            "nothing was changed",
            hint="run cudafix as a user who can write the environment",
        )
    if hidden:
        on_event(
            RunEvent("note", f"transaction {hidden[0]} is not readable by this user; not checked")
        )
    if not pending:
        return ()
    if lock_is_held(target.prefix):
        if not mutating:  # a run that changes it says so when it waits for the lock
            on_event(
                RunEvent(
                    "warning",
                    f"another cudafix run is changing {target.prefix}; this report "
                    "may show it half-done (run again when it has finished)",
                )
            )
        return ()
    what = f"unfinished transaction {pending[0]} in {target.prefix}"
    recover = cudafix_line("recover", target=venv_flags(target.prefix))
    if mutating:
        raise LockedError(
            f"{what}: the environment may be half-changed",
            hint=f"{recover}  (add --dry-run to look first)",
        )
    if warn:
        on_event(
            RunEvent("warning", f"{what}; the environment may be half-changed. Run `{recover}`.")
        )
    return tuple(pending)


def open_target(
    args: FactArgs, *, mutating: bool, on_event: OnEvent = quiet
) -> tuple[TargetEnv, Facts]:
    """Every flow's opening: locate the target, check for unfinished transactions (before
    any planning), and read its facts once."""
    target = locate(args.target)
    check_pending(target, mutating=mutating, on_event=on_event)
    return target, read_facts(args, target, on_event)


def read_facts(args: FactArgs, target: TargetEnv, on_event: OnEvent = quiet) -> Facts:
    """Everything planning and doctor read from the target, gathered once.

    The reader is imported here, when first needed: a warm ``doctor`` or a ``run`` judged
    against remembered findings never reads, and so never pays for its imports."""
    from cudafix.gather import gather

    on_event(RunEvent("progress", f"reading distributions and ELF objects in {target.prefix}"))
    facts = gather(target, dlopen_tables=args.dlopen_tables)
    on_event(
        RunEvent(
            "progress",
            f"  read {len(facts.inventory.distributions)} distributions, "
            f"{len(facts.elf.objects)} ELF objects",
        )
    )
    return facts


def facts_read_set(
    args: FactArgs,
    target: TargetEnv,
    tree: Sequence[str],
    search_dirs: Sequence[str] = (),
    *,
    host: Sequence[str],
) -> ReadSet:
    """What facts read from ``target`` (and what was resolved on them) depend on: the
    ``tree`` paths the walk listed and watched (``Facts.read_paths``), the interpreter, the
    ``host`` files the loader consulted (``Facts.host``, or what the last reading saved:
    :func:`~cudafix.linker.hostcache.last_consulted`), the extra dlopen tables;
    ``search_dirs``: system directories a resolution still to come will list
    (:func:`cudafix.env.memo.answers.read_set`)."""
    outside = [*host, *map(str, args.dlopen_tables), *search_dirs]
    if target.python is not None:
        outside.append(str(target.python))
    return read_set(tree, outside)


def remember_answer(
    args: FactArgs,
    answers: Mapping[str, Answer],
    *,
    since_ns: int,
    read: ReadSet | None = None,
    ctimes: bool = True,
    own_transaction: bool = False,
) -> bool:
    """Keep a read-only command's answers (by key) for its next identical run, stamped with
    what they were read from: ``read``, else what the last walk read (:func:`facts_read_set`);
    ``ctimes`` as :func:`cudafix.env.memo.answers.remember` takes it.

    Never while a transaction is unfinished or unreadable: such an answer carries a
    warning that must be given again, freshly, each time. ``own_transaction``: the answers
    were read inside ``run``'s own transaction, under cudafix's lock, which was taken only
    once no other was unfinished; they speak of no transaction.
    """
    target = locate(args.target)
    if not own_transaction and any(unfinished(target.prefix)):
        return False
    if read is None:
        state = StateDir(target.prefix)
        tree = TreeCache.load(state.tree_cache, dists=False).read_paths()
        read = facts_read_set(args, target, tree, host=last_consulted(state.host_cache))
    return remember(target.prefix, answers, read, since_ns=since_ns, ctimes=ctimes)


@dataclass(frozen=True)
class Diagnosis:
    """doctor's report, and what a later ``run`` judges its command against (the same
    reading, remembered beside the report: :func:`cudafix.flows.running.run_command`)."""

    report: DoctorReport
    before_run: Mapping[str, Answer]
    read: ReadSet
    """What the report was read from (:func:`facts_read_set`)."""


def doctor(args: FactArgs, on_event: OnEvent = quiet) -> Diagnosis:
    """Diagnose the target: what is broken, and the command to run next; an unfinished
    transaction is a finding (its fix is ``recover``), not a warning beside a report that
    may call the half-changed environment healthy."""
    from cudafix.plan.doctor import diagnose

    target = locate(args.target)
    pending = check_pending(target, mutating=False, on_event=on_event, warn=False)
    facts = replace(read_facts(args, target, on_event), pending=pending)
    on_event(RunEvent("progress", "  diagnosing"))
    report = diagnose(facts, target_flags(args.target, target))
    facts.host.save()
    read = facts_read_set(args, target, facts.read_paths, host=facts.host.consulted())
    return Diagnosis(report, before_run_memo(args, facts, report.findings), read)


def before_run_memo(args: FactArgs, facts: Facts, findings: Sequence[Finding]) -> dict[str, Answer]:
    """doctor's findings on ``facts`` under the key ``run`` looks for them by
    (:mod:`cudafix.env.memo.before`); none when they name more than :data:`KEPT_PATHS`
    paths, which ``run`` would take no faster than a reading."""
    if sum(len(f.paths) for f in findings) > KEPT_PATHS:
        return {}
    dist_infos = (d.dist_info for d in facts.inventory.distributions.values())
    return {before_run_key(args): before_run_answer(findings, dist_infos, search_dirs(facts))}


def search_dirs(facts: Facts) -> list[str]:
    """The system directories the loader lists (its defaults, ``LD_LIBRARY_PATH``): the
    judgement after the command lists them again, so they are part of what it reads."""
    return [*facts.search.default_dirs, *facts.search.ld_library_path]
