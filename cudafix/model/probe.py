"""What a probe is and what it gives: the values a plan carries, a transaction runs and reports.

One home for the concept: what a plan carries (:class:`Probes`, :class:`RunTimeProbe`),
what a transaction runs (:class:`ProbeSpec`, derived from a plan by :func:`probe_spec` or
built by a flow) and what each run gives (:class:`ProbeResult`). Running them is
``tx/probe.py``'s; a script's ``[probes]`` table is :class:`Probes` itself, validated by
``plan/script.py`` in strict mode (no coercion there: ``auto = "yes"`` is an error).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, model_validator

from cudafix.model.transaction import DEFAULT_PROBE_TIMEOUT

if TYPE_CHECKING:
    from cudafix.model.plan import Plan


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


# -- from a plan to what runs -----------------------------------------------------------------


def probe_spec(
    plan: Plan,
    *,
    auto: bool = True,
    code: Sequence[str] = (),
    commands: Sequence[str] = (),
    timeout: float = DEFAULT_PROBE_TIMEOUT,
) -> ProbeSpec:
    """The probes to run: the planner's (unless disabled), the plan's own, and the CLI's."""
    p = plan.probes
    use_auto = auto and p.auto
    prefix = Path(plan.target.prefix)
    modules = [*(plan.probe_modules if use_auto else ()), *p.imports]
    return ProbeSpec(
        modules=tuple(dict.fromkeys(modules)),
        libraries=tuple(str(prefix / lib) for lib in plan.probe_libraries) if use_auto else (),
        run_time=tuple(
            (
                f"{r.need} by {r.object}",
                _absolute(prefix, r.need),
                tuple(_absolute(prefix, d) for d in r.search),
            )
            for r in (plan.probe_run_time if use_auto else ())
        ),
        code=(*p.python, *(expect_code(e) for e in p.expect), *code),
        commands=(*p.commands, *commands),
        timeout=p.timeout or timeout,
    )


def _absolute(prefix: Path, path: str) -> str:
    """An EnvPath (or soname) of the plan as the probe needs it: absolute, sonames as they are."""
    return str(prefix / path) if "/" in path and not path.startswith("/") else path


_EXPECT = """\
# cudafix expect-probe: {label}
import subprocess, sys
want, label = {want!r}, {label!r}
p = subprocess.run({argv}, capture_output=True, text=True, errors="replace")
out = p.stdout + p.stderr
sys.stdout.write(p.stdout); sys.stderr.write(p.stderr)
if p.returncode:
    sys.exit(p.returncode)
if want not in out:
    sys.exit("expected " + repr(want) + " in the output of " + label + ", got " + repr(out[-200:]))
"""


def expect_code(expect: ExpectProbe) -> str:
    """Python, run by the target interpreter, that checks a probe's output for a substring."""
    if expect.python is not None:
        argv = f"[sys.executable, '-B', '-s', '-c', {expect.python!r}]"
        label = f"python {expect.python[:40]!r}"
    else:
        argv = f"['/bin/sh', '-c', {expect.command!r}]"
        label = f"command {str(expect.command)[:40]!r}"
    return _EXPECT.format(argv=argv, want=expect.output, label=label)
