"""``tests/wheelhelp.py``'s former signatures over tests.support (deprecated: import the
``tests.support`` modules in new tests)."""

from __future__ import annotations

from pathlib import Path

from tests.support import venvs
from tests.support.venvs import UV, uninstall, uv_run
from tests.support.wheels import make_wheel, record_hash

__all__ = [
    "UV", "install", "make_venv", "make_wheel", "record_hash", "site_packages", "uninstall",
    "uv_run",
]  # fmt: skip


def make_venv(path: Path, cache: Path) -> Path:
    return venvs.new_venv(path, cache=cache)


def install(venv: Path, wheelhouse: Path, *names: str, cache: Path) -> None:
    venvs.install(venv, wheelhouse, *names, cache=cache)


def site_packages(venv: Path) -> Path:
    return venvs.site_dir(venv)
