"""What a user asked a flow for, as typed values: the target, the facts, a run, a request.

The CLI parses its options into these and hands them to one flow (:mod:`cudafix.flows`,
through :mod:`cudafix.app`). They live below both, so neither imports the other for them,
and they are cheap: ``--help`` builds none of the planner's types to describe them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cudafix.model.transaction import DEFAULT_LOCK_TIMEOUT, DEFAULT_PROBE_TIMEOUT


@dataclass(frozen=True)
class TargetArgs:
    """Which environment: ``--venv`` or ``--python``, else ``$VIRTUAL_ENV``, else ``./.venv``."""

    venv: str | None = None
    python: str | None = None


@dataclass(frozen=True)
class FactArgs:
    """What shapes the facts read from the target."""

    target: TargetArgs = TargetArgs()
    dlopen_tables: tuple[Path, ...] = ()


@dataclass(frozen=True)
class LiveArgs:
    """How ``run`` runs its command: how long it may take, where its output goes."""

    timeout: float | None = None
    echo: tuple[int, int] = (1, 2)
    """File descriptors the command's stdout and stderr are copied to as they come."""


@dataclass(frozen=True)
class RunArgs:
    """How an approved plan is applied: probes, waiting for the lock, overriding a refusal."""

    auto_probes: bool = True
    probe_code: tuple[str, ...] = ()
    probe_commands: tuple[str, ...] = ()
    probe_timeout: float = DEFAULT_PROBE_TIMEOUT
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT
    force: bool = False
    command: tuple[str, ...] = ()
    """The command line, recorded in the journal for ``history``."""


@dataclass(frozen=True)
class RemoveArgs:
    """What ``cudafix remove`` was asked to remove, and how far it may go."""

    selectors: tuple[str, ...]
    exclude: tuple[str, ...] = ()
    repair: bool = False
    keep_shared: bool = False
    allow_broken_requirements: bool = False


@dataclass(frozen=True)
class InstallArgs:
    """What ``cudafix install`` was asked to install (requirement specifiers, as for uv)."""

    specs: tuple[str, ...]
    allow_broken_requirements: bool = False
