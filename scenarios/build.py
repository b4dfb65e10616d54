"""Build a scenario venv: cached wheelhouse -> fresh uv venv -> replayed steps.

Only this package's builder writes: under ``dest`` (and ``dest.outside`` for hostile
symlink targets) and under the cache. Stage ``ready`` is the state cudafix is tested on;
``broken`` also replays the ``break`` steps, the plain uv command users run.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import uv

from cudafix.model.errors import BackendError, UsageError
from cudafix.process import run
from scenarios.cache import cache_key, cached, uv_cache_dir
from scenarios.catalog import load_scenario
from scenarios.compile import build_wheelhouse
from scenarios.spec import Scenario
from scenarios.steps import Venv, replay, uninstall_argv


@dataclass(frozen=True)
class BuiltScenario:
    """A built scenario venv and the wheelhouse it was installed from."""

    name: str
    venv: Path
    python: Path
    wheelhouse: Path
    """The cached wheelhouse; read-only, kept for ``--find-links`` repairs."""
    spec: Scenario = field(repr=False)
    stage: str = "ready"

    def break_command(self) -> list[str]:
        """The plain uv/pip command of the first ``break`` step; ``[]`` when there is none."""
        for step in self.spec.steps:
            if step.tag == "break" and step.action == "uninstall":
                return uninstall_argv(self.python, uv_binary(), step)
        return []


def uv_binary() -> Path:
    """The uv shipped with the ``uv`` wheel cudafix depends on."""
    return Path(uv.find_uv_bin())


def builder_env() -> dict[str, str]:
    """Environment for every builder call: our own uv cache, no config, no downloads.

    ``UV_LINK_MODE=copy``: uv hardlinks from its cache by default, so a test that edits an
    installed file in place would corrupt every later venv built from that cache.
    """
    return {
        "UV_CACHE_DIR": str(uv_cache_dir()),
        "UV_LINK_MODE": "copy",
        "UV_NO_CONFIG": "1",
        "UV_PYTHON_DOWNLOADS": "never",
        "PIP_CONFIG_FILE": os.devnull,
    }


def wheelhouse(spec: Scenario) -> Path:
    """The cached wheelhouse of ``spec``, building it when missing."""
    return cached(cache_key(spec), lambda tmp: build_wheelhouse(spec, tmp)) / "wheelhouse"


def _fresh_venv(dest: Path, env: Mapping[str, str]) -> None:
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise UsageError(f"{dest} exists and is not empty; scenarios build into a fresh directory")
    done = run([uv_binary(), "venv", "--offline", "--python", sys.executable, dest], env=env)
    if done.returncode != 0:
        raise BackendError(f"uv venv {dest} failed", context=[done.stderr[-2000:]])


def build_spec(spec: Scenario, dest: Path, *, stage: str = "ready") -> BuiltScenario:
    """Build ``spec`` into a new venv at ``dest`` and replay its steps for ``stage``."""
    steps = spec.steps_for(stage)
    dest = dest.absolute()
    env = builder_env()
    venv = Venv(dest, wheelhouse(spec), uv_binary(), env, spec.compile)
    _fresh_venv(dest, env)
    for step in steps:
        replay(venv, step)
    return BuiltScenario(spec.name, dest, venv.python, venv.wheelhouse, spec, stage)


def build_scenario(
    name: str,
    dest: Path,
    *,
    stage: str = "ready",
    params: Mapping[str, int] | None = None,
) -> BuiltScenario:
    """Build the shipped scenario ``name`` (``params`` for generated ones) into ``dest``."""
    return build_spec(load_scenario(name, params), dest, stage=stage)
