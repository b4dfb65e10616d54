"""Hostile input, through the CLI, on real venvs: RECORDs, plan files, names, file names.

Each case is what an attacker (or a broken tool) can put in front of cudafix: a RECORD that
csv reads unlike uv, rows naming directories, a plan file whose names are uv options, a
file name that writes to the terminal. The promise under test is the README's: nothing
deleted or written outside the target environment, no half-changed environment, one clear
line and the documented exit code.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from test_faults import tmpfs as tmpfs

from cudafix.faults import CRASH_ENV
from scenarios.fingerprint import diff_fingerprints, fingerprint
from tests.support.cli import as_json, assert_one_line_error, cudafix, offline, remove_pa
from tests.support.tx import A_BYTES, B_BYTES, shared_pair
from tests.support.venvs import UV, install, site_dir, uv_env, venv_with
from tests.support.wheels import make_wheel

pytestmark = pytest.mark.slow
"""Builds real venvs and runs the CLI on them: left out of ``make test-fast``."""


def _record(prefix: Path, dist: str) -> Path:
    return site_dir(prefix) / f"{dist}-1.0.dist-info" / "RECORD"


# -- RECORD read as uv reads it (item 4) ------------------------------------------------------


def _shared_row_first(record: Path) -> list[str]:
    rows = record.read_text(encoding="utf-8").splitlines()
    return sorted(rows, key=lambda r: not r.startswith("shared/lib.so,"))


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda rows: [f"junk.txt,sha256={'A' * 200_000},1", *rows], id="huge-field"),
        pytest.param(lambda rows: ["\ufeff" + rows[0], *rows[1:]], id="utf8-bom"),
    ],
)
def test_a_record_csv_misreads_hides_no_row_from_the_plan(tmp_path: Path, damage: object) -> None:
    """uv reads every row (no field-size limit, BOM stripped); so must the planner."""
    prefix, wheels = shared_pair(tmp_path)
    record = _record(prefix, "pa")
    record.write_text("\n".join(damage(_shared_row_first(record))) + "\n", encoding="utf-8")  # type: ignore[operator]
    plan = as_json(remove_pa(prefix, wheels, "--dry-run", "--json"))
    assert [s["path"].rsplit("/", 2)[-2:] for s in plan["shared_paths"]] == [["shared", "lib.so"]]
    assert plan["remove"][0]["files"] >= 3
    done = remove_pa(prefix, wheels, "--repair", "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (site_dir(prefix) / "shared" / "lib.so").read_bytes() == B_BYTES
    assert not (site_dir(prefix) / "pa_mod.py").exists()


@pytest.mark.parametrize(
    "first",
    [
        pytest.param('"pa_mod.py,,', id="unterminated-quote"),
        pytest.param('"pa_mod.py"x,,', id="text-after-quote"),
        pytest.param("pa_mod\x0c.py,,", id="form-feed-pip-splits-on"),
        pytest.param("pa_mod\r.py,,", id="lone-carriage-return"),
    ],
)
def test_a_record_that_cannot_be_read_exactly_refuses_the_plan(tmp_path: Path, first: str) -> None:
    prefix, wheels = shared_pair(tmp_path)
    record = _record(prefix, "pa")
    record.write_text(first + "\n" + record.read_text(encoding="utf-8"), encoding="utf-8")
    before = fingerprint(prefix)
    for mode in ("--dry-run", "--yes"):
        done = remove_pa(prefix, wheels, "--repair", mode)
        assert done.returncode == 3, done.stdout + done.stderr
        assert "Traceback" not in done.stderr
        assert "pa-1.0.dist-info/RECORD cannot be read exactly" in done.stdout
    assert diff_fingerprints(before, fingerprint(prefix)) == []
    doctor = cudafix("doctor", "--venv", prefix)
    assert doctor.returncode == 1
    assert "[unreadable-record]" in doctor.stdout


# -- RECORD rows naming directories (item 5) --------------------------------------------------


def _nested_pair(tmp: Path) -> tuple[Path, Path]:
    """pa and pb, each with files under ``nvidia/``; pa's RECORD later names directories."""
    wheels = tmp / "wheels"
    make_wheel(wheels, "pa", "1.0", {"nvidia/pa/liba.so": A_BYTES, "pa_mod.py": b"A = 1\n"})
    make_wheel(wheels, "pb", "1.0", {"nvidia/pb/libb.so": B_BYTES, "pb_mod.py": b"B = 1\n"})
    prefix = venv_with(tmp / "venv", wheels, "pa==1.0")
    install(prefix, wheels, "pb==1.0", deps=False)
    return prefix, wheels


DIRECTORY_ROWS = {
    "nvidia,,": "names a directory",
    "nvidia/,,": "names a directory",
    "./,,": "names a directory",
    "..,,": "names a directory",
    "nvidia/pa/..,,": "'..' after a directory name",
}


@pytest.mark.parametrize("row", sorted(DIRECTORY_ROWS))
def test_record_rows_naming_directories_are_refused_and_stripped(tmp_path: Path, row: str) -> None:
    reason = DIRECTORY_ROWS[row]
    prefix, wheels = _nested_pair(tmp_path)
    record = _record(prefix, "pa")
    record.write_text(record.read_text(encoding="utf-8") + row + "\n", encoding="utf-8")
    plan = as_json(remove_pa(prefix, wheels, "--dry-run", "--json"))
    assert plan["verdict"] == "pass", plan["reasons"]
    refused = [(r["entry"], r["reason"]) for r in plan["refused_paths"]]
    assert refused == [(row[:-2], reason)]
    shown = remove_pa(prefix, wheels, "--dry-run").stdout
    assert f"pa: {row[:-2]!r} ({reason})" in shown
    done = remove_pa(prefix, wheels, "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    site = site_dir(prefix)
    assert (site / "nvidia" / "pb" / "libb.so").read_bytes() == B_BYTES
    assert (site / "pb_mod.py").is_file() and (site / "pb-1.0.dist-info" / "RECORD").is_file()
    assert not (site / "pa_mod.py").exists() and not (site / "nvidia" / "pa").exists()


@pytest.mark.parametrize("kind", ["absolute", "dotdot", "symlink-out"])
def test_record_rows_leaving_the_environment_leave_the_file_outside_alone(
    tmp_path: Path, kind: str
) -> None:
    prefix, wheels = shared_pair(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    site = site_dir(prefix)
    if kind == "symlink-out":
        (site / "out").symlink_to(tmp_path)
    row = {
        "absolute": str(victim),
        "dotdot": "../../../../victim.txt",
        "symlink-out": "out/victim.txt",
    }[kind]
    record = _record(prefix, "pa")
    record.write_text(record.read_text(encoding="utf-8") + f"{row},,\n", encoding="utf-8")
    plan = as_json(remove_pa(prefix, wheels, "--repair", "--dry-run", "--json"))
    assert [r["entry"] for r in plan["refused_paths"]] == [row]
    done = remove_pa(prefix, wheels, "--repair", "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert victim.read_text() == "precious\n"
    assert not (site / "pa_mod.py").exists()


# -- control characters in printed paths (item 14) --------------------------------------------

FAKE = "\nVerdict: PASS (fake line)\x1b[2J"


def test_a_file_name_cannot_write_lines_or_escapes_to_the_terminal(tmp_path: Path) -> None:
    prefix, _ = shared_pair(tmp_path)
    odd = site_dir(prefix) / "odd"
    odd.mkdir()
    (odd / f"lib{FAKE}.so").write_bytes(b"\x7fELF\x02\x01\x01" + b"\xff" * 64)
    done = cudafix("doctor", "--venv", prefix, "-v")  # information is listed under -v
    assert "[bad-elf]" in done.stdout
    assert "\x1b" not in done.stdout + done.stderr
    assert not any(ln.startswith("Verdict: PASS") for ln in done.stdout.splitlines())
    assert "lib\\nVerdict: PASS (fake line)\\x1b[2J.so" in done.stdout


def test_error_lines_escape_control_characters(tmp_path: Path) -> None:
    where = tmp_path / f"no-venv{FAKE}"
    done = cudafix("doctor", "--venv", where)
    assert done.returncode == 2
    assert "\x1b" not in done.stderr
    assert not any(ln.startswith("Verdict: PASS") for ln in done.stderr.splitlines())
    assert "no-venv\\nVerdict: PASS" in done.stderr


def test_progress_and_event_lines_escape_the_command_and_the_path(tmp_path: Path) -> None:
    """stderr lines carry the venv's path ("Environment: ...", "snapshot: ...") and the
    command's argv ("running ..."): a newline or ESC in either is written as an escape."""
    prefix, _ = shared_pair(tmp_path)
    odd = tmp_path / f"v{FAKE}"
    prefix.rename(odd)
    done = cudafix("run", "-v", "--venv", odd, "--no-probe", "--", "sh", "-c", "true", f"x{FAKE}")
    assert done.returncode == 0, done.stderr
    said = done.stdout + done.stderr
    assert "\x1b" not in said
    assert not any(ln.startswith("Verdict: PASS") for ln in said.splitlines())
    assert "\\nVerdict: PASS (fake line)\\x1b[2J" in done.stderr


# -- names in plan files are names, never options (item 1) ------------------------------------


def _outside_install(tmp: Path, wheels: Path) -> Path:
    """A directory outside the venv holding pa, installed there with ``uv --target``."""
    out = tmp / "outside"
    offline = ["--offline", "--no-index", "--find-links", str(wheels)]
    argv = [UV, "pip", "install", "-q", "--target", str(out), *offline, "pa==1.0", "pb==1.0"]
    subprocess.run(argv, check=True, env=uv_env())
    return out


def _tamper(plan: Path, change: object) -> None:
    data = json.loads(plan.read_text())
    change(data)  # type: ignore[operator]
    plan.write_text(json.dumps(data))


def _remove_entry(data: dict[str, object], name: str) -> None:
    removed = data["remove"]
    assert isinstance(removed, list)
    removed.insert(0, {**removed[0], "name": name})


HOSTILE_PLANS = {
    "remove-name": lambda d, out: _remove_entry(d, f"--target={out}"),
    "reinstall-name": lambda d, out: d["reinstall"].append(
        {
            "name": f"--target={out}",
            "version": "1.0",
            "reason": {"kind": "missing-files", "subject": "x", "count": 1},
        }
    ),
    "install-name": lambda d, out: d["install"].append({"name": f"--target={out}", "version": "1"}),
    "install-version": lambda d, out: d["install"].append({"name": "pb", "version": "1.0 -t x"}),
    "probe-module": lambda d, out: d["probe_modules"].append(f"os; open('{out}/pwned', 'w')"),
    "probe-library": lambda d, out: d["probe_libraries"].append(f"../../../{out}/x.so"),
    "find-links": lambda d, out: d["options"]["find_links"].append(f"--target={out}"),
}


@pytest.mark.parametrize("field", sorted(HOSTILE_PLANS))
def test_a_plan_file_whose_names_are_options_is_refused_before_anything_runs(
    tmp_path: Path, field: str
) -> None:
    prefix, wheels = shared_pair(tmp_path)
    out = _outside_install(tmp_path, wheels)
    plan = tmp_path / "plan.json"
    made = remove_pa(prefix, wheels, "--repair", "--dry-run", "--out", str(plan))
    assert made.returncode == 0, made.stderr
    _tamper(plan, lambda d: HOSTILE_PLANS[field](d, out))
    before, outside = fingerprint(prefix), fingerprint(out)
    done = cudafix("apply", plan, "--yes", "--no-plan-probes")
    assert_one_line_error(done, 2, "not a distribution name" if "name" in field else str(plan))
    assert diff_fingerprints(before, fingerprint(prefix)) == []
    assert diff_fingerprints(outside, fingerprint(out)) == []
    assert not (out / "pwned").exists()


@pytest.mark.parametrize(
    "nested",
    [
        pytest.param("[" * 100_000 + "]" * 100_000, id="bare"),
        pytest.param('{"schema_version": 1, "remove": ' + "[" * 100_000 + "]" * 100_000 + "}",
                     id="in-a-field"),
    ],
)  # fmt: skip
def test_a_plan_file_nested_past_the_parser_is_an_input_error(tmp_path: Path, nested: str) -> None:
    """JSON nested 100,000 deep overruns the parser's recursion: one input error, exit 2."""
    prefix, _ = shared_pair(tmp_path)
    plan = tmp_path / "plan.json"
    plan.write_text(nested)
    before = fingerprint(prefix)
    for mode in ("--dry-run", "--yes"):
        done = cudafix("apply", plan, "--venv", prefix, mode)
        assert_one_line_error(done, 2, str(plan), "nested")
    assert json.loads(cudafix("apply", plan, "--venv", prefix, "--json").stdout)["exit_code"] == 2
    assert diff_fingerprints(before, fingerprint(prefix)) == []


@pytest.mark.parametrize(
    ("step", "words"),
    [
        ('reinstall = ["--target=/tmp/x"]', "not a distribution name"),
        ('remove = ["--target=/tmp/x"]', "not a distribution name or pattern"),
    ],
)
def test_a_script_whose_names_are_options_is_refused_with_its_line(
    tmp_path: Path, step: str, words: str
) -> None:
    prefix, _ = shared_pair(tmp_path)
    script = tmp_path / "s.toml"
    script.write_text(f"[[steps]]\n{step}\n")
    done = cudafix("apply", script, "--venv", prefix, "--dry-run")
    assert_one_line_error(done, 2, f"{script}:2:", words)


# -- wheels: swapped after planning (item 3), .data schemes (item 6), staging (item 16) ---------


def _install(prefix: Path, wheels: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return cudafix("install", *args, "--venv", prefix, *offline(wheels))


def _python_dir(prefix: Path) -> str:
    return site_dir(prefix).parent.name


EXTRA = {"zzz.pth": b"import os\n", "pc-1.0.data/data/share/zzz.txt": b"z\n"}


def test_a_wheel_swapped_after_planning_is_refused(tmp_path: Path) -> None:
    prefix, wheels = shared_pair(tmp_path)
    make_wheel(wheels, "pc", "1.0", {"pc_mod.py": b"C = 1\n"})
    plan = tmp_path / "plan.json"
    made = _install(prefix, wheels, "pc", "--dry-run", "--out", plan)
    assert made.returncode == 0, made.stdout + made.stderr
    (pin,) = json.loads(plan.read_text())["install"]
    assert pin["wheel"].endswith("pc-1.0-py3-none-any.whl") and len(pin["wheel_sha256"]) == 64
    make_wheel(wheels, "pc", "1.0", {"pc_mod.py": b"C = 1\n", **EXTRA})
    before = fingerprint(prefix)
    done = cudafix("apply", plan, "--yes")
    assert_one_line_error(done, 3, "pc-1.0-py3-none-any.whl", "changed since the plan")
    assert diff_fingerprints(before, fingerprint(prefix)) == []


def test_a_reinstall_wheel_swapped_after_planning_is_refused(tmp_path: Path) -> None:
    prefix, wheels = shared_pair(tmp_path)
    plan = tmp_path / "plan.json"
    made = remove_pa(prefix, wheels, "--repair", "--dry-run", "--out", str(plan))
    assert made.returncode == 0, made.stdout + made.stderr
    (again,) = json.loads(plan.read_text())["reinstall"]
    assert again["name"] == "pb" and again["wheel"].endswith("pb-1.0-py3-none-any.whl")
    make_wheel(wheels, "pb", "1.0", {"shared/lib.so": B_BYTES, "pb_mod.py": b"B = 1\n", **EXTRA})
    before = fingerprint(prefix)
    done = cudafix("apply", plan, "--yes")
    assert_one_line_error(done, 3, "pb-1.0-py3-none-any.whl", "changed since the plan")
    assert diff_fingerprints(before, fingerprint(prefix)) == []


def test_verify_catches_every_path_an_install_wrote_beyond_the_plan(tmp_path: Path) -> None:
    prefix, wheels = shared_pair(tmp_path)
    make_wheel(wheels, "pc", "1.0", {"pc_mod.py": b"C = 1\n", **EXTRA})
    plan = tmp_path / "plan.json"
    made = _install(prefix, wheels, "pc", "--dry-run", "--out", plan)
    assert made.returncode == 0, made.stdout + made.stderr

    def forget_extras(data: dict[str, list[dict[str, object]]]) -> None:
        pin = data["install"][0]
        keep = [p for p in pin["paths"] if "zzz" not in str(p)]  # type: ignore[attr-defined]
        assert len(keep) == len(pin["paths"]) - 2  # type: ignore[arg-type]
        pin["paths"] = keep

    _tamper(plan, forget_extras)
    before = fingerprint(prefix)
    done = cudafix("apply", plan, "--yes")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "zzz.pth" in done.stderr and "share/zzz.txt" in done.stderr
    assert diff_fingerprints(before, fingerprint(prefix)) == []


DATA_WHEEL = {
    "pd_mod.py": b"D = 1\n",
    "pd-1.0.data/data/share/pd/x.txt": b"x\n",
    "pd-1.0.data/headers/pd.h": b"int pd;\n",
    "pd-1.0.data/scripts/pd-tool": b"#!python\nprint(1)\n",
    "pd-1.0.data/purelib/pd_pure.py": b"P = 1\n",
    "pd-1.0.data/platlib/pd_plat.py": b"Q = 1\n",
}


def test_wheel_data_schemes_land_where_installers_put_them_and_undo_removes_them(
    tmp_path: Path,
) -> None:
    prefix, wheels = shared_pair(tmp_path)
    make_wheel(wheels, "pd", "1.0", DATA_WHEEL)
    before = fingerprint(prefix)
    plan = as_json(_install(prefix, wheels, "pd", "--dry-run", "--json"))
    assert plan["verdict"] == "pass", plan["reasons"]
    py = _python_dir(prefix)
    want = {"share/pd/x.txt", f"include/site/{py}/pd/pd.h", "bin/pd-tool"}
    assert want <= set(plan["install"][0]["paths"])
    done = _install(prefix, wheels, "pd", "--yes", "--json")
    result = as_json(done)
    assert done.returncode == 0, done.stderr
    assert all((prefix / p).is_file() for p in want)
    undone = cudafix("undo", result["transaction"], "--venv", prefix, "--yes")
    assert undone.returncode == 0, undone.stdout + undone.stderr
    assert diff_fingerprints(before, fingerprint(prefix)) == []


def test_a_data_file_over_another_distributions_file_is_a_clobber(tmp_path: Path) -> None:
    prefix, wheels = shared_pair(tmp_path)
    inside = f"pe-1.0.data/data/lib/{_python_dir(prefix)}/site-packages/pa_mod.py"
    make_wheel(wheels, "pe", "1.0", {"pe_mod.py": b"E = 1\n", inside: b"A = 2\n"})
    done = _install(prefix, wheels, "pe", "--dry-run")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "pe would overwrite 1 path(s) that pa claims" in done.stdout


def test_repair_of_a_distribution_with_data_files_is_not_another_build(tmp_path: Path) -> None:
    prefix, wheels = shared_pair(tmp_path)
    make_wheel(wheels, "pd", "1.0", DATA_WHEEL)
    install(prefix, wheels, "pd==1.0", deps=False)
    (prefix / "share" / "pd" / "x.txt").unlink()
    done = cudafix("repair", "--venv", prefix, *offline(wheels), "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (prefix / "share" / "pd" / "x.txt").read_bytes() == b"x\n"


def test_an_install_through_a_symlinked_directory_is_refused_at_plan_time(tmp_path: Path) -> None:
    prefix, wheels = shared_pair(tmp_path)
    site = site_dir(prefix)
    (site / "real").mkdir()
    (site / "pf").symlink_to("real")
    make_wheel(wheels, "pf", "1.0", {"pf/__init__.py": b"F = 1\n"})
    done = _install(prefix, wheels, "pf", "--dry-run")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "pf/__init__.py" in done.stdout and "symlink" in done.stdout


def test_sigkill_while_staging_leaves_no_stage_directory(tmp_path: Path) -> None:
    prefix, wheels = shared_pair(tmp_path)
    make_wheel(wheels, "pc", "1.0", {"pc_mod.py": b"C = 1\n"})
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    killed = cudafix(
        "install", "pc", "--venv", prefix, *offline(wheels), "--dry-run",
        env={"TMPDIR": str(tmp), CRASH_ENV: "stage"},
    )  # fmt: skip
    assert killed.returncode == -9, killed.stdout + killed.stderr
    assert [p.name.startswith("cudafix-stage-") for p in tmp.iterdir()] == [True]
    again = cudafix("install", "pc", "--venv", prefix, *offline(wheels), "--dry-run",
                    env={"TMPDIR": str(tmp)})  # fmt: skip
    assert again.returncode == 0, again.stdout + again.stderr
    assert list(tmp.iterdir()) == []


def test_a_full_tmpdir_while_staging_is_a_machine_error(tmp_path: Path, tmpfs: Path) -> None:
    prefix, wheels = shared_pair(tmp_path)
    make_wheel(wheels, "pc", "1.0", {"pc_mod.py": b"C = " + b"1" * 4_000_000 + b"\n"})
    filler = tmpfs / "filler"
    with filler.open("wb", buffering=0) as fh, pytest.raises(OSError, match="No space left"):
        while True:
            fh.write(b"\0" * (1 << 20))
    os.truncate(filler, filler.stat().st_size - (64 << 10))  # room for small files, not a wheel
    done = cudafix(
        "install", "pc", "--venv", prefix, *offline(wheels), "--dry-run",
        env={"TMPDIR": str(tmpfs)},
    )  # fmt: skip
    assert_one_line_error(done, 1, "No space left on device")
    assert "can be had" not in done.stdout + done.stderr


@pytest.mark.parametrize("kind", ["uv", "pip"])
def test_backend_commands_end_options_before_names(tmp_path: Path, kind: str) -> None:
    """Defence in depth below the plan checks: a name that looks like an option is a name."""
    from cudafix.fetch.backend import make_backend
    from cudafix.model.sources import Sources

    prefix, wheels = shared_pair(tmp_path)
    out = _outside_install(tmp_path, wheels)
    outside = fingerprint(out)
    python = prefix / "bin" / "python"
    backend = make_backend(kind, python, Sources(offline=True, find_links=(str(wheels),)))  # type: ignore[arg-type]
    backend.uninstall([f"--target={out}", "pa"])
    make_wheel(wheels, "pc", "1.0", {"pc_mod.py": b"C = 1\n"})
    backend.reinstall([f"--target={out}", "pc==1.0"])
    assert diff_fingerprints(outside, fingerprint(out)) == []


@pytest.mark.parametrize("how", ["install", "apply-install", "repair"])
def test_a_plan_made_without_its_wheels_is_never_applied(tmp_path: Path, how: str) -> None:
    """``--no-fetch`` plans are for air-gapped dry runs: what their wheels write is unknown,
    so neither the command with ``--yes`` nor ``apply`` of its saved plan changes anything
    (before, the install stayed while the run said "rolled back", and a swapped reinstall
    wheel's extra ``zzz.pth`` was committed)."""
    prefix, wheels = shared_pair(tmp_path)
    make_wheel(wheels, "pc", "1.0", {"pc_mod.py": b"C = 1\n"})
    before = fingerprint(prefix)
    if how == "install":
        done = _install(prefix, wheels, "pc", "--no-fetch", "--yes")
    elif how == "repair":
        make_wheel(
            wheels, "pb", "1.0", {"shared/lib.so": B_BYTES, "pb_mod.py": b"B = 1\n", **EXTRA}
        )
        done = remove_pa(prefix, wheels, "--repair", "--no-fetch", "--yes")
    else:
        plan = tmp_path / "plan.json"
        made = _install(prefix, wheels, "pc", "--no-fetch", "--dry-run", "--out", plan)
        assert made.returncode == 0, made.stdout + made.stderr
        make_wheel(wheels, "pc", "1.0", {"pc_mod.py": b"C = 1\n", **EXTRA})
        done = cudafix("apply", plan, "--yes")
    assert_one_line_error(done, 3, "--no-fetch")
    assert diff_fingerprints(before, fingerprint(prefix)) == []
