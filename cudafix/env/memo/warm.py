"""The warm path of read-only commands: the previous answer, when nothing it read changed.

Kept apart from the flows on purpose: finding the target and stamping what the last
answer was read from must not import the planner, pydantic or packaging, or a warm
``doctor`` would spend more on imports than on the answer (:mod:`.answers`).
"""

from __future__ import annotations

import os
from pathlib import Path

from cudafix.env.memo.answers import Answer, recall
from cudafix.env.target import locate_target
from cudafix.model.args import TargetArgs
from cudafix.model.errors import CudafixError


def recall_answer(target: TargetArgs, key: str) -> tuple[Path, Answer] | None:
    """The target's prefix and the answer remembered for ``key``; None when there is none,
    or when the target cannot even be found (the command then says why, as it always does)."""
    try:
        env = locate_target(target.python, target.venv, os.environ, Path.cwd())
    except (CudafixError, OSError):
        return None
    found = recall(env.prefix, key)
    return None if found is None else (env.prefix, found.answer)
