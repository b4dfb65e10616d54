"""What to probe after a change: a value the planner derives and the transaction runs."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_PROBE_TIMEOUT = 60.0
"""Seconds each probe may run before it counts as failed (``--probe-timeout``)."""


@dataclass(frozen=True)
class ProbeSpec:
    """What to probe after applying a plan."""

    modules: tuple[str, ...] = ()
    """Top-level modules to import."""
    libraries: tuple[str, ...] = ()
    """ELF paths to ``ctypes.CDLL``."""
    code: tuple[str, ...] = ()
    """User Python snippets (``--probe``)."""
    commands: tuple[str, ...] = ()
    """User shell commands (``--probe-cmd``), run with the environment's bin/ first on PATH."""
    timeout: float = DEFAULT_PROBE_TIMEOUT
    run_time: tuple[tuple[str, str, tuple[str, ...]], ...] = ()
    """A framework's run-time loads: (label, soname or absolute path, the loading object's
    own search dirs). ``import`` loads none of them on a CPU host."""
