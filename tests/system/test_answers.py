"""A warm doctor or dry run of an unchanged environment gives its last answer again, and
every change to what that answer was read from makes the next run compute it afresh.

Each check is made through the CLI, and each recomputed answer is compared with a cold
one (no ``.cudafix/cache/``): the memo may only ever save time, never change an answer.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from cudafix.env.memo.answers import (
    MAX_KEPT_CHARS,
    Answer,
    ReadSet,
    Recalled,
    recall,
    remember,
    settled_stamp,
    stamp,
)
from cudafix.env.memo.stats import RACY_NS
from cudafix.env.statedir import StateDir
from scenarios import BuiltScenario
from scenarios.fingerprint import diff_fingerprints, fingerprint
from tests.support.cli import cudafix, dlopen_table
from tests.support.venvs import install, new_venv, settle, site_dir
from tests.support.wheels import make_wheel

pytestmark = pytest.mark.slow
"""Builds real venvs and runs the CLI: left out of ``make test-fast``."""

GIVEN_AGAIN = "its answer is given again"
COMPUTED = "diagnosing"


def _first_runs(built: BuiltScenario, *extra: str) -> None:
    """A new environment was just built: the answer of the first run past the racy window
    is the first one remembered."""
    _run(built, *extra)
    settle()


def _doctor(built: BuiltScenario, *extra: str, env: dict[str, str] | None = None) -> Answer:
    proc = cudafix("doctor", "-v", "--venv", built.venv, *extra, env=env)
    assert "Traceback" not in proc.stderr, proc.stderr
    return Answer(proc.stdout, proc.returncode)


def _run(
    built: BuiltScenario, *extra: str, env: dict[str, str] | None = None
) -> tuple[Answer, str]:
    proc = cudafix("doctor", "-v", "--venv", built.venv, *extra, env=env)
    return Answer(proc.stdout, proc.returncode), proc.stderr


def _cold(built: BuiltScenario, *extra: str, env: dict[str, str] | None = None) -> Answer:
    shutil.rmtree(StateDir(built.venv).cache, ignore_errors=True)
    return _doctor(built, *extra, env=env)


def test_an_unchanged_environment_is_answered_again(
    scenario: Callable[..., BuiltScenario], tmp_path: Path
) -> None:
    built = scenario("incident")
    table = dlopen_table(built, tmp_path / "dlopen.toml")
    _first_runs(built, *table)
    first, said = _run(built, *table)
    assert COMPUTED in said and GIVEN_AGAIN not in said
    again, said = _run(built, *table)
    assert GIVEN_AGAIN in said and COMPUTED not in said
    assert again == first

    dry = ["remove", "nvidia-cudnn-cu13", "--dry-run", "--no-fetch", "-v", "--venv", built.venv]
    planned = cudafix(*dry, *table)
    assert GIVEN_AGAIN not in planned.stderr
    replanned = cudafix(*dry, *table)
    assert GIVEN_AGAIN in replanned.stderr and "simulating" not in replanned.stderr
    assert (replanned.returncode, replanned.stdout) == (planned.returncode, planned.stdout)
    assert planned.returncode == 3  # refused: the answer kept is the refusal, exit code too

    # questions that alternate: each is given again (the dry run read host paths doctor did
    # not; the doctor answer stays, stamped with both)
    back, said = _run(built, *table)
    assert GIVEN_AGAIN in said and back == first
    replanned = cudafix(*dry, *table)
    assert GIVEN_AGAIN in replanned.stderr and replanned.stdout == planned.stdout


def test_doctor_asked_another_way_is_answered_from_the_same_reading(
    scenario: Callable[..., BuiltScenario],
) -> None:
    """``doctor``, then ``doctor -q``, ``-v`` and ``--json``: each answered from what the
    first one read (nothing computed, nothing remembered anew), each the same as a cold run
    asked that way."""
    built = scenario("incident")
    _first_runs(built)
    plain = cudafix("doctor", "--venv", built.venv)
    assert plain.returncode == 1  # the incident is broken: the exit code is kept too
    answers = StateDir(built.venv).answers
    written = answers.stat().st_mtime_ns
    warm = {how: cudafix("doctor", how, "--venv", built.venv) for how in ("-q", "-v", "--json")}
    assert GIVEN_AGAIN in warm["-v"].stderr and COMPUTED not in warm["-v"].stderr
    assert answers.stat().st_mtime_ns == written  # none was computed, so none was kept
    for how, proc in warm.items():
        shutil.rmtree(StateDir(built.venv).cache, ignore_errors=True)
        cold = cudafix("doctor", how, "--venv", built.venv)
        assert (proc.returncode, proc.stdout) == (cold.returncode, cold.stdout), how


def test_an_answer_too_long_to_keep_is_computed_again_and_burdens_no_other(
    tmp_path: Path,
) -> None:
    """A wheel whose 30k files are gone: ``doctor --json`` names each (past
    ``MAX_KEPT_CHARS``), so it is neither rendered unasked nor kept, and the file of answers
    every warm command reads stays small; ``doctor -q`` is still answered from memory, and
    ``--json`` names every missing file, as a cold run does."""
    files = {f"many/d{i % 50}/module_with_a_long_name_{i}.py": b"" for i in range(30_000)}
    make_wheel(tmp_path / "wheels", "many", "1.0", files)
    venv = new_venv(tmp_path / "venv")
    install(venv, tmp_path / "wheels", "many")
    shutil.rmtree(site_dir(venv) / "many")
    settle()
    assert cudafix("doctor", "--venv", venv).returncode == 1
    answers = StateDir(venv).answers
    assert answers.stat().st_size < MAX_KEPT_CHARS // 4  # the JSON was not kept
    written = answers.stat().st_mtime_ns
    assert cudafix("doctor", "-q", "--venv", venv).returncode == 1
    assert answers.stat().st_mtime_ns == written  # given again: nothing computed, nor kept
    asked = cudafix("doctor", "--json", "--venv", venv)
    named = [p for f in json.loads(asked.stdout)["findings"] for p in f["paths"]]
    assert len(named) == len(files) and len(asked.stdout) > MAX_KEPT_CHARS
    assert answers.stat().st_size < MAX_KEPT_CHARS // 4  # nor when asked for
    shutil.rmtree(StateDir(venv).cache)
    cold = cudafix("doctor", "--json", "--venv", venv)
    assert (asked.returncode, asked.stdout) == (cold.returncode, cold.stdout)


def _delete_an_owned_file(built: BuiltScenario) -> None:
    (site_dir(built.venv) / "nvidia" / "cudnn" / "include" / "cudnn_version.h").unlink()


def _rewrite_a_library_in_place(built: BuiltScenario) -> None:
    """Same size, same mtime: only ctime says it was written."""
    lib = site_dir(built.venv) / "nvidia" / "cudnn" / "lib" / "libcudnn_ops.so.9"
    before = lib.stat()
    data = lib.read_bytes()
    with lib.open("r+b") as fh:
        fh.write(data)
    os.utime(lib, ns=(before.st_atime_ns, before.st_mtime_ns))


def _edit_metadata_in_place(built: BuiltScenario) -> None:
    (meta,) = site_dir(built.venv).glob("torch-*.dist-info/METADATA")
    text = meta.read_text()
    with meta.open("r+") as fh:
        fh.write(
            text.replace("Requires-Dist: nvidia-cudnn-cu12", "Requires-Dist: nvidia-cudnn-cu11")
        )


def _uninstall_with_uv(built: BuiltScenario) -> None:
    subprocess.run(built.break_command(), check=True, capture_output=True)


CHANGES: dict[str, Callable[[BuiltScenario], None]] = {
    "owned file deleted": _delete_an_owned_file,
    "library rewritten in place": _rewrite_a_library_in_place,
    "METADATA edited in place": _edit_metadata_in_place,
    "uv uninstall": _uninstall_with_uv,
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_change_to_the_environment_is_answered_afresh(
    scenario: Callable[..., BuiltScenario], change: str
) -> None:
    built = scenario("incident")
    _first_runs(built)
    _run(built)
    _, said = _run(built)
    assert GIVEN_AGAIN in said
    CHANGES[change](built)
    fresh, said = _run(built)
    assert COMPUTED in said and GIVEN_AGAIN not in said
    assert fresh == _cold(built)


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_dry_run_is_planned_afresh_after_each_change(
    scenario: Callable[..., BuiltScenario], change: str
) -> None:
    """A dry run is remembered by what its own planning read (``Planned.read``): each
    change to it makes the next dry run plan again, as a cold one would."""
    built = scenario("incident")
    _first_runs(built)
    dry = ["remove", "nvidia-cudnn-cu13", "--dry-run", "--no-fetch", "-v", "--venv", built.venv]
    cudafix(*dry)
    again = cudafix(*dry)
    assert GIVEN_AGAIN in again.stderr
    CHANGES[change](built)
    fresh = cudafix(*dry)
    assert GIVEN_AGAIN not in fresh.stderr  # uv's uninstall took the very distribution
    shutil.rmtree(StateDir(built.venv).cache)
    cold = cudafix(*dry)
    assert (fresh.returncode, fresh.stdout) == (cold.returncode, cold.stdout)


PLAN_SHOWN = "the plan it showed is applied"


def test_a_removal_applies_the_plan_its_dry_run_showed(
    scenario: Callable[..., BuiltScenario],
) -> None:
    """``remove X --yes`` right after ``remove X --dry-run`` applies the plan the dry run
    showed instead of planning again, and changes exactly what a removal that planned
    changes; once something its planning read has changed, it plans again."""
    shown, cold, changed = scenario("clean"), scenario("clean"), scenario("clean")
    remove = ["remove", "nvidia-nvtx-cu12", "--no-fetch", "-v", "--venv"]
    for built in (shown, cold, changed):
        _first_runs(built)
    for built in (shown, changed):
        assert cudafix(*remove, built.venv, "--dry-run").returncode == 0
    lib = site_dir(changed.venv) / "nvidia" / "cudnn" / "lib" / "libcudnn.so.9"
    os.utime(lib, ns=(lib.stat().st_atime_ns, lib.stat().st_mtime_ns + 10**9))

    before = {b.venv: fingerprint(b.venv) for b in (shown, cold)}
    applied = cudafix(*remove, shown.venv, "--yes")
    assert applied.returncode == 0, applied.stderr
    assert PLAN_SHOWN in applied.stderr and "simulating" not in applied.stderr
    planned = cudafix(*remove, cold.venv, "--yes")
    assert planned.returncode == 0, planned.stderr
    assert PLAN_SHOWN not in planned.stderr and "simulating" in planned.stderr
    said = [p.stdout.replace(str(b.venv), "VENV") for p, b in ((applied, shown), (planned, cold))]
    assert said[0].splitlines()[:-2] == said[1].splitlines()[:-2]  # all but the txid
    done = {v: diff_fingerprints(b, fingerprint(v)) for v, b in before.items()}
    assert done[shown.venv] == done[cold.venv] != []

    replanned = cudafix(*remove, changed.venv, "--yes")
    assert replanned.returncode == 0, replanned.stderr
    assert PLAN_SHOWN not in replanned.stderr and "simulating" in replanned.stderr


def test_a_plan_for_pip_is_made_again(scenario: Callable[..., BuiltScenario]) -> None:
    """Whether some pip can act on the target is looked up on ``PATH`` while planning, which
    no stamp covers: a ``--backend pip`` removal plans again after its dry run."""
    built = scenario("clean")
    remove = ["remove", "nvidia-nvtx-cu12", "--backend", "pip", "--no-fetch", "-v", "--venv"]
    _first_runs(built)
    assert cudafix(*remove, built.venv, "--dry-run").returncode == 0
    applied = cudafix(*remove, built.venv, "--yes", "--no-probe")
    assert applied.returncode == 0, applied.stderr
    assert PLAN_SHOWN not in applied.stderr and "simulating" in applied.stderr


def test_what_lies_outside_the_environment_is_part_of_the_question(
    scenario: Callable[..., BuiltScenario], tmp_path: Path
) -> None:
    """The loader's search path, the output style and an extra dlopen table's contents."""
    built = scenario("incident")
    table_args = dlopen_table(built, tmp_path / "dlopen.toml")
    _first_runs(built, *table_args)
    _run(built, *table_args)
    _, said = _run(built, *table_args)
    assert GIVEN_AGAIN in said
    as_json, _ = _run(built, *table_args, "--json")
    assert as_json.out.startswith("{")  # another style: not the text answer remembered

    table = tmp_path / "dlopen.toml"
    table.write_text(table.read_text() + '"libother.so.1" = ["libcudnn.so.9"]\n')
    answered, said = _run(built, *table_args)
    assert COMPUTED in said
    assert answered == _cold(built, *table_args)

    lib_dir = str(site_dir(built.venv) / "nvidia" / "cudnn" / "lib")
    answered, said = _run(built, *table_args, env={"LD_LIBRARY_PATH": lib_dir})
    assert COMPUTED in said
    assert answered == _cold(built, *table_args, env={"LD_LIBRARY_PATH": lib_dir})


def test_nothing_is_remembered_while_the_environment_is_still_changing(
    scenario: Callable[..., BuiltScenario],
) -> None:
    """Within the racy window a change could land after the read and before the stamp."""
    built = scenario("incident")
    _run(built)
    assert not StateDir(built.venv).answers.exists()
    _, said = _run(built)
    assert COMPUTED in said


def test_the_tools_state_in_the_prefix_is_no_change(
    scenario: Callable[..., BuiltScenario],
) -> None:
    """cudafix's first command makes ``.cudafix/`` in the prefix and uv's first lock its
    ``.lock``: neither is the environment's, so the first answer is remembered, and given
    again after either. A name of the environment's own added beside them is a change."""
    built = scenario("incident")
    (built.venv / ".lock").unlink(missing_ok=True)
    settle()
    assert not StateDir(built.venv).root.exists()
    first, said = _run(built)
    assert COMPUTED in said
    again, said = _run(built)  # at once: the prefix changed as the first one ran
    assert GIVEN_AGAIN in said and again == first
    (built.venv / ".lock").write_bytes(b"")  # as uv's first `uv pip` makes it
    again, said = _run(built)
    assert GIVEN_AGAIN in said and again == first
    (built.venv / "etc").mkdir()
    recomputed, said = _run(built)
    assert COMPUTED in said and GIVEN_AGAIN not in said
    assert recomputed == first == _cold(built)


def test_a_saved_plan_is_written_every_time(
    scenario: Callable[..., BuiltScenario], tmp_path: Path
) -> None:
    """``--out`` writes a file: a dry run that saves its plan is never answered from memory."""
    built = scenario("incident")
    out = tmp_path / "plan.json"
    argv = ["remove", "nvidia-nccl-cu13", "--dry-run", "--no-fetch", "--venv", built.venv]
    _first_runs(built)
    for _ in range(2):
        out.unlink(missing_ok=True)
        assert cudafix(*argv, "--out", out).returncode in (0, 3)
        assert out.is_file()


def test_a_corrupt_or_foreign_memo_is_a_cold_start(tmp_path: Path) -> None:
    prefix = tmp_path / "env"
    (prefix / "lib").mkdir(parents=True)
    read = ReadSet(("lib",), ())
    old = time.time_ns() + RACY_NS * 2  # as if the command had started later
    assert remember(prefix, {"k": Answer("out\n", 1)}, read, since_ns=old)
    assert recall(prefix, "k") == Recalled(Answer("out\n", 1), read)
    assert recall(prefix, "other") is None
    answers = StateDir(prefix).answers
    for corrupt in ("", "{not json", '{"format": "cudafix-answers", "version": 1}', "[]"):
        answers.write_text(corrupt)
        assert recall(prefix, "k") is None
    (prefix / "lib" / "new").write_text("")  # the directory changed: the stamp no longer holds
    assert remember(prefix, {"k": Answer("out\n", 1)}, read, since_ns=old)
    (prefix / "lib" / "newer").write_text("")
    assert recall(prefix, "k") is None


def test_an_answer_of_no_ctime_outlives_a_hard_link_but_not_a_write(tmp_path: Path) -> None:
    """A hard link (a run's snapshot) moves only a file's ctime: an answer that depends on
    no ctime (``ctimes=False``, doctor's findings) is still given, a printed one is not. A
    write moves mtime, and neither is given."""
    prefix = tmp_path / "env"
    (prefix / "lib").mkdir(parents=True)
    lib = prefix / "lib" / "libx.so"
    lib.write_bytes(b"A" * 64)
    read = ReadSet(("lib", "lib/libx.so"), ())
    later = time.time_ns() + RACY_NS * 2
    assert remember(prefix, {"k": Answer("out\n", 0)}, read, since_ns=later)
    os.link(lib, tmp_path / "snapshot-of-libx")
    assert recall(prefix, "k") is None
    assert recall(prefix, "k", ctimes=False) == Recalled(Answer("out\n", 0), read)
    lib.write_bytes(b"B" * 64)
    os.utime(lib, ns=(lib.stat().st_atime_ns, lib.stat().st_mtime_ns + 1_000_000_000))
    assert recall(prefix, "k", ctimes=False) is None


def test_a_moved_directory_is_told_before_any_file_is_statted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stale answer is told by its read set's directories first (an install or uninstall
    moves ``site-packages``): no file of the read set is statted then. A write in place,
    which moves no directory, is still told by the whole stamp; a memo written without the
    directories' stamp is read as before."""
    (tmp_path / "lib").mkdir()
    lib = tmp_path / "lib" / "libx.so"
    lib.write_bytes(b"A" * 64)
    read = ReadSet(("lib", "lib/libx.so"), ())
    assert remember(tmp_path, {"k": Answer("out\n", 0)}, read, since_ns=2**62)
    assert recall(tmp_path, "k") is not None
    memo = json.loads(StateDir(tmp_path).answers.read_text())
    assert memo["dirs"]["at"] == [0]

    (tmp_path / "lib" / "new.py").write_text("")
    statted: list[str] = []
    real = os.lstat

    def spy(path: str, *args: object, **kwargs: object) -> os.stat_result:
        statted.append(os.fspath(path))
        return real(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "lstat", spy)
    assert recall(tmp_path, "k") is None
    monkeypatch.undo()
    assert f"{tmp_path}/lib" in statted and str(lib) not in statted

    assert remember(tmp_path, {"k": Answer("out\n", 0)}, read, since_ns=2**62)
    before = lib.stat()
    with lib.open("r+b") as fh:
        fh.write(b"B")
    os.utime(lib, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert recall(tmp_path, "k") is None

    assert remember(tmp_path, {"k": Answer("out\n", 0)}, read, since_ns=2**62)
    memo = json.loads(StateDir(tmp_path).answers.read_text())
    del memo["dirs"]
    StateDir(tmp_path).answers.write_text(json.dumps(memo))
    assert recall(tmp_path, "k") is not None


def test_a_write_right_after_a_settled_stamp_moves_the_stamp(tmp_path: Path) -> None:
    """``run --`` stamps just before the command starts; a write the command makes at once,
    keeping size and mtime, lands in a later clock tick than anything stamped, so it shows."""
    (tmp_path / "lib").mkdir()
    lib = tmp_path / "lib" / "libx.so"
    read = ReadSet(("lib", "lib/libx.so"), ())
    for _ in range(20):
        lib.write_bytes(b"A" * 64)
        before = lib.stat()
        start = settled_stamp(tmp_path, read)
        with lib.open("r+b") as fh:
            fh.write(b"B")
        os.utime(lib, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert stamp(tmp_path, read) != start


def test_an_answer_file_another_user_owns_is_never_given(tmp_path: Path) -> None:
    """An answer is printed as it was rendered: one planted by another user (who may own the
    environment being inspected) could say anything, terminal escapes included."""
    if os.geteuid() != 0:
        pytest.skip("needs root to give the file to another user")
    prefix = tmp_path / "env"
    (prefix / "lib").mkdir(parents=True)
    read = ReadSet(("lib",), ())
    assert remember(prefix, {"k": Answer("\x1b]0;forged\x07Healthy\n", 0)}, read, since_ns=2**62)
    assert recall(prefix, "k") is not None
    os.chown(StateDir(prefix).answers, 65534, 65534)
    assert recall(prefix, "k") is None
