"""process.run, the one spawner: captured output, exit codes, timeouts and missing programs
as values, never exceptions; and the environment that activates a venv."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from cudafix.process import Completed, activated, group_members, run


@pytest.mark.parametrize("code", [0, 1, 3, 255])
def test_the_exit_code_is_returned_not_raised(code: int) -> None:
    done = run(["sh", "-c", f"echo out; echo err >&2; exit {code}"])
    assert done == Completed(
        ("sh", "-c", f"echo out; echo err >&2; exit {code}"), code, "out\n", "err\n"
    )


def test_argv_paths_become_strings_and_cwd_and_env_apply(tmp_path: Path) -> None:
    done = run(
        [Path("/bin/sh"), "-c", 'pwd; printf %s "$CUDAFIX_T"'], env={"CUDAFIX_T": "v"}, cwd=tmp_path
    )
    assert done.argv[0] == "/bin/sh"
    assert done.stdout == f"{tmp_path}\nv"


def test_env_is_merged_over_the_callers() -> None:
    done = run(["sh", "-c", 'printf %s "$PATH"'], env={"CUDAFIX_X": "1"})
    assert done.stdout == os.environ["PATH"]


def test_stdin_is_closed_so_a_reader_sees_end_of_file() -> None:
    assert run(["cat"], timeout=10).returncode == 0


def test_undecodable_output_is_replaced_not_raised() -> None:
    done = run([sys.executable, "-c", "import sys; sys.stdout.buffer.write(b'a\\xffb')"])
    assert done.stdout == "a\ufffdb"


def test_a_missing_program_is_exit_127_with_its_name() -> None:
    done = run(["/nonexistent/cudafix-no-such-tool", "x"])
    assert (done.returncode, done.stdout, done.timed_out) == (127, "", False)
    assert done.stderr.startswith("/nonexistent/cudafix-no-such-tool: ")


def test_a_timeout_kills_and_reports_what_was_said() -> None:
    code = "import sys, time; print('started', flush=True); time.sleep(30)"
    done = run([sys.executable, "-c", code], timeout=1.0)
    assert (done.returncode, done.timed_out) == (-9, True)
    assert done.stdout == "started\n"


def test_activated_puts_the_venvs_bin_first(tmp_path: Path) -> None:
    env = activated(tmp_path)
    assert env["VIRTUAL_ENV"] == str(tmp_path)
    first, _, rest = env["PATH"].partition(os.pathsep)
    assert first == str(tmp_path / "bin")
    assert rest == os.environ.get("PATH", "")


def test_group_members_lists_this_process_in_its_group() -> None:
    members = group_members(os.getpgrp())
    assert os.getpid() in [pid for pid, _ in members]
    assert group_members(2**22 + 12345) == []
