"""The shipped JSON Schemas: current, versioned, closed, and each shape's JSON fits its schema.

The outputs of real commands are validated in tests/system/test_json_outputs.py; here the
shapes are built from values made by hand, every state of each, and the schema files are
checked against :mod:`cudafix.cli.schemas` and docs/json.md's list of changes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from cudafix.cli.errors import error_json
from cudafix.cli.schemas import DIALECT, ERROR_STATES, ID_PREFIX, SCHEMAS, shipped, text
from cudafix.cli.shapes import (
    declined_json,
    detail_json,
    history_json,
    nothing_to_do_json,
    result_json,
    run_json,
    unchanged_json,
    undo_json,
    undone_json,
)
from cudafix.model.doctor import DOCTOR_SCHEMA_VERSION
from cudafix.model.errors import (
    CudafixError,
    LockedError,
    PlanRefused,
    RollbackIncomplete,
    StalePlan,
    TransactionFailed,
    UsageError,
)
from cudafix.model.names import DistName
from cudafix.model.plan import PLAN_SCHEMA_VERSION, Options, Plan
from cudafix.model.transaction import (
    GuardedRun,
    HistoryEntry,
    TransactionDetail,
    TransactionResult,
    UndoPreview,
)
from cudafix.plan.planner import Request, build_plan
from cudafix.process import Completed
from tests.support.cli import assert_one_line_error, cudafix
from tests.support.facts import Dist, Lib, facts
from tests.support.schemacheck import check_keywords, errors, schema_files, validate

ROOT = Path(__file__).resolve().parents[2]
CUDNN = "nvidia/cudnn/lib/libcudnn.so.9"
TORCH_LIB = "torch/lib/libtorch_cuda.so"


def _schema(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(shipped(name))
    return loaded


def _refused_plan() -> Plan:
    """A refused plan with lost needs, reasons and alternatives (no venv)."""
    torch = Dist(
        "torch",
        "2.9.0",
        {"torch/__init__.py": "t", TORCH_LIB: "tl"},
        requires=("nvidia-cudnn-cu12==9.10.2.21",),
        top_level=("torch",),
    )
    cu12 = Dist("nvidia-cudnn-cu12", "9.10.2.21", {"nvidia/__init__.py": "", CUDNN: "c12"})
    cu13 = Dist("nvidia-cudnn-cu13", "9.13.0.50", {"nvidia/__init__.py": "", CUDNN: "c13"})
    libs = {
        TORCH_LIB: Lib(
            "libtorch_cuda.so", ("libcudnn.so.9",), rpath=("$ORIGIN/../../nvidia/cudnn/lib",)
        ),
        CUDNN: Lib("libcudnn.so.9"),
    }
    request = Request((DistName("nvidia-cudnn-cu13"),), ("nvidia-cudnn-cu13",), Options())
    plan = build_plan(facts([torch, cu12, cu13], libs), request)
    assert plan.verdict == "refused" and plan.reasons and plan.alternatives
    return plan


ENTRY = HistoryEntry(
    txid="20250101T000000Z-abcdef",
    time=1.5,
    kind="apply",
    command=("cudafix", "repair"),
    verdict="pass",
    state="committed",
    removed=("a",),
    reinstalled=(),
    kept=(),
    error=None,
    snapshot=True,
    changed=("+a 1",),
    undoes="20240101T000000Z-000000",
    name="repair",
    short="abcdef",
)
RESULT = TransactionResult(
    txid=ENTRY.txid,
    prefix=Path("/v"),
    removed=("a",),
    reinstalled=("b",),
    kept=(),
    probes=("import b",),
    snapshot_entries=3,
    installed=("c==1",),
)
RUN = GuardedRun(
    txid=ENTRY.txid,
    prefix=Path("/v"),
    completed=Completed(("uv", "pip", "install", "six"), 0, "", ""),
    findings=("[unresolved] x",),
    probes=("import six",),
    in_place=(),
    changed=("+six 1.17.0",),
)


def test_the_shipped_files_are_the_generated_schemas() -> None:
    assert set(schema_files()) == set(SCHEMAS), "python -m cudafix.cli.schemas rewrites them"
    for name in SCHEMAS:
        assert shipped(name) == text(name), f"{name}: stale; run python -m cudafix.cli.schemas"


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_each_schema_has_dialect_stable_id_and_version(name: str) -> None:
    schema = _schema(name)
    assert schema["$schema"] == DIALECT
    assert schema["$id"] == f"{ID_PREFIX}{name}"
    assert isinstance(schema["version"], int) and schema["version"] >= 1
    check_keywords(schema)  # the tests' validator checks every keyword it uses


def test_versions_follow_the_outputs_own_and_every_version_is_in_the_changelog() -> None:
    assert _schema("plan")["version"] == PLAN_SCHEMA_VERSION
    assert _schema("doctor")["version"] == DOCTOR_SCHEMA_VERSION
    changes = (ROOT / "docs" / "json.md").read_text(encoding="utf-8").split("## Changes", 1)[1]
    for name, (version, _, _) in SCHEMAS.items():
        assert re.search(rf"^- `{name}` {version}: ", changes, re.M), (name, version)
        assert f"`{name}.schema.json`" in (ROOT / "docs" / "json.md").read_text()


def test_a_plan_validates_and_a_field_too_many_or_too_few_does_not() -> None:
    plan = _refused_plan().model_dump(mode="json")
    schema = _schema("plan")
    validate(plan, schema)
    assert errors({**plan, "extra": 1}, schema) == ["$: field 'extra' is not in the schema"]
    assert errors({k: v for k, v in plan.items() if k != "lost"}, schema) == [
        "$: missing required field 'lost'"
    ]
    lost = {**plan["lost"][0], "surprise": True}
    assert errors({**plan, "lost": [lost]}, schema) == [
        "$.lost[0]: field 'surprise' is not in the schema"
    ]


def test_every_outcome_of_a_command_that_plans_fits_result() -> None:
    schema = _schema("result")
    plan = _refused_plan()
    committed = _printed(result_json(plan, RESULT))
    for value in (committed, nothing_to_do_json(Path("/v")), declined_json()):
        validate(value, schema)
    assert errors({**committed, "changed": []}, schema)
    assert errors({k: v for k, v in committed.items() if k != "installed"}, schema)


@pytest.mark.parametrize(
    "err",
    [
        CudafixError("boom"),
        UsageError("bad", context=["usage: x"], hint="`x --help`"),
        StalePlan("stale", context=["a changed"]),
        PlanRefused("refused"),
        LockedError("locked"),
        RollbackIncomplete("left", context=["p"]),
        TransactionFailed("failed"),
    ],
)
def test_every_failure_fits_error(err: CudafixError) -> None:
    value = error_json(err)
    validate(value, _schema("error"))
    assert value["state"] in ERROR_STATES


def _printed(value: object) -> Any:
    """``value`` as ``--json`` prints it (:func:`cudafix.cli.output.echo_json`), read back."""
    return json.loads(json.dumps(value, default=list))


def test_run_undo_history_show_fit_theirs() -> None:
    validate(_printed(run_json(RUN)), _schema("run"))
    validate(_printed(unchanged_json(RUN, 3)), _schema("run"))
    assert errors(_printed({**run_json(RUN), "transaction": None}), _schema("run"))
    validate(_printed(undone_json(RESULT)), _schema("undo"))
    validate(declined_json(), _schema("undo"))
    for preview in (
        UndoPreview(entry=ENTRY, paths=4, conflicts=("x",)),
        UndoPreview(entry=ENTRY, paths=0, conflicts=(), readable=False),
    ):
        validate(_printed(undo_json(preview)), _schema("undo-preview"))
    history = _printed(history_json([ENTRY, ENTRY]))
    validate(history, _schema("history"))
    assert errors([{**history[0], "new": 1}], _schema("history"))
    detail = TransactionDetail(entry=ENTRY, journal=({"step": "begin"},), paths=("a",))
    validate(_printed(detail_json(detail)), _schema("show"))


def test_the_validator_refuses_what_json_schema_refuses() -> None:
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer"},
            "s": {"type": ["string", "null"]},
            "e": {"enum": [0, 3]},
            "k": {"oneOf": [{"const": 1}, {"type": "integer"}]},
        },
        "required": ["n"],
        "additionalProperties": False,
    }
    assert not errors({"n": 1, "s": None, "e": 3}, schema)
    assert errors({"n": True}, schema)  # a boolean is not an integer
    assert errors({"n": 1, "e": False}, schema)  # nor 0
    assert errors({"n": 1.5}, schema)
    assert errors({"n": 1, "k": 1}, schema)  # oneOf: both match
    assert not errors({"n": 1, "k": 2}, schema)
    with pytest.raises(ValueError, match="pattern"):
        errors("x", {"pattern": "^x$"})


def test_cudafix_schema_lists_and_prints_the_shipped_files() -> None:
    listed = cudafix("schema")
    assert listed.returncode == 0, listed.stderr
    rows = dict(line.split("\t") for line in listed.stdout.splitlines())
    assert rows == {name: str(version) for name, (version, _, _) in SCHEMAS.items()}
    printed = cudafix("schema", "undo-preview")
    assert printed.returncode == 0 and printed.stdout == shipped("undo-preview")
    assert_one_line_error(cudafix("schema", "nope"), 2, "nope", "undo-preview")
