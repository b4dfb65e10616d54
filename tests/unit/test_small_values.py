"""Small values the flows and the CLI share: find-links paths, the probe set, typed events."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest

from cudafix.cli import output
from cudafix.flows.probes import probe_set
from cudafix.model.args import RunArgs
from cudafix.model.sources import is_url, link_path
from cudafix.model.transaction import RunEvent, RunEventKind


def test_link_path_keeps_urls_and_makes_directories_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert link_path("https://example.org/simple/x/") == "https://example.org/simple/x/"
    assert link_path("file:///srv/wheels") == "file:///srv/wheels"
    assert link_path("wheels") == str(tmp_path / "wheels")
    assert link_path("wheels", Path("/srv")) == "/srv/wheels"
    assert link_path("/abs/wheels", Path("/srv")) == "/abs/wheels"
    assert is_url("file:///srv") and not is_url("./wheels")


def test_probe_set_drops_automatic_modules_under_no_probe_but_keeps_the_users() -> None:
    run = RunArgs(probe_code=("import x",), probe_commands=("true",), probe_timeout=5.0)
    probed = probe_set(run, modules=["torch", "jax"])
    assert (probed.modules, probed.code, probed.commands) == (
        ("torch", "jax"),
        ("import x",),
        ("true",),
    )
    assert probed.timeout == 5.0
    bare = probe_set(RunArgs(auto_probes=False, probe_code=("import x",)), modules=["torch"])
    assert (bare.modules, bare.code) == ((), ("import x",))


@pytest.mark.parametrize("kind", get_args(RunEventKind))
def test_every_kind_of_event_is_shown_under_verbose(
    kind: RunEventKind, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(output, "OUTPUT", output.Output(verbosity=1, color="never"))
    output.echo_event(RunEvent(kind, "it happened"))
    line = capsys.readouterr().err
    lead = {"note": "note: ", "warning": "warning: ", "probe-note": "probe note: "}.get(kind, "")
    assert line == f"{lead}it happened\n"


def test_progress_is_quiet_under_q_and_json_but_warnings_are_not(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(output, "OUTPUT", output.Output(verbosity=-1, color="never"))
    output.echo_event(RunEvent("progress", "reading"))
    output.echo_event(RunEvent("warning", "half-changed"))
    monkeypatch.setattr(output, "OUTPUT", output.Output(as_json=True, verbosity=1))
    output.echo_event(RunEvent("progress", "reading"))
    assert capsys.readouterr().err == "warning: half-changed\n"
