"""The shipped scenarios parse, validate and refuse bad input, without building one."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from cudafix.model.errors import UsageError
from scenarios import build_spec, list_scenarios, load_scenario
from scenarios.catalog import scenario_names
from scenarios.spec import Lib, Scenario, Step

SMALL_SPECS = [n for n in scenario_names() if n != "large"]


def test_every_scenario_is_listed_and_parses() -> None:
    infos = {i.name: i.description for i in list_scenarios()}
    assert {"incident", "incident-mirror", "shadowing", "clean", "dlopen", "requires"} <= set(infos)
    assert {"hostile", "large"} <= set(infos)
    assert all(infos.values())


@pytest.mark.parametrize("name", SMALL_SPECS)
def test_dlopen_table_covers_every_constructor(name: str) -> None:
    """A library that dlopen()s parts must declare them in [dlopen] for the resolver."""
    spec = load_scenario(name)
    for dist in spec.dist:
        for lib in dist.lib:
            if lib.dlopen:
                assert set(lib.dlopen) <= set(spec.dlopen[lib.effective_soname or ""])


def _plain_files(spec: Scenario) -> int:
    return sum(len(d.files) for d in spec.dist)


def test_large_size_parameter_changes_the_venv() -> None:
    small = load_scenario("large", {"files": 1000})
    bigger = load_scenario("large", {"files": 5000})
    assert _plain_files(bigger) - _plain_files(small) == 4000


def test_build_refuses_a_non_empty_dest(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("user data")
    with pytest.raises(UsageError):
        build_spec(load_scenario("clean"), tmp_path)
    assert (tmp_path / "keep.txt").read_text() == "user data"


def test_unknown_scenario_and_stray_params_are_usage_errors() -> None:
    with pytest.raises(UsageError):
        load_scenario("no-such-scenario")
    with pytest.raises(UsageError):
        load_scenario("incident", {"files": 3})
    with pytest.raises(UsageError):
        load_scenario("large", {"nope": 3})
    with pytest.raises(ValueError, match="stage"):
        load_scenario("clean").steps_for("half-broken")


@pytest.mark.parametrize(
    "bad",
    [
        lambda: Lib(path="a/libx.so", rpath=("$ORIGIN",), runpath=("$ORIGIN",)),
        lambda: Lib(path="../libx.so"),
        lambda: Step(action="install", packages=("torch",)),
        lambda: Step(action="append-record", dist="x"),
        lambda: Scenario.model_validate(
            {"name": "x", "description": "y", "expect": {"ready": {"typo": 1}}}
        ),
    ],
)
def test_schema_rejects_bad_specs(bad: object) -> None:
    with pytest.raises(ValidationError):
        bad()  # type: ignore[operator]
