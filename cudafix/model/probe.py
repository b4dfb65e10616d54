"""What a probe is and what it gives: the values a plan carries, a transaction runs and reports.

One home for the concept: what a plan carries (:class:`Probes`, :class:`RunTimeProbe`),
what a transaction runs (:class:`ProbeSpec`, derived from a plan by
:func:`cudafix.plan.probes.probe_spec` or built by a flow) and what each run gives
(:class:`ProbeResult`). Running them is ``tx/probe.py``'s; a script's ``[probes]`` table is
parsed in ``plan/script.py`` into :class:`Probes`.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, model_validator

from cudafix.model.transaction import DEFAULT_PROBE_TIMEOUT


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# -- what a plan carries (saved in plan files) -----------------------------------------------


class RunTimeProbe(_Frozen):
    """A framework object's run-time load, exercised after applying: the soname dlopen()ed
    through the object's own RPATH/RUNPATH, or the library loaded by its full path."""

    object: str
    """EnvPath of the framework object that loads it."""
    need: str
    """A soname, or the EnvPath of a library the framework loads by full path."""
    framework: str
    """The distribution owning ``object`` (for messages)."""
    search: list[str] = Field(default_factory=list)
    """For a soname: the object's RPATH then RUNPATH, expanded (``$ORIGIN``), in the order
    ld.so tries them; the probe loads the first copy there, else asks the system loader."""


class ExpectProbe(_Frozen):
    """Python code or a shell command whose output must contain ``output``."""

    python: str | None = None
    command: str | None = None
    output: str

    @model_validator(mode="after")
    def _one_source(self) -> ExpectProbe:
        if (self.python is None) == (self.command is None):
            raise ValueError("an expect probe needs exactly one of python, command")
        return self


class Probes(_Frozen):
    """Probes the plan carries (a cleanup script's ``[probes]``), run after applying, before
    commit; any failure rolls everything back."""

    imports: list[str] = Field(default_factory=list)
    python: list[str] = Field(default_factory=list)
    """Python snippets run by the target interpreter; each must exit 0."""
    commands: list[str] = Field(default_factory=list)
    """Shell commands run with the environment's bin/ first on PATH; each must exit 0."""
    expect: list[ExpectProbe] = Field(default_factory=list)
    auto: bool = True
    """Also run the import/dlopen probes the planner chose (probe_modules, probe_libraries)."""
    timeout: float | None = Field(default=None, gt=0)
    """Seconds per probe; None: the caller's default."""


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
