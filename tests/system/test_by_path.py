"""A plugin nothing imports, whose needs its framework preloads by full path, through the CLI.

``plug/libplug.so`` needs ``libA.so.1`` (wheel ``pa``, ``nvidia/a/lib``) and ``libB.so.1``
(wheel ``pb``, ``nvidia/b/lib``) with no RPATH to either: it loads only in a process that
loaded them by path first, as torch, jax and onnxruntime do with the nvidia wheels. The
oracle is that load: ``ctypes.CDLL`` with ``RTLD_GLOBAL`` of libA and libB by full path,
then the plugin, in the venv's interpreter.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from scenarios import BuiltScenario
from tests.support.cli import as_json, cudafix, repair_offline, uv_uninstall
from tests.support.venvs import build_toml, site_dir

pytestmark = pytest.mark.slow
"""Builds real venvs and runs the CLI on them: left out of ``make test-fast``."""

PLUGIN = "plug/libplug.so"

PRELOADED = """
name = "by-path"
description = "a plugin whose needs are preloaded by full path"

[[dist]]
name = "pa"
version = "1.0"
lib = [{ path = "nvidia/a/lib/libA.so.1" }]

[[dist]]
name = "pb"
version = "1.0"
lib = [{ path = "nvidia/b/lib/libB.so.1" }]

[[dist]]
name = "plug"
version = "1.0"
lib = [{ path = "plug/libplug.so", needed = ["libA.so.1", "libB.so.1"] }]

# The other side: a plugin for a stack this venv does not hold (``pc``'s library is built so
# that it links, never installed): none of its needs is provided here, it is optional.
[[dist]]
name = "pc"
version = "1.0"
lib = [{ path = "nvidia/c/lib/libC.so.1" }]

[[dist]]
name = "other"
version = "1.0"
lib = [{ path = "other/libother.so", needed = ["libC.so.1"] }]

[[steps]]
action = "install"
packages = ["pa==1.0", "pb==1.0", "plug==1.0", "other==1.0"]
"""


def preloaded_load(built: BuiltScenario) -> subprocess.CompletedProcess[str]:
    """Load libA and libB by full path (``RTLD_GLOBAL``), then the plugin, as its framework."""
    site = site_dir(built.venv)
    code = (
        "import ctypes\n"
        f"ctypes.CDLL({str(site / 'nvidia/a/lib/libA.so.1')!r}, mode=ctypes.RTLD_GLOBAL)\n"
        f"ctypes.CDLL({str(site / 'nvidia/b/lib/libB.so.1')!r}, mode=ctypes.RTLD_GLOBAL)\n"
        f"ctypes.CDLL({str(site / PLUGIN)!r})\n"
    )
    return subprocess.run(
        [str(built.python), "-c", code], capture_output=True, text=True, check=False
    )


def _plugin_findings(report: dict[str, Any], plugin: str = PLUGIN) -> list[dict[str, Any]]:
    return [
        f
        for f in report["findings"]
        if f["kind"] == "unresolved" and (f["consumer"] or "").endswith(plugin)
    ]


def _optional(report: dict[str, Any]) -> list[tuple[str, str]]:
    """The absent stack's plugin: its need, as information."""
    return [(f["need"], f["severity"]) for f in _plugin_findings(report, "other/libother.so")]


def test_a_preloaded_need_is_protected_diagnosed_and_repaired(tmp_path: Path) -> None:
    built = build_toml(PRELOADED, tmp_path / "venv")
    assert preloaded_load(built).returncode == 0
    pristine = cudafix("doctor", "--json", "--venv", built.venv)
    assert pristine.returncode == 0, pristine.stdout
    assert _plugin_findings(as_json(pristine)) == []
    assert _optional(as_json(pristine)) == [("libC.so.1", "info")]

    proc = cudafix("remove", "pb", "--dry-run", "--json", "--no-fetch", "--venv", built.venv)
    plan = as_json(proc)
    assert (plan["verdict"], proc.returncode) == ("refused", 3)
    [lost] = plan["lost"]
    assert lost["consumer"].endswith(PLUGIN) and lost["need"] == "libB.so.1"
    assert lost["resolved_before"].endswith("nvidia/b/lib/libB.so.1")
    assert [r["kind"] for r in plan["reasons"]] == ["need-lost"]

    uv_uninstall(built.python, "pb")
    assert preloaded_load(built).returncode != 0  # the break is real
    broken = cudafix("doctor", "--json", "--venv", built.venv)
    assert broken.returncode == 1, broken.stdout
    report = as_json(broken)
    [finding] = _plugin_findings(report)
    assert (finding["severity"], finding["need"]) == ("error", "libB.so.1")
    assert finding["owners"] == ["pb"]  # remembered from the last reading: pb 1.0
    assert list(report["install"]) == ["pb==1.0"]
    assert cudafix("doctor", "--venv", built.venv).returncode == 1  # and still, read again

    done = repair_offline(built)
    assert done.returncode == 0, done.stdout + done.stderr
    assert preloaded_load(built).returncode == 0
    assert cudafix("doctor", "--venv", built.venv).returncode == 0


def test_a_partly_provided_plugin_is_broken_without_a_memory(tmp_path: Path) -> None:
    """The first reading after the break: no memory of pb, the rule alone says broken."""
    built = build_toml(PRELOADED, tmp_path / "venv")
    uv_uninstall(built.python, "pb")
    proc = cudafix("doctor", "--json", "--venv", built.venv)
    assert proc.returncode == 1, proc.stdout
    report = as_json(proc)
    [finding] = _plugin_findings(report)
    assert (finding["severity"], finding["need"]) == ("error", "libB.so.1")
    assert finding["owners"] == [] and report["install"] == {}  # nothing says what provided it
    assert _optional(report) == [("libC.so.1", "info")]  # the absent stack's stays optional
