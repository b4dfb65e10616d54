"""Selecting distributions by glob, and cudafix's own dependencies, with no venv."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cudafix.gather import own_dependencies
from cudafix.model.errors import UsageError
from cudafix.model.names import DistName
from cudafix.plan.select import select

INSTALLED = [
    DistName(n) for n in ("nvidia-cudnn-cu12", "nvidia-cudnn-cu13", "nvidia-nccl-cu13", "torch")
]


def test_globs_match_normalised_names_and_exclude_subtracts() -> None:
    assert select(INSTALLED, ["NVIDIA_*_cu13"]) == ("nvidia-cudnn-cu13", "nvidia-nccl-cu13")
    assert select(INSTALLED, ["nvidia-*-cu13"], ["*nccl*"]) == ("nvidia-cudnn-cu13",)


def test_a_selector_matching_nothing_lists_near_misses() -> None:
    with pytest.raises(UsageError) as err:
        select(INSTALLED, ["nvidia-cudnn-cu14"])
    assert "nvidia-cudnn-cu13" in " ".join(err.value.context)


def test_self_dependencies_are_known_only_inside_the_target(tmp_path: Path) -> None:
    inside = own_dependencies(Path(sys.prefix))
    assert {"cudafix", "click", "pydantic", "packaging"} <= inside
    assert own_dependencies(tmp_path) == frozenset()
