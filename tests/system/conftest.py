"""The system tier's fixtures (helpers live in tests/support; see tests/README.md).

``venv`` is the transaction tests' real venv: ``(prefix, wheelhouse)`` holding pa and pb,
which both install ``shared/lib.so`` with different bytes (``tests.support.tx.shared_pair``).

``scenario`` builds a real venv from a shipped scenario (``scenarios/``) into
the test's tmp_path. Wheelhouses are cached by content under ``$CUDAFIX_SCENARIO_CACHE``
(default ``~/.cache/cudafix/scenarios``), so after the first run a build takes well under
a second.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from scenarios import BuiltScenario, build_scenario
from tests.support.tx import shared_pair
from tests.support.venvs import ScenarioFactory


@pytest.fixture
def scenario(tmp_path: Path) -> ScenarioFactory:
    """Factory: ``scenario(name, stage="ready", params=None) -> BuiltScenario``."""
    count = 0

    def build(
        name: str, stage: str = "ready", params: Mapping[str, int] | None = None
    ) -> BuiltScenario:
        nonlocal count
        count += 1
        dest = tmp_path / f"{name}-{stage}-{count}" / "venv"
        return build_scenario(name, dest, stage=stage, params=params)

    return build


@pytest.fixture
def venv(tmp_path: Path) -> tuple[Path, Path]:
    """A real venv holding pa and pb (both own ``shared/lib.so``) and their wheelhouse."""
    return shared_pair(tmp_path)
