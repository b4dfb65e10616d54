"""The JSON Schemas of every ``--json`` output, as shipped in ``cudafix/data/schemas/``.

A plan and a doctor report are pydantic models, and a transaction's history entry a typed
value: their schemas are generated from them. The objects :mod:`cudafix.cli.shapes` and
:mod:`cudafix.cli.errors` build are described here by hand. Every object is closed
(``additionalProperties: false``) and lists every field it always has as required, so an
output that gains or loses a field no longer validates. ``python -m cudafix.cli.schemas``
rewrites the shipped files; a test checks they are these. Each schema has a ``version``,
raised when a field is added, removed or changes meaning (docs/json.md lists the changes).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from cudafix.cli.doctor_words import WordedReport
from cudafix.model.doctor import DOCTOR_SCHEMA_VERSION
from cudafix.model.plan import PLAN_SCHEMA_VERSION, Plan
from cudafix.model.transaction import HistoryEntry

Schema = dict[str, Any]

DIALECT = "https://json-schema.org/draft/2020-12/schema"
ID_PREFIX = "urn:cudafix:schema:"
"""``$id`` of schema NAME: ``urn:cudafix:schema:NAME``, stable across versions."""

ERROR_STATES = ("stale", "refused", "locked", "rollback-incomplete", "rolled-back", "error")
"""``state`` of a failure (:func:`cudafix.cli.errors.error_json`)."""

_STR: Schema = {"type": "string"}
_STRS: Schema = {"type": "array", "items": _STR}


def _closed(schema: Any) -> Any:
    """Every object with properties: all of them required, no others allowed (a model's
    JSON always has every field)."""
    if isinstance(schema, dict):
        out = {k: _closed(v) for k, v in schema.items()}
        if "properties" in out and out.get("type") == "object":
            out["required"] = list(out["properties"])
            out.setdefault("additionalProperties", False)
        return out
    if isinstance(schema, list):
        return [_closed(v) for v in schema]
    return schema


def _generated(schema: Schema) -> tuple[Schema, dict[str, Schema]]:
    """A generated schema, closed, split into its root and its ``$defs``."""
    closed = dict(_closed(schema))
    return closed, closed.pop("$defs", {})


def _object(description: str, properties: dict[str, Schema]) -> Schema:
    """A closed object whose properties are all required."""
    return {
        "type": "object",
        "description": description,
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def _field(description: str, schema: Schema) -> Schema:
    return {"description": description, **schema}


def _ref(name: str) -> Schema:
    return {"$ref": f"#/$defs/{name}"}


def _plan() -> tuple[Schema, dict[str, Schema]]:
    return _generated(Plan.model_json_schema(mode="serialization"))


def _entry() -> tuple[Schema, dict[str, Schema]]:
    return _generated(TypeAdapter(HistoryEntry).json_schema(mode="serialization"))


_TARGET = _field("The environment's prefix (absolute path).", _STR)
_EXIT_OK = _field("The exit status of cudafix: 0.", {"const": 0})


def _committed(description: str, *extra: tuple[str, Schema]) -> Schema:
    """A committed transaction (:func:`cudafix.cli.shapes.result_fields`)."""
    return _object(
        description,
        {
            "state": {"const": "committed"},
            "exit_code": _EXIT_OK,
            "target": _TARGET,
            "transaction": _field("The transaction's id (for show and undo).", _STR),
            "removed": _field("Distributions uninstalled.", _STRS),
            "reinstalled": _field("Distributions reinstalled at their versions.", _STRS),
            "installed": _field("``name==version`` pins installed.", _STRS),
            "probes": _field("The probes that passed.", _STRS),
            **dict(extra),
        },
    )


_DECLINED = _object(
    "The user was asked on a terminal and answered no: nothing changed.",
    {"state": {"const": "declined"}, "exit_code": {"const": 1}},
)


def _error() -> tuple[Schema, dict[str, Schema]]:
    return (
        _object(
            "A failure: nothing was committed (exit code: docs/cli.md).",
            {
                "state": _field(
                    "stale (saved plan or undo), refused, locked, rollback-incomplete, "
                    "rolled-back (a transaction failed and was rolled back), error (any other)",
                    {"enum": list(ERROR_STATES)},
                ),
                "exit_code": _field("cudafix's exit status.", {"type": "integer"}),
                "error": _field("The one-line message, as on stderr.", _STR),
                "context": _field("The lines printed under it (a refusal's reasons).", _STRS),
                "hint": _field("What to do next, or null.", {"type": ["string", "null"]}),
            },
        ),
        {},
    )


def _doctor() -> tuple[Schema, dict[str, Schema]]:
    return _generated(WordedReport.model_json_schema(mode="serialization"))


def _result() -> tuple[Schema, dict[str, Schema]]:
    plan, defs = _plan()
    committed = _committed(
        "The plan was applied and committed.",
        ("plan", _field("The plan that was applied (plan.schema.json).", _ref("Plan"))),
    )
    nothing = _object(
        "``repair``: nothing to repair; nothing changed.",
        {"state": {"const": "nothing-to-do"}, "exit_code": _EXIT_OK, "target": _TARGET},
    )
    return {"oneOf": [committed, nothing, _DECLINED]}, {**defs, "Plan": plan}


def _run() -> tuple[Schema, dict[str, Schema]]:
    ran = {
        "target": _TARGET,
        "changed": _field("What it changed, as history says it (``+six 1.17.0``).", _STRS),
        "argv": _field("The command that ran.", _STRS),
        "returncode": _field("The command's own return code.", {"type": "integer"}),
    }
    committed = _object(
        "The command changed the environment and the transaction committed.",
        {
            "state": {"const": "committed"},
            "exit_code": _EXIT_OK,
            "transaction": _field("The transaction's id.", _STR),
            **ran,
            "accepted": _field("Problems it introduced, accepted with --accept.", _STRS),
            "in_place": _field("Files it rewrote in place (no rollback could restore).", _STRS),
            "probes": _field("The probes that passed.", _STRS),
        },
    )
    unchanged = _object(
        "The command changed nothing: no transaction was kept.",
        {
            "state": {"const": "unchanged"},
            "exit_code": _field(
                "0, or the command's own exit status when it failed.", {"type": "integer"}
            ),
            "transaction": {"type": "null"},
            **ran,
        },
    )
    return {"oneOf": [committed, unchanged]}, {}


def _undo_preview() -> tuple[Schema, dict[str, Schema]]:
    entry, defs = _entry()
    return (
        _object(
            "What ``undo`` would do, decided as the undo decides.",
            {
                "state": _field(
                    "pass, refused (as the undo would be), or not-checked (the snapshot is "
                    "not readable by this user)",
                    {"enum": ["pass", "refused", "not-checked"]},
                ),
                "exit_code": _field("0, or 3 when refused.", {"enum": [0, 3]}),
                "transaction": _field("The id of the transaction to undo.", _STR),
                "entry": _field("That transaction (history.schema.json).", _ref("HistoryEntry")),
                "paths": _field("Paths the undo restores.", {"type": "integer"}),
                "conflicts": _field("Paths changed since its commit (refused).", _STRS),
                "reasons": _field(
                    "Why it is refused unless accepted: needs it would leave unfound, errors "
                    "doctor finds in the state it restores.",
                    _STRS,
                ),
                "readable": _field("This user can read the snapshot.", {"type": "boolean"}),
            },
        ),
        {**defs, "HistoryEntry": entry},
    )


def _undo() -> tuple[Schema, dict[str, Schema]]:
    return {"oneOf": [_committed("The undo, committed as a new transaction."), _DECLINED]}, {}


def _history() -> tuple[Schema, dict[str, Schema]]:
    entry, defs = _entry()
    return (
        {"type": "array", "items": _ref("HistoryEntry")},
        {**defs, "HistoryEntry": entry},
    )


def _show() -> tuple[Schema, dict[str, Schema]]:
    entry, defs = _entry()
    return (
        _object(
            "One transaction.",
            {
                "entry": _field("Its history entry.", _ref("HistoryEntry")),
                "journal": _field(
                    "Every journal record, as written (each record's fields are internal).",
                    {"type": "array", "items": {"type": "object"}},
                ),
                "paths": _field("Every path its snapshot holds.", _STRS),
            },
        ),
        {**defs, "HistoryEntry": entry},
    )


SCHEMAS: dict[str, tuple[int, str, Callable[[], tuple[Schema, dict[str, Schema]]]]] = {
    "error": (1, "Any failure under --json, of any command.", _error),
    "doctor": (DOCTOR_SCHEMA_VERSION, "doctor --json: the report.", _doctor),
    "plan": (
        PLAN_SCHEMA_VERSION,
        "A plan: remove, repair, install and apply with --dry-run --json, and --out files.",
        _plan,
    ),
    "result": (
        1,
        "remove, repair, install and apply with --json (not --dry-run): the outcome.",
        _result,
    ),
    "run": (1, "run --json: the outcome.", _run),
    "undo-preview": (1, "undo --dry-run --json: what the undo would do.", _undo_preview),
    "undo": (1, "undo --json: the outcome.", _undo),
    "history": (1, "history --json: every transaction, newest first.", _history),
    "show": (1, "show --json: one transaction, its journal and paths.", _show),
}
"""name -> (version, what it describes, its builder)."""


def schema(name: str) -> Schema:
    """The schema ``name`` (a key of :data:`SCHEMAS`), as shipped."""
    version, title, build = SCHEMAS[name]
    root, defs = build()
    root = {k: v for k, v in root.items() if k not in ("title", "description")}
    out: Schema = {
        "$schema": DIALECT,
        "$id": ID_PREFIX + name,
        "version": version,
        "description": title,
        **root,
    }
    if defs:
        out["$defs"] = dict(sorted(defs.items()))
    return out


def text(name: str) -> str:
    """The schema ``name`` as its file holds it."""
    return json.dumps(schema(name), indent=2, sort_keys=False) + "\n"


def shipped(name: str) -> str:
    """The shipped file of schema ``name``."""
    path = resources.files("cudafix").joinpath(f"data/schemas/{name}.schema.json")
    return path.read_text(encoding="utf-8")


def write(directory: Path) -> None:
    """Write every schema into ``directory`` (the package's ``data/schemas``)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in SCHEMAS:
        (directory / f"{name}.schema.json").write_text(text(name), encoding="utf-8")


if __name__ == "__main__":
    write(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parents[1] / "data/schemas")
