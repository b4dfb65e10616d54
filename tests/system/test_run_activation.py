"""``cudafix run -- CMD`` acts on the environment it names, and says what happened.

The command runs with the environment activated as ``uv run`` runs one; a ``pip`` that is
another environment's is named before it runs; a command that changed nothing commits
nothing; a failing command's own exit status is run's; a rollback touches what changed and
says how far it got; a write in place beside a hard link made or removed is found; and a
far-future transaction id does not reorder the log.

Each test drives the real CLI on a real venv (uv, real wheels) and a real command.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from cudafix.tx.history import history
from scenarios.fingerprint import diff_fingerprints, fingerprint
from tests.support.cli import as_json, cudafix
from tests.support.venvs import site_dir, venv_with
from tests.support.wheels import make_wheel

pytestmark = pytest.mark.slow
"""Runs the CLI on real venvs: left out of ``make test-fast``."""


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "pa", "1.0", {"pa_mod.py": b"A = 1\n"})
    return venv_with(tmp_path / "venv", wheels, "pa==1.0")


def _other_pip(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """A ``pip`` on ``PATH`` that is not the venv's (as a system or cudafix's own pip is):
    it "installs" by writing a file where it lives."""
    bindir = tmp_path / "elsewhere" / "bin"
    bindir.mkdir(parents=True)
    marker = tmp_path / "elsewhere" / "installed-six"
    pip = bindir / "pip"
    pip.write_text(f"#!/bin/sh\necho installed >> {marker}\n")
    pip.chmod(0o755)
    return {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}, marker


def test_a_pip_outside_the_venv_is_named_and_changes_nothing(venv: Path, tmp_path: Path) -> None:
    """A ``uv venv`` has no ``bin/pip``: the ``pip`` found is another environment's. run
    says so before it runs, and commits nothing, since nothing in the venv changed."""
    assert not (venv / "bin" / "pip").exists()
    env, marker = _other_pip(tmp_path)
    done = cudafix("run", "--venv", venv, "--", "pip", "install", "six", env=env)
    assert done.returncode == 0, done.stderr
    assert marker.is_file()  # it ran, elsewhere
    [warning] = [ln for ln in done.stderr.splitlines() if ln.startswith("warning: `pip`")]
    assert str(tmp_path / "elsewhere" / "bin" / "pip") in warning
    assert f"{venv}/bin/python -m pip" in warning and f"uv pip --python {venv}" in warning
    assert "Committed" not in done.stdout and "Nothing changed" in done.stdout
    assert history(venv) == []  # no transaction, nothing to undo
    undo = cudafix("undo", "last", "--venv", venv, "--yes")
    assert undo.returncode == 2, undo.stderr
    inside = cudafix("run", "--venv", venv, "--no-probe", "--", "python", "-c", "pass")
    assert "warning" not in inside.stderr  # the venv's own python: nothing to say


def test_the_command_runs_with_the_venv_activated(venv: Path, tmp_path: Path) -> None:
    """``VIRTUAL_ENV`` is the venv, its ``bin/`` first on ``PATH``, ``PYTHONHOME`` unset
    (it would point the venv's interpreter at another standard library)."""
    seen = tmp_path / "seen"
    script = (
        f'printf "%s|%s|%s" "$VIRTUAL_ENV" "${{PYTHONHOME-unset}}" "$(command -v python)" > {seen};'
        'touch "$VIRTUAL_ENV/made"'
    )
    home = sys.base_prefix
    done = cudafix("run", "--venv", venv, "--no-probe", "--", "sh", "-c", script,
                   env={"PYTHONHOME": home})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert seen.read_text() == f"{venv}|unset|{venv}/bin/python"
    assert "Committed" in done.stdout


def test_a_command_that_changed_nothing_keeps_no_transaction(venv: Path) -> None:
    """Bytecode an import writes is no change; the command's exit status is run's."""
    idle = cudafix("run", "--venv", venv, "--", "python", "-c", "import pa_mod")
    assert idle.returncode == 0, idle.stderr
    assert "Nothing changed" in idle.stdout and "Committed" not in idle.stdout
    failed = cudafix("run", "--venv", venv, "--", "sh", "-c", "echo said-this >&2; exit 5")
    assert failed.returncode == 5, failed.stderr
    assert "exit status 5" in failed.stdout and "rolled back" not in failed.stderr
    result = as_json(cudafix("run", "--venv", venv, "--json", "--", "sh", "-c", "exit 6"))
    assert result["state"] == "unchanged" and result["exit_code"] == 6
    assert result["transaction"] is None and result["returncode"] == 6
    assert history(venv) == []
    assert not any((venv / ".cudafix" / "transactions").iterdir())


def test_a_failing_command_that_changed_something_returns_its_status(venv: Path) -> None:
    """Rolled back, then run exits as the command did (as ``uv run`` does); killed by a
    signal, 128 + N."""
    before = fingerprint(venv)
    done = cudafix("run", "--venv", venv, "--", "sh", "-c", 'touch "$VIRTUAL_ENV/x"; exit 7')
    assert done.returncode == 7, done.stderr
    assert "exit status 7" in done.stderr and "rolled back" in done.stderr
    assert not diff_fingerprints(before, fingerprint(venv))
    killed = 'touch "$VIRTUAL_ENV/x"; kill -USR1 $$'
    done = cudafix("run", "--json", "--venv", venv, "--", "sh", "-c", killed)
    assert done.returncode == 128 + 10, done.stderr
    assert json.loads(done.stdout)["exit_code"] == 138
    assert not diff_fingerprints(before, fingerprint(venv))


def test_a_rollback_restores_only_what_changed_and_says_how_far_it_got(venv: Path) -> None:
    before = fingerprint(venv)
    paths = len(list(venv.rglob("*")))
    make = 'mkdir "$VIRTUAL_ENV/many"; for i in $(seq 1200); do : > "$VIRTUAL_ENV/many/f$i"; done'
    script = f'{make}; echo more >> "$VIRTUAL_ENV/pyvenv.cfg"; exit 3'
    done = cudafix("run", "-v", "--venv", venv, "--", "sh", "-c", script)
    assert done.returncode == 3, done.stderr
    assert "rolling back: 500 of 2 changed paths" not in done.stderr
    assert "rolling back: 2 of 2 changed paths" in done.stderr  # the new tree, pyvenv.cfg
    said = [ln for ln in done.stderr.splitlines() if "restored the" in ln]
    assert said and f"restored the 2 changed of {paths}" in said[0], done.stderr
    assert not diff_fingerprints(before, fingerprint(venv))
    # the paths below one that differs are restored too; progress comes every 500
    sp = site_dir(venv)
    rm = f'for i in $(seq 600); do : > "{sp}/m$i.py"; done; exit 3'
    done = cudafix("run", "-v", "--venv", venv, "--", "sh", "-c", rm)
    assert done.returncode == 3, done.stderr
    assert "rolling back: 500 of 600 changed paths" in done.stderr
    assert "rolling back: 600 of 600 changed paths" in done.stderr
    assert not diff_fingerprints(before, fingerprint(venv))


@pytest.mark.parametrize("link", ["added", "removed"])
def test_a_write_in_place_beside_a_hard_link_made_or_removed_is_found(
    venv: Path, tmp_path: Path, link: str
) -> None:
    """Size and mtime put back, and the link count changed (as ``uv cache clean`` unlinks
    uv's cached copy): the moved ctime is still a write, named, never called restored."""
    target = site_dir(venv) / "pa_mod.py"
    other = tmp_path / "cached-copy"
    if link == "removed":
        os.link(target, other)
    writer = (
        "import os, sys\n"
        "p, other, link = sys.argv[1:]\n"
        "st = os.stat(p)\n"
        "with open(p, 'r+b') as f:\n    f.write(b'B')\n"
        "os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))\n"
        "os.link(p, other) if link == 'added' else os.unlink(other)\n"
        "raise SystemExit(1)\n"
    )
    argv = [venv / "bin" / "python", "-c", writer, target, other, link]
    done = cudafix("run", "--venv", venv, "--", *argv)
    assert done.returncode == 1, done.stderr
    assert "rewritten in place" in done.stderr and "pa_mod.py" in done.stderr
    assert target.read_bytes() == b"B = 1\n"  # what the command left, and cudafix says so


def test_a_far_future_transaction_id_does_not_reorder_the_log(venv: Path) -> None:
    """An id past year 9999 (a bad clock, a planted directory) and a name cudafix did not
    make: later runs still sort last, ``undo last`` picks the newest, recover finishes."""
    transactions = venv / ".cudafix" / "transactions"
    transactions.mkdir(parents=True, exist_ok=True)
    (transactions / "99991231T235959-999999999-abcdef").mkdir()
    (transactions / "zzz-not-an-id").mkdir()
    ids = []
    for n in range(2):
        done = cudafix("run", "--venv", venv, "--no-probe", "--", "touch", venv / f"made{n}")
        assert done.returncode == 0, done.stderr
        ids.append(done.stdout.split("Committed transaction ")[1].split(":")[0])
    listed = [e.txid for e in history(venv)]
    assert listed[-2:] == ids, listed
    preview = as_json(cudafix("undo", "last", "--venv", venv, "--dry-run", "--json"))
    assert ids[1] in json.dumps(preview)
    undone = cudafix("undo", "last", "--venv", venv, "--yes", "--no-probe")
    assert undone.returncode == 0, undone.stderr
    assert not (venv / "made1").exists() and (venv / "made0").exists()
    assert cudafix("recover", "--venv", venv).returncode == 0
