"""doctor's findings remembered beside its answer: what ``cudafix run`` judges a command against.

``run`` must know what was wrong before its command, to roll back only what the command
broke. Reading the environment again costs as much as a cold ``doctor``; so ``doctor`` (or
a ``run`` that had to read) keeps its findings here as one more answer
(:mod:`.answers`), and the next ``run`` takes them while nothing they were read from
changed but ctimes: doctor's findings do not depend on them, and every run's snapshot
moves them (:func:`.answers.recall` with ``ctimes=False``).

The findings are validated only when a command changed something they must be compared
with: a ``run`` whose command changed nothing never imports the report's models.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cudafix.env.memo.answers import Answer, ReadSet, answer_key, recall, sorted_unique
from cudafix.model.args import FactArgs

if TYPE_CHECKING:
    from cudafix.model.doctor import Finding


KEPT_PATHS = 100_000
"""The most paths doctor's findings may name and be kept. Beyond it (a RECORD of millions of
rows whose files are gone) the memo would be as large as the RECORDs, and building it would
set the command's peak memory; ``run`` then reads the environment again instead."""


@dataclass(frozen=True)
class Before:
    """A remembered reading before a command: doctor's findings and what they rest on."""

    dumped: tuple[Any, ...]
    """doctor's findings, as JSON values (:meth:`findings` validates them)."""
    dist_infos: frozenset[str]
    """The distributions installed (their ``.dist-info`` EnvPaths)."""
    read: ReadSet
    """What the findings were read from, with the system directories the loader lists
    (the judgement after the command lists them again)."""

    def findings(self) -> tuple[Finding, ...]:
        """doctor's findings; ValueError when they are not findings this code reads (the
        memo is this code's own, so only a damaged file gives one)."""
        from pydantic import ValidationError

        from cudafix.model.doctor import Finding

        try:
            return tuple(Finding.model_validate(f) for f in self.dumped)
        except ValidationError as exc:
            raise ValueError(f"remembered findings unreadable: {exc.error_count()} errors") from exc


def before_run_key(args: FactArgs) -> str:
    """The key doctor's findings for the target ``args`` name are kept under."""
    return answer_key(("before-run", args), {})


def before_run_answer(
    findings: Sequence[Finding], dist_infos: Iterable[str], search_dirs: Sequence[str]
) -> Answer:
    """doctor's findings and the distributions they were found among, kept as an answer
    so that ``run`` need not read them again; ``search_dirs``: the system directories the
    loader lists (its defaults, ``LD_LIBRARY_PATH``)."""
    body = {
        "findings": [f.model_dump(mode="json") for f in findings],
        "dist_infos": sorted(dist_infos),
        "search_dirs": list(search_dirs),
    }
    return Answer(json.dumps(body, separators=(",", ":")), 0)


def recall_before(prefix: Path, args: FactArgs) -> Before | None:
    """The last reading doctor's findings were kept from, when nothing it was read from has
    changed since but ctimes (None: none kept, not this user's, stale or unreadable)."""
    found = recall(prefix, before_run_key(args), ctimes=False)
    if found is None:
        return None
    try:
        body = json.loads(found.answer.out)
        dumped = tuple(body["findings"])
        dist_infos = frozenset(str(d) for d in body["dist_infos"])
        search_dirs = [str(d) for d in body["search_dirs"]]
    except (ValueError, TypeError, KeyError):
        return None
    host = sorted_unique([*found.read.host, *search_dirs])  # listed again after the command
    return Before(dumped, dist_infos, ReadSet(found.read.env, host))
