"""``tests/txhelp.py``'s former signatures over tests.support (deprecated: import the
``tests.support`` modules in new tests)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tests.support import venvs
from tests.support.tx import (
    A_BYTES,
    B_BYTES,
    installed_paths,
    make_plan,
    remove_pa_plan,
    shared_pair,
)
from tests.support.venvs import UV, uv_env
from tests.support.wheels import make_wheel

__all__ = [
    "A_BYTES", "B_BYTES", "UV", "install", "installed_paths", "make_plan", "make_venv",
    "make_wheel", "remove_pa_plan", "shared_pair", "site_packages", "uv_env",
]  # fmt: skip


def make_venv(prefix: Path, wheelhouse: Path, names: Sequence[str]) -> Path:
    venvs.new_venv(prefix)
    if names:
        install(prefix, wheelhouse, names)
    return prefix


def install(prefix: Path, wheelhouse: Path, names: Sequence[str]) -> None:
    venvs.install(prefix, wheelhouse, *names, deps=False)


def site_packages(prefix: Path) -> str:
    return venvs.site_rel(prefix)
