"""The flows a user runs (doctor, remove, repair, apply, and the transaction log), typed.

Every command goes target -> facts -> plan -> (apply) in the same way here, so caches are
saved, pending transactions checked and probes built identically whichever command asked.
The CLI parses options into these values, calls one flow and renders what it returns; it
holds no logic of its own. Nothing here prints: events go to an ``on_event`` callback.

This module is the CLI's one lazy-import boundary: the argument values are defined here
(cheap, so ``--help`` imports nothing heavy), and the flows (:mod:`cudafix.flows`, which
imports the planner and the transaction) load on the first flow called. The CLI imports
nothing else lazily: what it needs of the plan (pydantic) comes through here too.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cudafix.model.names import BackendName
from cudafix.model.transaction import (
    DEFAULT_KEEP,
    DEFAULT_LOCK_TIMEOUT,
    DEFAULT_PROBE_TIMEOUT,
    OnEvent,
    Progress,
)

if TYPE_CHECKING:
    from cudafix.env.answers import Answer, answer_key
    from cudafix.flows import (
        check_pending,
        doctor,
        execute,
        gc,
        history,
        locate,
        open_target,
        plan_install,
        plan_remove,
        plan_repair,
        plan_saved,
        plan_script,
        read_facts,
        read_plan,
        recover,
        remember_answer,
        run_command,
        show,
        target_flags,
        undo,
        undo_preview,
    )
    from cudafix.plan.admit import refuse_unless_allowed
    from cudafix.warm import recall_answer

_FLOWS = (
    "locate",
    "target_flags",
    "check_pending",
    "open_target",
    "read_facts",
    "doctor",
    "plan_remove",
    "plan_repair",
    "plan_install",
    "plan_script",
    "plan_saved",
    "read_plan",
    "execute",
    "run_command",
    "recover",
    "history",
    "show",
    "undo",
    "undo_preview",
    "gc",
    "remember_answer",
)
_LAZY = {
    **dict.fromkeys(_FLOWS, "cudafix.flows"),
    "refuse_unless_allowed": "cudafix.plan.admit",
    "recall_answer": "cudafix.warm",
    "answer_key": "cudafix.env.answers",
    "Answer": "cudafix.env.answers",
}
"""Each name the boundary serves -> the module it comes from, imported on first use."""

__all__ = [
    "DEFAULT_KEEP",
    "DEFAULT_LOCK_TIMEOUT",
    "Answer",
    "BackendName",
    "FactArgs",
    "InstallArgs",
    "LiveArgs",
    "OnEvent",
    "Progress",
    "RemoveArgs",
    "RunArgs",
    "TargetArgs",
    "answer_key",
    "check_pending",
    "doctor",
    "execute",
    "gc",
    "history",
    "locate",
    "open_target",
    "plan_install",
    "plan_remove",
    "plan_repair",
    "plan_saved",
    "plan_script",
    "read_facts",
    "read_plan",
    "recall_answer",
    "recover",
    "refuse_unless_allowed",
    "remember_answer",
    "run_command",
    "show",
    "target_flags",
    "undo",
    "undo_preview",
]


def __getattr__(name: str) -> Any:
    """The boundary: a flow (or the plan's refusal check) is imported when first asked for."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class TargetArgs:
    """Which environment: ``--venv`` or ``--python``, else ``$VIRTUAL_ENV``, else ``./.venv``."""

    venv: str | None = None
    python: str | None = None


@dataclass(frozen=True)
class FactArgs:
    """What shapes the facts read from the target."""

    target: TargetArgs = TargetArgs()
    dlopen_tables: tuple[Path, ...] = ()


@dataclass(frozen=True)
class LiveArgs:
    """How ``run`` runs its command: how long it may take, where its output goes."""

    timeout: float | None = None
    echo: tuple[int, int] = (1, 2)
    """File descriptors the command's stdout and stderr are copied to as they come."""


@dataclass(frozen=True)
class RunArgs:
    """How an approved plan is applied: probes, waiting for the lock, overriding a refusal."""

    auto_probes: bool = True
    probe_code: tuple[str, ...] = ()
    probe_commands: tuple[str, ...] = ()
    probe_timeout: float = DEFAULT_PROBE_TIMEOUT
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT
    force: bool = False
    command: tuple[str, ...] = ()
    """The command line, recorded in the journal for ``history``."""


@dataclass(frozen=True)
class RemoveArgs:
    """What ``cudafix remove`` was asked to remove, and how far it may go."""

    selectors: tuple[str, ...]
    exclude: tuple[str, ...] = ()
    repair: bool = False
    keep_shared: bool = False
    allow_broken_requirements: bool = False


@dataclass(frozen=True)
class InstallArgs:
    """What ``cudafix install`` was asked to install (requirement specifiers, as for uv)."""

    specs: tuple[str, ...]
    allow_broken_requirements: bool = False
