"""Find and parse the scenario TOML files that sit beside this module in ``scenarios/``."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING

from pydantic import ValidationError

from cudafix.model.errors import InputError, UsageError
from scenarios.spec import Scenario

if TYPE_CHECKING:
    from importlib.abc import Traversable

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib  # type: ignore[import-not-found]

Generator = Callable[[Scenario, Mapping[str, int]], Scenario]
"""Fills a scenario's distributions and steps from its parameters."""


@dataclass(frozen=True)
class ScenarioInfo:
    """What ``list`` shows: a name and one line saying what the scenario reproduces."""

    name: str
    description: str


def _data() -> Traversable:
    return resources.files("scenarios")


def _generators() -> dict[str, Generator]:
    from scenarios.large import generate_large

    return {"large": generate_large}


def scenario_names() -> list[str]:
    """Every shipped scenario, sorted."""
    return sorted(p.name[:-5] for p in _data().iterdir() if p.name.endswith(".toml"))


def _read(name: str) -> Scenario:
    source = _data() / f"{name}.toml"
    if not source.is_file():
        known = ", ".join(scenario_names())
        raise UsageError(f"no scenario named {name!r}", hint=f"choose one of: {known}")
    try:
        return Scenario.model_validate(tomllib.loads(source.read_text(encoding="utf-8")))
    except (tomllib.TOMLDecodeError, ValidationError) as exc:
        raise InputError(f"scenario {name!r} is malformed: {exc}") from exc


def load_scenario(name: str, params: Mapping[str, int] | None = None) -> Scenario:
    """Parse scenario ``name``; a generated one is expanded with ``params`` over its defaults."""
    spec = _read(name)
    if spec.generator is None:
        if params:
            raise UsageError(f"scenario {name!r} takes no parameters")
        return spec
    unknown = set(params or {}) - set(spec.params)
    if unknown:
        raise UsageError(f"scenario {name!r} has no parameter {sorted(unknown)}")
    merged = {**spec.params, **(params or {})}
    generator = _generators().get(spec.generator)
    if generator is None:
        raise InputError(f"scenario {name!r} names unknown generator {spec.generator!r}")
    return generator(spec.model_copy(update={"params": merged}), merged)


def list_scenarios() -> list[ScenarioInfo]:
    """Every shipped scenario with its one-line description."""
    return [ScenarioInfo(n, _read(n).description) for n in scenario_names()]
