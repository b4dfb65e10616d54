"""The flows a user runs (doctor, remove, repair, apply, and the transaction log), typed.

Every command goes target -> facts -> plan -> (apply) in the same way (:mod:`cudafix.flows`),
so caches are saved, pending transactions checked and probes built identically whichever
command asked. The CLI parses options into the argument values (:mod:`cudafix.model.args`,
served here too), calls one flow and renders what it returns; it holds no logic of its
own. Nothing here prints: events go to an ``on_event`` callback.

This module is the CLI's one lazy-import boundary: the argument values are cheap, so
``--help`` imports nothing heavy, and each flow's module (which imports the planner and
the transaction) loads on the first flow called from it. The CLI imports nothing else
lazily: what it needs of the plan (pydantic) comes through here too.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from cudafix.model.args import (
    FactArgs,
    InstallArgs,
    LiveArgs,
    RemoveArgs,
    RunArgs,
    TargetArgs,
)
from cudafix.model.names import BackendName
from cudafix.model.transaction import (
    DEFAULT_KEEP,
    DEFAULT_LOCK_TIMEOUT,
    OnEvent,
    RunEvent,
)

if TYPE_CHECKING:
    from cudafix.env.memo.answers import MAX_KEPT_CHARS, Answer, ReadSet, answer_key
    from cudafix.env.memo.stats import one_reading
    from cudafix.env.memo.warm import recall_answer
    from cudafix.flows.applying import execute
    from cudafix.flows.dryrun import kept_plan, plan_shown, remove_plan_key
    from cudafix.flows.log import gc, history, recover, show, undo, undo_preview
    from cudafix.flows.planning import (
        Planned,
        plan_install,
        plan_remove,
        plan_repair,
        plan_saved,
        plan_script,
        read_plan,
    )
    from cudafix.flows.running import run_command
    from cudafix.flows.target import (
        check_pending,
        doctor,
        locate,
        open_target,
        read_facts,
        remember_answer,
        target_flags,
    )
    from cudafix.plan.admit import refuse_unless_allowed

_FLOWS = {
    "cudafix.flows.target": (
        "locate",
        "target_flags",
        "check_pending",
        "open_target",
        "read_facts",
        "doctor",
        "remember_answer",
    ),
    "cudafix.flows.planning": (
        "Planned",
        "plan_remove",
        "plan_repair",
        "plan_install",
        "plan_script",
        "plan_saved",
        "read_plan",
    ),
    "cudafix.flows.applying": ("execute",),
    "cudafix.flows.dryrun": ("remove_plan_key", "kept_plan", "plan_shown"),
    "cudafix.flows.running": ("run_command",),
    "cudafix.flows.log": ("recover", "history", "show", "undo", "undo_preview", "gc"),
}
_LAZY = {
    **{name: module for module, names in _FLOWS.items() for name in names},
    "refuse_unless_allowed": "cudafix.plan.admit",
    "recall_answer": "cudafix.env.memo.warm",
    "answer_key": "cudafix.env.memo.answers",
    "Answer": "cudafix.env.memo.answers",
    "MAX_KEPT_CHARS": "cudafix.env.memo.answers",
    "ReadSet": "cudafix.env.memo.answers",
    "one_reading": "cudafix.env.memo.stats",
}
"""Each name the boundary serves -> the module it comes from, imported on first use."""

__all__ = [
    "DEFAULT_KEEP",
    "DEFAULT_LOCK_TIMEOUT",
    "MAX_KEPT_CHARS",
    "Answer",
    "BackendName",
    "FactArgs",
    "InstallArgs",
    "LiveArgs",
    "OnEvent",
    "Planned",
    "ReadSet",
    "RemoveArgs",
    "RunArgs",
    "RunEvent",
    "TargetArgs",
    "answer_key",
    "check_pending",
    "doctor",
    "execute",
    "gc",
    "history",
    "kept_plan",
    "locate",
    "one_reading",
    "open_target",
    "plan_install",
    "plan_remove",
    "plan_repair",
    "plan_saved",
    "plan_script",
    "plan_shown",
    "read_facts",
    "read_plan",
    "recall_answer",
    "recover",
    "refuse_unless_allowed",
    "remember_answer",
    "remove_plan_key",
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
