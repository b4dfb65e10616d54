"""Cleanup-script validation (with line numbers) and saved plans: stale ones are refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cudafix.model.errors import InputError
from cudafix.model.plan import PLAN_SCHEMA_VERSION
from cudafix.plan.script import load_script, locate, parse_script
from tests.support.cli import (
    EXAMPLES,
    assert_one_line_error,
    cudafix,
)


@pytest.mark.parametrize("example", sorted(EXAMPLES.glob("*.toml")), ids=lambda p: p.name)
def test_every_example_validates(example: Path) -> None:
    script = load_script(example, example.read_text(encoding="utf-8")).script
    assert script.steps and script.description


def test_examples_cover_the_seed_case_and_a_migration() -> None:
    assert {p.name for p in EXAMPLES.glob("*.toml")} >= {"seed-cleanup.toml", "cu12-to-cu13.toml"}


BAD = """\
[policy]
repair = true

[[steps]]
remove = ["nvidia-*-cu13"]

[[steps]]
install = ["torch>=2"]

[[steps]]
remove = ["x"]
reinstal = ["y"]

[[probes.expect]]
python = "print(1)"
"""


def test_every_problem_is_reported_with_its_line() -> None:
    with pytest.raises(InputError) as info:
        parse_script(BAD, Path("bad.toml"))
    lines = [info.value.message, *info.value.context]
    assert any(ln.startswith("bad.toml:8: steps[1].install") and "exact pin" in ln for ln in lines)
    assert any(ln.startswith("bad.toml:12: steps[2].reinstal") for ln in lines), lines
    assert any(ln.startswith("bad.toml:14: probes.expect[0].output") for ln in lines), lines


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ('[[steps]]\nremove = ["a"]\ninstall = ["b==1"]\n', 1),
        ("steps = 3\n", 1),
        ('[policy]\nbackend = "conda"\n[[steps]]\nremove = ["a"]\n', 2),
        ('[[steps]]\nremove = ["a"]\nrepair = "yes"\n', 3),
        ('[[steps]]\nremove = ["a"]\n[probes]\nauto = "yes"\n', 4),
        ('[[steps]]\nremove = ["a"]\n[probes]\nimports = "torch"\n', 4),
        ('[[steps]]\nremove = ["a"]\n[[probes.expect]]\noutput = "1"\n', 3),
    ],
)
def test_line_of_each_kind_of_error(text: str, line: int) -> None:
    with pytest.raises(InputError) as info:
        parse_script(text, Path("s.toml"))
    assert info.value.message.startswith(f"s.toml:{line}:"), info.value.message


def test_locate_finds_keys_in_the_nth_array_table() -> None:
    source = "a = 1\n[[steps]]\nx = 1\n[[steps]]\nx = 2\ny = 3\n[p]\ny = 4\n"
    assert locate(source, ("a",)) == 1
    assert locate(source, ("steps", 1, "y")) == 6
    assert locate(source, ("steps", 0, "y")) == 2
    assert locate(source, ("p", "y")) == 8
    assert locate(source, ("nowhere", 3)) is None


def test_toml_syntax_error_exits_2_with_line(tmp_path: Path) -> None:
    script = tmp_path / "broken.toml"
    script.write_text('[[steps]]\nremove = "a" "b"\n')
    done = cudafix("apply", script, "--venv", tmp_path, "--dry-run")
    assert_one_line_error(done, 2, f"{script}:2: not valid TOML")
    script.write_text('[[steps]]\nremove = ["a"\n')
    done = cudafix("apply", script, "--venv", tmp_path, "--dry-run")
    assert_one_line_error(done, 2, f"{script}:2: not valid TOML", "Unclosed array")


def test_malformed_plan_file_exits_2(tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"schema_version": PLAN_SCHEMA_VERSION, "target": {}}))
    done = cudafix("apply", plan, "--yes")
    assert_one_line_error(done, 2, "not a cudafix plan")


def test_a_plan_file_of_an_older_schema_is_refused_by_its_version(tmp_path: Path) -> None:
    """Version 1 held reasons as sentences: refused by version, before any field fails."""
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"schema_version": 1, "target": {}, "reasons": ["it breaks"]}))
    done = cudafix("apply", plan, "--yes")
    assert_one_line_error(done, 2, f"plan schema 1; this cudafix reads {PLAN_SCHEMA_VERSION}")
