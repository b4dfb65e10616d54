"""Reproducible broken GPU environments, built from real wheels with real uv.

Each scenario (``scenarios/*.toml``, documented in ``scenarios/README.md``)
names synthetic distributions with the real names (``nvidia-cudnn-cu12``), whose shared
libraries gcc really compiles, so the system loader, ``uv pip check`` and cudafix all see
the same venv a user would.
"""

from __future__ import annotations

from scenarios.build import BuiltScenario, build_scenario, build_spec
from scenarios.catalog import ScenarioInfo, list_scenarios, load_scenario
from scenarios.spec import Scenario

__all__ = [
    "BuiltScenario",
    "Scenario",
    "ScenarioInfo",
    "build_scenario",
    "build_spec",
    "list_scenarios",
    "load_scenario",
]
