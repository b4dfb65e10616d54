"""Printed next commands run as printed (argv quoted once), and wheel sources become the
same options for cudafix, uv and pip."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from cudafix.model.commands import (
    applying_argv,
    cudafix_argv,
    cudafix_line,
    shell_join,
    venv_flags,
)
from cudafix.model.errors import (
    BackendError,
    CudafixError,
    DamagedState,
    EnvironmentFault,
    ExitCode,
    InputError,
    LockedError,
    PlanRefused,
    RollbackIncomplete,
    StalePlan,
    TargetError,
    TransactionFailed,
    UnsafeState,
    UsageError,
)
from cudafix.model.sources import PYPI, Sources

ODD_PREFIXES = [
    "/srv/venv",
    "/home/a b/venv",
    "/tmp/it's",
    '/tmp/"quoted"',
    "/tmp/$HOME/`x`",
    "/tmp/semi;colon",
    "-starts-with-dash",
    "/tmp/ünïcode",
]


@pytest.mark.parametrize("prefix", ODD_PREFIXES)
def test_a_printed_line_reads_back_as_its_argv(prefix: str) -> None:
    line = cudafix_line("remove", "torch", target=venv_flags(prefix), tail=["--dry-run"])
    assert shlex.split(line) == ["cudafix", "remove", "torch", "--venv", prefix, "--dry-run"]


def test_argv_order_is_words_target_tail() -> None:
    argv = cudafix_argv("undo", "last", target=("--python", "/p/bin/python"), tail=iter(["-v"]))
    assert argv == ["cudafix", "undo", "last", "--python", "/p/bin/python", "-v"]
    assert cudafix_argv() == ["cudafix"]


def test_venv_flags_take_a_path_or_a_string() -> None:
    assert venv_flags(Path("/a/b")) == ("--venv", "/a/b")
    assert venv_flags("rel") == ("--venv", "rel")


@pytest.mark.parametrize("word", ["plain", "", "a b", "x'y", "$(rm -rf /)", "\n"])
def test_shell_join_round_trips_every_word(word: str) -> None:
    assert shlex.split(shell_join(["cmd", word])) == ["cmd", word]


# --- sources ---------------------------------------------------------------------------------


def test_default_sources_are_pypi_with_nothing_to_say() -> None:
    src = Sources()
    assert src.cli_args() == []
    assert src.installer_args() == []
    assert src.installer_args(pip=True) == []
    assert src.described() == [f"the index {PYPI}"]


def test_every_source_as_cli_options_in_uvs_order() -> None:
    src = Sources(
        offline=True,
        find_links=("/w1", "/w 2"),
        index_url="https://mirror/simple",
        extra_index_urls=("https://e1", "https://e2"),
    )
    assert src.cli_args() == [
        "--offline",
        "--index-url", "https://mirror/simple",
        "--extra-index-url", "https://e1",
        "--extra-index-url", "https://e2",
        "--find-links", "/w1",
        "--find-links", "/w 2",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("src", "uv", "pip"),
    [
        (Sources(offline=True), ["--offline"], ["--no-index"]),
        (
            Sources(offline=True, find_links=("/w",)),
            ["--offline", "--find-links=/w", "--no-index"],
            ["--find-links=/w", "--no-index"],
        ),
        (Sources(find_links=("-odd",)), ["--find-links=-odd"], ["--find-links=-odd"]),
        (
            Sources(index_url="https://m", extra_index_urls=("https://e",)),
            ["--index-url=https://m", "--extra-index-url=https://e"],
            ["--index-url=https://m", "--extra-index-url=https://e"],
        ),
    ],
)
def test_installer_args_join_values_and_pip_has_no_offline(
    src: Sources, uv: list[str], pip: list[str]
) -> None:
    """A value is joined to its option, so ``-odd`` is never read as an option; offline
    pip (no ``--offline``) must not reach an index at all."""
    assert src.installer_args() == uv
    assert src.installer_args(pip=True) == pip


def test_described_follows_the_order_uv_tries() -> None:
    online = Sources(find_links=("/w",), index_url="https://m", extra_index_urls=("https://e",))
    assert online.described() == [
        "find-links /w",
        "the index https://m",
        "the extra index https://e",
    ]
    offline = Sources(offline=True, find_links=("/w",), index_url="https://m")
    assert offline.described() == ["find-links /w", "uv's cache (offline)"]


def test_progress_fd_is_not_part_of_a_sources_identity() -> None:
    """How to fetch, never where from: two plans with other terminals are the same plan."""
    assert Sources(progress_fd=3) == Sources(progress_fd=None)
    assert hash(Sources(progress_fd=3)) == hash(Sources())
    assert Sources(fetch=False) != Sources()


# --- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "code", "reference"),
    [
        (CudafixError, ExitCode.FAILURE, "cudafix-error"),
        (UsageError, ExitCode.USAGE, "usage"),
        (TargetError, ExitCode.USAGE, "bad-target"),
        (InputError, ExitCode.USAGE, "bad-input"),
        (PlanRefused, ExitCode.REFUSED, "plan-refused"),
        (StalePlan, ExitCode.REFUSED, "stale-plan"),
        (LockedError, ExitCode.LOCKED, "locked"),
        (BackendError, ExitCode.FAILURE, "backend-failed"),
        (TransactionFailed, ExitCode.FAILURE, "transaction-failed"),
        (RollbackIncomplete, ExitCode.LOCKED, "rollback-incomplete"),
        (UnsafeState, ExitCode.USAGE, "unsafe-state"),
        (DamagedState, ExitCode.LOCKED, "damaged-state"),
        (EnvironmentFault, ExitCode.FAILURE, "os-error"),
    ],
)
def test_each_error_has_its_documented_exit_code(
    cls: type[CudafixError], code: ExitCode, reference: str
) -> None:
    err = cls("it failed", context=["a", "b"], hint="try this")
    assert (err.exit_code, err.reference) == (code, reference)
    assert isinstance(err, CudafixError)
    assert (err.message, str(err), err.context, err.hint) == (
        "it failed",
        "it failed",
        ("a", "b"),
        "try this",
    )
    assert err.json_emitted is False


def test_error_hierarchy_lets_callers_catch_by_family() -> None:
    assert issubclass(RollbackIncomplete, TransactionFailed)
    assert issubclass(UnsafeState, TargetError)
    assert [int(c) for c in ExitCode] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize(
    ("given", "ask", "applying"),
    [
        (["remove", "x", "--dry-run"], False, ["remove", "x", "--venv", "/v", "--yes"]),
        (["remove", "x", "--dry-run"], True, ["remove", "x", "--venv", "/v"]),
        (["-p", "/py", "repair", "--dry-run", "-y"], False, ["-p", "/py", "repair", "-y"]),
        (["--venv=/w", "remove", "--dry-run", "--", "-odd"], False,
         ["--venv=/w", "remove", "--yes", "--", "-odd"]),
    ],
)  # fmt: skip
def test_the_command_that_applies_a_dry_run(
    given: list[str], ask: bool, applying: list[str]
) -> None:
    """The dry run's own words without ``--dry-run``; the target named when it was implicit;
    ``--yes`` when no one can be asked; nothing added after ``--``."""
    assert applying_argv(given, venv_flags("/v"), ask=ask) == ["cudafix", *applying]
