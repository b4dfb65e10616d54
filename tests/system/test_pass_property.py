"""A PASS is a promise, checked as a property over every scenario.

For every distribution of each scenario's ready venv and each mode (plain, ``--repair``,
``--keep-shared``), the dry run's verdict is read; every plan that says PASS is applied
through the CLI, and then:

* it committed (exit 0, ``state: committed``);
* every remaining distribution's RECORD is complete on disk (bytecode aside: Python
  writes it again);
* doctor reports nothing it did not report before (findings compared by subject and
  paths, as ``run --`` compares them);
* ``cudafix undo last`` commits and leaves the tree byte-identical to the state before.

One venv per scenario serves every plan: the byte-identical undo is asserted before the
next plan runs, so each plan starts from the pristine ready state.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from cudafix.cli.doctor_words import WordedFinding
from cudafix.env.inventory import is_bytecode
from cudafix.model.doctor import new_problems
from scenarios.catalog import scenario_names
from scenarios.fingerprint import diff_fingerprints, fingerprint
from tests.support.cli import as_json, cudafix, dlopen_table
from tests.support.venvs import ScenarioFactory, site_dir

pytestmark = pytest.mark.slow

MODES: tuple[tuple[str, ...], ...] = ((), ("--repair",), ("--keep-shared",))
SCENARIOS = [n for n in sorted(scenario_names()) if n != "large"]  # large: for benchmarks


def _distributions(site: Path) -> list[str]:
    """Every distribution with a RECORD (the ones cudafix plans for), by METADATA Name."""
    names = []
    for dist_info in sorted(site.glob("*.dist-info")):
        meta = dist_info / "METADATA"
        if (dist_info / "RECORD").is_file() and meta.is_file():
            name = next(
                ln.split(":", 1)[1].strip()
                for ln in meta.read_text().splitlines()
                if ln.startswith("Name:")
            )
            names.append(name)
    return names


def _incomplete_records(prefix: Path, site: Path) -> list[str]:
    """RECORD rows inside the environment whose file is gone (bytecode aside)."""
    missing = []
    for record in sorted(site.glob("*.dist-info/RECORD")):
        for row in csv.reader(io.StringIO(record.read_text())):
            if not row or not row[0] or is_bytecode(row[0]) or row[0].endswith("/"):
                continue
            path = (site / row[0]).resolve()
            if path.is_relative_to(prefix.resolve()) and not path.exists():
                missing.append(f"{record.parent.name}: {row[0]}")
    return missing


def _tree(prefix: Path) -> dict[str, tuple[object, ...]]:
    """The fingerprint, but for derived bytecode (uv deletes ``__pycache__`` beside every
    ``.py`` it removes; Python writes it again) and uv's empty ``.lock`` at the root: uv
    creates it the first time it locks the venv (cudafix takes it for every transaction,
    as uv does) and never removes it, since deleting a lock others may wait on is unsafe."""
    tree = {p: v for p, v in fingerprint(prefix).items() if not is_bytecode(p + "/")}
    lock = tree.get(".lock")
    if lock is not None and lock[0] == "file" and lock[2] == 0:
        del tree[".lock"]
    return tree


def _findings(prefix: Path, table: list[str]) -> list[WordedFinding]:
    report = as_json(cudafix("doctor", "--venv", prefix, "--json", *table))
    return [WordedFinding.model_validate(f) for f in report["findings"]]


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_plan_that_passes_commits_keeps_records_and_undoes(
    scenario: ScenarioFactory, tmp_path: Path, name: str
) -> None:
    built = scenario(name)
    prefix, site = built.venv, site_dir(built.venv)
    table = dlopen_table(built, tmp_path / "dlopen.toml")
    sources = ["--offline", "--find-links", str(built.wheelhouse), *table]
    pristine = _tree(prefix)
    before = _findings(prefix, table)
    # undo refuses to bring back an error unless told: a scenario whose pristine state holds
    # one (leftover's stray wheel misses a requirement) is undone with --accept, to it exactly
    accept = ["--accept"] if any(f.severity == "error" for f in before) else []
    passed = []
    for dist in _distributions(site):
        for mode in MODES:
            dry = cudafix("remove", dist, "--venv", prefix, "--dry-run", "--json", *mode, *sources)
            plan = as_json(dry)
            assert dry.returncode == (0 if plan["verdict"] == "pass" else 3), dry.stderr
            if plan["verdict"] != "pass":
                continue
            said = (dist, mode)
            done = cudafix("remove", dist, "--venv", prefix, "--yes", "--json", *mode, *sources)
            assert done.returncode == 0, (said, done.stderr)
            assert as_json(done)["state"] == "committed", said
            assert _incomplete_records(prefix, site) == [], said
            assert new_problems(before, _findings(prefix, table)) == [], said
            undone = cudafix("undo", "last", "--venv", prefix, "--yes", *accept, *table)
            assert undone.returncode == 0, (said, as_json(done)["transaction"], undone.stderr)
            assert diff_fingerprints(pristine, _tree(prefix)) == [], said
            passed.append(said)
    # every scenario but the refusal-only ones has a plan that passes; none is vacuous
    assert passed or name in {"dlopen", "requires"}, name
