"""Target selection's refusals: no environment, or a directory that is not one (no venv built)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cudafix.env.target import interpreter, locate_target
from cudafix.model.errors import ExitCode, TargetError


@pytest.mark.parametrize(
    ("python", "venv_arg", "environ", "needle"),
    [
        (None, "nope", {}, "nope: no such directory"),
        (None, None, {"VIRTUAL_ENV": "gone"}, "gone: no such directory (from VIRTUAL_ENV)"),
        (None, None, {}, ".venv: no environment"),
        ("/no/such/python", None, {}, "/no/such/python: no such interpreter"),
        ("python-nope", None, {"PATH": "/nonexistent"}, "python-nope: no such interpreter"),
    ],
)
def test_no_target_is_one_clear_line(
    tmp_path: Path,
    python: str | None,
    venv_arg: str | None,
    environ: dict[str, str],
    needle: str,
) -> None:
    with pytest.raises(TargetError) as info:
        locate_target(python, venv_arg, environ, tmp_path)
    assert needle in info.value.message
    assert "\n" not in info.value.message
    assert info.value.hint is not None and "--venv DIR" in info.value.hint
    assert info.value.exit_code == ExitCode.USAGE


def test_directory_that_is_not_a_venv(tmp_path: Path) -> None:
    (tmp_path / "plain" / "bin").mkdir(parents=True)
    (tmp_path / "plain" / "bin" / "python").write_text("")
    with pytest.raises(TargetError, match="not a Python environment"):
        locate_target(None, "plain", {}, tmp_path)
    with pytest.raises(TargetError, match="not inside a Python environment"):
        locate_target("plain/bin/python", None, {}, tmp_path)


def test_interpreter_is_the_one_found_else_bin_python() -> None:
    prefix = Path("/env")
    assert interpreter(prefix, Path("/env/bin/python3")) == Path("/env/bin/python3")
    assert interpreter(prefix, "/env/bin/python3.11") == Path("/env/bin/python3.11")
    assert interpreter(prefix, None) == interpreter(prefix) == Path("/env/bin/python")
