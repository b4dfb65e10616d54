"""A removal applied as its dry run showed it, while nothing that plan was read from changed.

The usual way to remove something is ``remove X --dry-run``, read, then ``remove X --yes``.
Planning the second time reads the same facts and makes the same plan, at the cost of the
whole reading (half a second on a torch venv). So a dry run's plan is remembered beside
its answer (:mod:`cudafix.env.memo.answers`), stamped with what its planning read, and the
removal that follows applies it while that stamp holds. The transaction checks the plan's
preconditions under the lock, as it checks every plan's. This module imports neither the
reader nor the planner: a plan given again must not pay for them.
"""

from __future__ import annotations

from pydantic import ValidationError

from cudafix.env.memo.answers import Answer, answer_key, recall
from cudafix.flows.target import check_pending, locate
from cudafix.model.args import FactArgs, RemoveArgs
from cudafix.model.names import BackendName
from cudafix.model.plan import Plan
from cudafix.model.sources import Sources
from cudafix.model.transaction import OnEvent, RunEvent, quiet


def remove_plan_key(
    args: FactArgs, request: RemoveArgs, sources: Sources, backend: BackendName
) -> str:
    """The key a removal's plan is remembered by: what the plan depends on besides the
    environment's files (which the stamp covers). The request, where wheels come from,
    the backend, and what every answer's key holds (cudafix's code, the interpreter, the
    working directory, the environment variables it reads)."""
    return answer_key(("remove-plan", args, request, sources, backend), {})


def kept_plan(key: str, plan: Plan) -> dict[str, Answer]:
    """``plan`` as an answer to remember under ``key`` beside its dry run's answer.

    Not one for pip: whether some pip can act on the target is looked up on ``PATH``
    while planning, outside what the stamp covers."""
    if plan.options.backend != "uv":
        return {}
    return {key: Answer(plan.model_dump_json(), 0)}


def plan_shown(args: FactArgs, key: str, on_event: OnEvent = quiet) -> Plan | None:
    """The plan a dry run of the same removal showed, while nothing it was read from has
    changed; None when there is none (then the removal plans as usual).

    An unfinished transaction refuses here, as planning would."""
    target = locate(args.target)
    found = recall(target.prefix, key)
    if found is None:
        return None
    try:
        plan = Plan.model_validate_json(found.answer.out)
    except ValidationError:
        return None
    check_pending(target, mutating=True, on_event=on_event)
    on_event(
        RunEvent(
            "progress",
            f"Environment: {target.prefix}: nothing its dry run read has changed since, so "
            "the plan it showed is applied (its preconditions are checked under the lock)",
        )
    )
    return plan
