"""The two tiers, by directory (helpers live in tests/support; see tests/README.md).

``tests/unit/`` is the fast tier: no venv, no uv, no CLI process over a venv. ``tests/system/``
is the slow tier. Every system test is marked ``slow`` here, so ``-m "not slow"`` selects
exactly ``tests/unit/``; a ``slow`` mark inside ``tests/unit/`` is refused, since it would
put a slow test in the fast tier's directory.
"""

from __future__ import annotations

from pathlib import Path

import pytest

UNIT = Path(__file__).parent / "unit"
SYSTEM = Path(__file__).parent / "system"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Runs before ``-m`` deselects, so the mark added here counts."""
    for item in items:
        path = Path(item.path)
        if path.is_relative_to(SYSTEM):
            item.add_marker(pytest.mark.slow)
        elif path.is_relative_to(UNIT) and item.get_closest_marker("slow") is not None:
            raise pytest.UsageError(f"{item.nodeid}: a slow test belongs in tests/system/")
