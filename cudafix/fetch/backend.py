"""The installers cudafix drives: uv (bundled) and pip, behind one ``Backend`` protocol.

Builds their command lines (the one place an installer's argv is written); the
transaction runs them on the environment, staging and resolving on scratch directories.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from cudafix.model.names import BackendName
from cudafix.process import Completed, run


class Backend(Protocol):
    """What the transaction asks of an installer (pypa/build's ``_EnvBackend``)."""

    def uninstall(self, names: Sequence[str]) -> Completed:
        """Uninstall distributions by name."""
        ...

    def reinstall(self, pins: Sequence[str]) -> Completed:
        """Reinstall ``name==version`` pins, without dependencies, over what is there."""
        ...


def _index_args(offline: bool, find_links: Sequence[str]) -> list[str]:
    args = ["--offline"] if offline else []
    for link in find_links:
        args += ["--find-links", link]
    if offline and find_links:
        args.append("--no-index")
    return args


@dataclass(frozen=True)
class UvBackend:
    """The bundled uv (``uv.find_uv_bin()``), driving the target interpreter."""

    python: Path
    offline: bool = False
    find_links: tuple[str, ...] = ()
    uv: str = ""

    def _uv(self) -> str:
        if self.uv:
            return self.uv
        import uv  # the bundled binary, located lazily

        return uv.find_uv_bin()

    def uninstall(self, names: Sequence[str]) -> Completed:
        return run([self._uv(), "pip", "uninstall", "--python", self.python, *names])

    def reinstall(self, pins: Sequence[str]) -> Completed:
        return run(self.reinstall_argv(pins))

    def reinstall_argv(self, pins: Sequence[str], *, dry_run: bool = False) -> list[str]:
        """The reinstall command; ``dry_run`` asks uv only whether the wheels can be had."""
        index = _index_args(self.offline, self.find_links)
        argv = [self._uv(), "pip", "install", "--python", str(self.python)]
        return [
            *argv,
            "--reinstall",
            "--no-deps",
            *index,
            *(["--dry-run"] if dry_run else []),
            *pins,
        ]

    def stage_argv(self, pins: Sequence[str], target: str) -> list[str]:
        """Install ``pins`` into the empty directory ``target``, for reading what they hold.

        Without ``--reinstall``: it implies ``--refresh``, and uv then unpacks a registry
        wheel into its cache anew on every call (a GB per dry run for cuDNN). Nothing is
        installed in ``target`` yet, so nothing would be skipped without it.
        """
        index = _index_args(self.offline, self.find_links)
        argv = [self._uv(), "pip", "install", "--python", str(self.python)]
        return [*argv, "--no-deps", *index, "--target", target, *pins]


@dataclass(frozen=True)
class PipBackend:
    """pip: the target's own when it has one, else cudafix's pip aimed at it (``--python``).

    uv-made venvs often have no pip; pip >= 22.3 can act on another interpreter's
    environment, so the backend stays usable there.
    """

    python: Path
    offline: bool = False
    find_links: tuple[str, ...] = ()

    def _pip(self) -> list[str | Path]:
        own = run([self.python, "-m", "pip", "--version"], timeout=60)
        if own.returncode == 0:
            return [self.python, "-m", "pip"]
        return [sys.executable, "-m", "pip", "--python", self.python]

    def uninstall(self, names: Sequence[str]) -> Completed:
        return run([*self._pip(), "uninstall", "-y", *names])

    def reinstall(self, pins: Sequence[str]) -> Completed:
        index = [a for a in _index_args(self.offline, self.find_links) if a != "--offline"]
        index += ["--no-index"] if self.offline and "--no-index" not in index else []
        flags = ["--force-reinstall", "--no-deps", "--no-compile", "--disable-pip-version-check"]
        return run([*self._pip(), "install", *flags, *index, *pins])


def make_backend(
    kind: BackendName, python: Path, *, offline: bool = False, find_links: Sequence[str] = ()
) -> Backend:
    """The backend a plan asks for (``plan.options.backend``)."""
    if kind == "pip":
        return PipBackend(python, offline, tuple(find_links))
    return UvBackend(python, offline, tuple(find_links))
