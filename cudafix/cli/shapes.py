"""The JSON objects ``--json`` prints: what a fleet controller aggregates from each node.

One function per shape, so a field is named once; :func:`cudafix.cli.output.echo_json`
writes them. A plan and a doctor report are pydantic models with their own JSON; the
outcomes around them are shaped here. Each shape is described in :mod:`cudafix.cli.schemas`
(shipped as ``cudafix/data/schemas/*.schema.json``): a field added or removed here is added
or removed there, with its schema's version raised.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cudafix.model.errors import ExitCode

if TYPE_CHECKING:
    from cudafix.model.plan import Plan
    from cudafix.model.transaction import (
        GuardedRun,
        HistoryEntry,
        TransactionDetail,
        TransactionResult,
        UndoPreview,
    )


def result_json(plan: Plan, result: TransactionResult) -> dict[str, Any]:
    """What a fleet controller aggregates from a node that committed."""
    return {
        "state": "committed",
        "exit_code": int(ExitCode.OK),
        **result_fields(result),
        "plan": plan.model_dump(mode="json"),
    }


def result_fields(result: TransactionResult) -> dict[str, Any]:
    """A committed transaction's outcome, as JSON fields."""
    return {
        "target": str(result.prefix),
        "transaction": result.txid,
        "removed": list(result.removed),
        "reinstalled": list(result.reinstalled),
        "installed": list(result.installed),
        "probes": list(result.probes),
    }


def undone_json(result: TransactionResult) -> dict[str, Any]:
    """``undo --json``: the undo, committed."""
    return {"state": "committed", "exit_code": 0, **result_fields(result)}


def nothing_to_do_json(prefix: Path) -> dict[str, Any]:
    """``repair --json`` where there is nothing to repair."""
    return {"state": "nothing-to-do", "exit_code": 0, "target": str(prefix)}


def declined_json() -> dict[str, Any]:
    """A plan the user was asked about and declined."""
    return {"state": "declined", "exit_code": int(ExitCode.FAILURE)}


def undo_json(preview: UndoPreview, accept: bool = False) -> dict[str, Any]:
    """``undo --dry-run --json``: what would be undone, and whether it would be refused (as
    the undo itself decides)."""
    from cudafix.cli.render import undo_break_lines

    refused = bool(preview.conflicts) or (preview.blocked and not accept)
    return {
        "state": "refused" if refused else "pass" if preview.readable else "not-checked",
        "exit_code": int(ExitCode.REFUSED if refused else ExitCode.OK),
        "transaction": preview.entry.txid,
        "entry": preview.entry.__dict__,
        "paths": preview.paths,
        "conflicts": list(preview.conflicts),
        "reasons": undo_break_lines(preview),
        "readable": preview.readable,
    }


def history_json(entries: Sequence[HistoryEntry]) -> list[dict[str, Any]]:
    """``history --json``: every transaction, newest first, every field."""
    return [e.__dict__ for e in entries]


def detail_json(detail: TransactionDetail) -> dict[str, Any]:
    """``show --json``: one transaction's entry, journal and snapshot paths."""
    return {"entry": detail.entry.__dict__, "journal": detail.journal, "paths": detail.paths}


def run_json(result: GuardedRun) -> dict[str, Any]:
    """``run --json``: the committed run, as a fleet controller aggregates it (a command
    that changed nothing is :func:`unchanged_json`'s)."""
    return {
        "state": "committed",
        "exit_code": int(ExitCode.OK),
        "target": str(result.prefix),
        "transaction": result.txid,
        "changed": list(result.changed),
        "argv": list(result.completed.argv),
        "returncode": result.completed.returncode,
        "accepted": list(result.findings),
        "in_place": list(result.in_place),
        "probes": list(result.probes),
    }


def unchanged_json(result: GuardedRun, code: int) -> dict[str, Any]:
    """``run --json`` of a command that changed nothing: no transaction; ``code`` is the
    exit status, the command's own when it failed."""
    return {
        "state": "unchanged",
        "exit_code": code,
        "target": str(result.prefix),
        "transaction": None,
        "changed": [],
        "argv": list(result.completed.argv),
        "returncode": result.completed.returncode,
    }
