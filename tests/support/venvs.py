"""Real venvs for the interpreter running the tests, made and changed with the real uv binary.

Everything runs offline from a local wheelhouse; ``cache`` gives uv a private cache (a
session-scoped one makes repeated installs cheap), ``None`` uses uv's default.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import uv

from cudafix.env.memo.stats import RACY_NS
from scenarios import BuiltScenario, build_spec
from scenarios.spec import Scenario

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

UV = uv.find_uv_bin()

ScenarioFactory = Callable[..., BuiltScenario]
"""The ``scenario`` fixture's type: ``scenario(name, stage="ready", params=None)``."""


def uv_env(cache: Path | None = None) -> dict[str, str]:
    """uv's environment in tests: offline, no user config, no progress, no outer venv."""
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env.update(UV_NO_CONFIG="1", UV_NO_PROGRESS="1", UV_OFFLINE="1")
    if cache is not None:
        env["UV_CACHE_DIR"] = str(cache)
    return env


def uv_run(*args: str | Path, cache: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run uv; fail the test loudly, with uv's stderr, on a non-zero exit."""
    argv = [UV, *map(str, args)]
    proc = subprocess.run(argv, capture_output=True, text=True, env=uv_env(cache), check=False)
    assert proc.returncode == 0, f"{argv} failed:\n{proc.stderr}"
    return proc


def new_venv(prefix: Path, *, cache: Path | None = None) -> Path:
    """An empty venv (no seed packages) at ``prefix``; returns ``prefix``."""
    uv_run("venv", "-q", "--python", sys.executable, prefix, cache=cache)
    return prefix


def install(
    prefix: Path, wheelhouse: Path, *names: str, cache: Path | None = None, deps: bool = True
) -> None:
    """``uv pip install --offline --no-index --find-links wheelhouse names`` into ``prefix``."""
    no_deps = () if deps else ("--no-deps",)
    uv_run(
        "pip", "install", "-q", "--offline", "--no-index", "--find-links", wheelhouse, *no_deps,
        "--python", prefix / "bin" / "python", *names, cache=cache,
    )  # fmt: skip


def uninstall(prefix: Path, *names: str, cache: Path | None = None) -> None:
    uv_run("pip", "uninstall", "--python", prefix / "bin" / "python", *names, cache=cache)


def site_dir(prefix: Path) -> Path:
    """The venv's one ``lib/python3.*/site-packages``, as an absolute path."""
    (site,) = prefix.glob("lib/python3.*/site-packages")
    return site


def site_rel(prefix: Path) -> str:
    """The same directory as an EnvPath (relative to ``prefix``), as plans spell it."""
    return site_dir(prefix).relative_to(prefix).as_posix()


def below_site(path: str) -> str:
    """A path as it reads below ``site-packages/`` (the whole path when it is not there)."""
    return path.split("site-packages/", 1)[-1]


def try_import(python: Path, module: str) -> subprocess.CompletedProcess[str]:
    """``import module`` in the venv's own interpreter: the real loader's verdict."""
    return subprocess.run([str(python), "-c", f"import {module}"], capture_output=True, text=True)


def settle() -> None:
    """Let every path age past the racy window, so the next run may remember its answer."""
    time.sleep(RACY_NS / 1e9 + 0.1)


def venv_with(prefix: Path, wheelhouse: Path, *names: str, cache: Path | None = None) -> Path:
    """A new venv at ``prefix`` holding ``names`` alone (no dependencies); returns ``prefix``."""
    new_venv(prefix, cache=cache)
    install(prefix, wheelhouse, *names, cache=cache, deps=False)
    return prefix


def build_toml(text: str, dest: Path) -> BuiltScenario:
    """A scenario written in a test as TOML (``scenarios/README.md``), built into ``dest``."""
    return build_spec(Scenario.model_validate(tomllib.loads(text)), dest)
