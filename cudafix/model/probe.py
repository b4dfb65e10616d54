"""What a transaction probes and what each probe gives: the values a run reports.

What a transaction runs (:class:`ProbeSpec`, derived from a plan by
:func:`cudafix.plan.probes.probe_spec` or built by a flow) and what each run gives
(:class:`ProbeResult`). Running them is ``tx/probe.py``'s. The probes a plan carries
(:class:`~cudafix.model.plan.Probes`) are the plan's, with its other saved values: a
transaction that runs no plan (``run``, ``undo``) loads no model of a plan file.
"""

from __future__ import annotations

from dataclasses import dataclass

from cudafix.model.transaction import DEFAULT_PROBE_TIMEOUT

# -- what a transaction runs, and what it gets ------------------------------------------------


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


@dataclass(frozen=True)
class ProbeResult:
    """One probe's outcome."""

    label: str
    ok: bool
    error: str
    note: str = ""
    """Why a passing probe is not a clean pass (a load skipped for a driver need)."""
