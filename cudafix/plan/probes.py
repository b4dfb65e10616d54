"""From a plan to the probes a transaction runs: the planner's, the plan's own, the CLI's.

Beside the planner because it reads a whole :class:`~cudafix.model.plan.Plan`; the values it
builds (:class:`~cudafix.model.probe.ProbeSpec`) live in :mod:`cudafix.model.probe`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from cudafix.model.probe import ProbeSpec
from cudafix.model.transaction import DEFAULT_PROBE_TIMEOUT

if TYPE_CHECKING:
    from cudafix.model.plan import ExpectProbe, Plan


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
