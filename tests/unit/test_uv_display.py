"""What of uv's staging display reaches the terminal, and how a failed command's last words
are labelled: pure decisions over bytes and strings.

uv's bytes below are what it writes on a pty while ``stage`` installs two wheels into the
scratch directory (colours and redraws as they come).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cudafix.fetch.staging import InstallLinesHidden
from cudafix.process import activated
from cudafix.tx.probe import exit_said

UV_SAYS = (
    b"\x1b[2mUsing CPython 3.11.7 interpreter at: /v/bin/python\x1b[0m\r\n"
    b"\x1b[37m\xe2\xa0\x8b\x1b[0m \x1b[2mResolving dependencies...   \x1b[0m\r\x1b[2K"
    b"\x1b[2mResolved \x1b[1m2 packages\x1b[0m \x1b[2min 1ms\x1b[0m\x1b[0m\r\n"
    b"\xe2\x96\x88\xe2\x96\x88 [2/2] \x1b[2mnvidia-cudnn-cu12==9.10.2.21\x1b[0m\r\x1b[2K"
    b"\x1b[2mInstalled \x1b[1m2 packages\x1b[0m \x1b[2min 2ms\x1b[0m\x1b[0m\r\n"
    b" \x1b[32m+\x1b[39m \x1b[1mnvidia-cuda-nvrtc-cu12\x1b[0m\x1b[2m==12.8.93\x1b[0m\r\n"
    b" \x1b[32m+\x1b[39m \x1b[1mnvidia-cudnn-cu12\x1b[0m\x1b[2m==9.10.2.21\x1b[0m\r\n"
)


def _shown(data: bytes, step: int) -> bytes:
    shown = InstallLinesHidden()
    out = [shown.feed(data[i : i + step]) for i in range(0, len(data), step)]
    return b"".join(out) + shown.end()


def _visible(data: bytes) -> str:
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", data.decode())


@pytest.mark.parametrize("step", [1, 2, 3, 7, 64, len(UV_SAYS)])
def test_uv_lines_about_the_scratch_environment_are_hidden_however_the_bytes_arrive(
    step: int,
) -> None:
    shown = _shown(UV_SAYS, step)
    assert shown == _shown(UV_SAYS, len(UV_SAYS))  # cut anywhere, the same display
    visible = _visible(shown)
    for gone in ("Using CPython", "interpreter at", "Installed", "+ nvidia", "==12.8.93"):
        assert gone not in visible, (gone, visible)
    assert "Resolving dependencies" in visible and "Resolved 2 packages in 1ms" in visible
    # a hidden line's control sequences still pass: the bar is still cleared
    assert shown.endswith(b"\x1b[0m") and b"\r\x1b[2K\x1b[2m\x1b[1m" in shown
    assert "\n" not in visible.split("Resolved 2 packages in 1ms\r\n", 1)[1]


def test_other_output_passes_unchanged_and_an_unfinished_line_is_held_only_while_it_may_hide() -> (
    None
):
    said = b"warning: the index is slow\r\n\x1b[2mPrepared 1 package in 5ms\x1b[0m\r\n"
    assert _shown(said, 1) == said
    shown = InstallLinesHidden()
    assert shown.feed(b"Downloading nvidia-cudnn-cu12 (12.0MiB)") == (
        b"Downloading nvidia-cudnn-cu12 (12.0MiB)"
    )
    assert shown.feed(b"\r\nUs") == b"\r\n"  # "Us" may become "Using ...": held
    assert shown.feed(b"ually") == b"Usually"  # it did not
    assert shown.feed(b" \x1b[3") == b" \x1b[3"  # mid-line: nothing held
    assert shown.feed(b"2m + ok\x1b[0m") == b"2m + ok\x1b[0m"  # not at a line start
    assert shown.feed(b"\r\nInstalled 1 package") == b"\r\n"
    assert shown.end() == b""  # the command ended on it: still hidden


def test_a_failed_commands_last_line_is_labelled_as_such_not_given_as_the_cause() -> None:
    assert exit_said(3, "step 1 done\nstep 2 done\n") == (
        "exit status 3; last output line: step 2 done"
    )
    assert exit_said(1, "\n  \n") == "exit status 1, no output"
    assert exit_said(2, "error: no wheel\n", "stderr") == (
        "exit status 2; last stderr line: error: no wheel"
    )


def test_a_wrapped_command_finds_what_is_given_last_only_after_the_users_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    env = activated(Path("/v"), last=("/tool/bin",))
    assert env["PATH"] == "/v/bin:/usr/bin:/bin:/tool/bin"
