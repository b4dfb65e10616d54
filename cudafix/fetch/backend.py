"""The installers cudafix drives: uv (bundled) and pip, behind one ``Backend`` protocol.

Builds their command lines (the one place an installer's argv is written); the
transaction runs them on the environment, staging and resolving on scratch directories.
Every command ends its options with ``--`` before the names, pins or wheel paths, and
passes option values joined (``--find-links=DIR``): no value from a plan, a RECORD or a
directory listing can ever be read as an option.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from cudafix.model.names import BackendName
from cudafix.model.sources import Sources
from cudafix.process import Completed, run


class Backend(Protocol):
    """What the transaction asks of an installer (pypa/build's ``_EnvBackend``)."""

    def uninstall(self, names: Sequence[str]) -> Completed:
        """Uninstall distributions by name."""
        ...

    def reinstall(self, pins: Sequence[str]) -> Completed:
        """Reinstall ``name==version`` pins, without dependencies, over what is there."""
        ...


@dataclass(frozen=True)
class UvBackend:
    """The bundled uv (``uv.find_uv_bin()``), driving the target interpreter."""

    python: Path
    sources: Sources = Sources()  # noqa: RUF009 - a frozen value
    uv: str = ""
    fresh: bool = False
    """Bypass uv's cache (``--no-cache``): for wheel files cudafix copied and checked itself,
    which uv must unpack from those very bytes, never from an earlier build it cached under
    the same name and version."""

    def _uv(self) -> str:
        if self.uv:
            return self.uv
        import uv  # the bundled binary, located lazily

        return uv.find_uv_bin()

    def uninstall(self, names: Sequence[str]) -> Completed:
        return run([self._uv(), "pip", "uninstall", f"--python={self.python}", "--", *names])

    def reinstall(self, pins: Sequence[str]) -> Completed:
        """Reinstall from uv's cache alone first (``--offline``), online only when that fails.

        ``--reinstall`` implies ``--refresh``: online, uv fetches a registry wheel again and
        unpacks another copy into its cache (a GB per apply for cuDNN). Staging fetched the
        very wheel moments before, and offline uv takes the cached index page and archive as
        they are; a saved plan whose wheel the cache no longer holds falls back to fetching
        (uv fails offline while resolving, before it changes anything).
        """
        if self.sources.offline:
            return run(self.reinstall_argv(pins))
        cached = run(self.reinstall_argv(pins, options=["--offline"]))
        return cached if cached.returncode == 0 else run(self.reinstall_argv(pins))

    def reinstall_argv(
        self, pins: Sequence[str], *, dry_run: bool = False, options: Sequence[str] = ()
    ) -> list[str]:
        """The reinstall command; ``dry_run`` asks uv only whether the wheels can be had;
        ``options`` go before the ``--`` that ends them (``--prefix=DIR`` for staging)."""
        index = self.sources.installer_args()
        argv = [self._uv(), "pip", "install", f"--python={self.python}", *self._cache()]
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
        index = self.sources.installer_args()
        argv = [self._uv(), "pip", "install", f"--python={self.python}", "--no-deps"]
        return [*argv, *self._cache(), *index, f"--prefix={prefix}", "--", *pins]

    def _cache(self) -> list[str]:
        return ["--no-cache"] if self.fresh else []


def bundled_uv() -> str | None:
    """The uv installed with cudafix (the ``uv`` package's binary), or None.

    ``find_uv_bin`` looks beside cudafix's own interpreter first: in a ``uv tool install``
    or ``pipx`` venv that is the tool's ``bin/``, which is on no ``PATH`` of the target's.
    """
    try:
        import uv  # located lazily
    except ImportError:
        return None
    try:
        return uv.find_uv_bin()
    except FileNotFoundError:
        return None


def uv_path_dirs() -> tuple[str, ...]:
    """Where a wrapped command finds the bundled uv when its ``PATH`` has none."""
    found = bundled_uv()
    return (str(Path(found).parent),) if found else ()


def find_pip(python: Path, path: str | None = None) -> list[str] | None:
    """A pip that can act on ``python``'s environment, or None.

    The target's own; else cudafix's interpreter's pip aimed at it with ``--python`` (pip >=
    22.3); else a ``pip`` on ``PATH`` aimed the same way. uv-made venvs often have no pip,
    and neither has cudafix when ``uv tool install`` installed it.
    """
    candidates: list[list[str]] = [[str(python), "-m", "pip"]]
    candidates.append([sys.executable, "-m", "pip", f"--python={python}"])
    for name in ("pip", "pip3"):
        found = shutil.which(name, path=path if path is not None else os.environ.get("PATH"))
        if found:
            candidates.append([found, f"--python={python}"])
    for argv in candidates:
        if run([*argv, "--version"], timeout=60).returncode == 0:
            return argv
    return None


@dataclass(frozen=True)
class PipBackend:
    """pip, as :func:`find_pip` finds one for the target."""

    python: Path
    sources: Sources = Sources()  # noqa: RUF009 - a frozen value

    def _pip(self) -> list[str]:
        return find_pip(self.python) or [str(self.python), "-m", "pip"]

    def uninstall(self, names: Sequence[str]) -> Completed:
        return run([*self._pip(), "uninstall", "-y", "--", *names])

    def reinstall(self, pins: Sequence[str]) -> Completed:
        index = self.sources.installer_args(pip=True)
        flags = ["--force-reinstall", "--no-deps", "--no-compile", "--disable-pip-version-check"]
        return run([*self._pip(), "install", *flags, *index, "--", *pins])


def make_backend(
    kind: BackendName,
    python: Path,
    sources: Sources = Sources(),  # noqa: B008
    *,
    fresh: bool = False,
) -> Backend:
    """The backend a plan asks for (``plan.options.backend``), fetching from ``sources``;
    ``fresh``: never from uv's cache (pip keeps no cache of local wheel files)."""
    if kind == "pip":
        return PipBackend(python, sources)
    return UvBackend(python, sources, fresh=fresh)
