"""A failure as the user sees it under ``--json``: one JSON object on stdout, with its state.

The one-line message on stderr is :func:`cudafix.cli.render.render_error`'s; here is what
a fleet controller reads beside it, written once per failure however many layers see it.
"""

from __future__ import annotations

from typing import Any

from cudafix.cli.output import echo_json
from cudafix.cli.wording import error_context
from cudafix.model.errors import (
    CudafixError,
    LockedError,
    PlanRefused,
    RollbackIncomplete,
    StalePlan,
    TransactionFailed,
)

_STATES: tuple[tuple[type[CudafixError], str], ...] = (
    (StalePlan, "stale"),
    (PlanRefused, "refused"),
    (LockedError, "locked"),
    (RollbackIncomplete, "rollback-incomplete"),
    (TransactionFailed, "rolled-back"),
)


def error_json(err: CudafixError) -> dict[str, Any]:
    """What a fleet controller aggregates from a node that did not commit."""
    return {
        "state": next((s for kind, s in _STATES if isinstance(err, kind)), "error"),
        "exit_code": int(err.exit_code),
        "error": err.message,
        "context": error_context(err),
        "hint": err.hint,
    }


def emit_json_error(err: CudafixError) -> None:
    """One JSON object on stdout for a failure, beside the one-line message on stderr."""
    if not err.json_emitted:
        echo_json(error_json(err))
    err.json_emitted = True
