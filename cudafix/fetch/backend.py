"""The installers cudafix drives: uv (bundled) and pip, behind one ``Backend`` protocol.

Builds their command lines (the one place an installer's argv is written); the
transaction runs them on the environment, staging and resolving on scratch directories.
Every command ends its options with ``--`` before the names, pins or wheel paths, and
passes option values joined (``--find-links=DIR``): no value from a plan, a RECORD or a
directory listing can ever be read as an option.
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
        args.append(f"--find-links={link}")
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
        return run([self._uv(), "pip", "uninstall", f"--python={self.python}", "--", *names])

    def reinstall(self, pins: Sequence[str]) -> Completed:
        return run(self.reinstall_argv(pins))

    def reinstall_argv(
        self, pins: Sequence[str], *, dry_run: bool = False, options: Sequence[str] = ()
    ) -> list[str]:
        """The reinstall command; ``dry_run`` asks uv only whether the wheels can be had;
        ``options`` go before the ``--`` that ends them (``--prefix=DIR`` for staging)."""
        index = _index_args(self.offline, self.find_links)
        argv = [self._uv(), "pip", "install", f"--python={self.python}"]
        return [
            *argv,
            "--reinstall",
            "--no-deps",
            *index,
            *(["--dry-run"] if dry_run else []),
            *options,
            "--",
            *pins,
        ]

    def stage_argv(self, pins: Sequence[str], prefix: str) -> list[str]:
        """Install ``pins`` under the empty directory ``prefix`` as uv lays out an environment
        (every ``.data`` scheme where the target's installs put it), for reading what they hold.

        Without ``--reinstall``: it implies ``--refresh``, and uv then unpacks a registry
        wheel into its cache anew on every call (a GB per dry run for cuDNN). Nothing is
        installed under ``prefix`` yet, so nothing would be skipped without it.
        """
        index = _index_args(self.offline, self.find_links)
        argv = [self._uv(), "pip", "install", f"--python={self.python}", "--no-deps"]
        return [*argv, *index, f"--prefix={prefix}", "--", *pins]


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
        return [sys.executable, "-m", "pip", f"--python={self.python}"]

    def uninstall(self, names: Sequence[str]) -> Completed:
        return run([*self._pip(), "uninstall", "-y", "--", *names])

    def reinstall(self, pins: Sequence[str]) -> Completed:
        index = [a for a in _index_args(self.offline, self.find_links) if a != "--offline"]
        index += ["--no-index"] if self.offline and "--no-index" not in index else []
        flags = ["--force-reinstall", "--no-deps", "--no-compile", "--disable-pip-version-check"]
        return run([*self._pip(), "install", *flags, *index, "--", *pins])


def make_backend(
    kind: BackendName, python: Path, *, offline: bool = False, find_links: Sequence[str] = ()
) -> Backend:
    """The backend a plan asks for (``plan.options.backend``)."""
    if kind == "pip":
        return PipBackend(python, offline, tuple(find_links))
    return UvBackend(python, offline, tuple(find_links))
