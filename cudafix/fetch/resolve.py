"""What uv would do for ``cudafix install SPEC...``: asked of uv itself, as data.

The one place an install is resolved: uv runs ``--dry-run`` against the target with the
plan's sources, and its report becomes a :class:`Resolution` the planner works on.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cudafix.fetch.backend import UvBackend
from cudafix.fetch.staged import Pin
from cudafix.model.errors import InputError
from cudafix.model.names import DistName, normalize_name
from cudafix.model.sources import Sources
from cudafix.process import run

RESOLVE_TIMEOUT = 600.0
"""Seconds uv may take to resolve (an index may be slow)."""


@dataclass(frozen=True)
class Resolution:
    """What ``uv pip install SPEC...`` would change in the target."""

    installs: tuple[Pin, ...]
    """Exact pins uv would install (new distributions, upgrades and downgrades)."""
    replaced: tuple[DistName, ...]
    """Installed distributions uv would uninstall first (the old side of an upgrade)."""


_CHANGE = re.compile(r"^ (?P<op>[+-]) (?P<name>[A-Za-z0-9._-]+)==(?P<version>\S+)$")


_EXACT = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*===?\s*(?P<version>[A-Za-z0-9.+!_-]+)")


def exact_pin(spec: str) -> Pin | None:
    """``name==1.2`` as a pin; None for anything looser (a range, a wildcard, a marker)."""
    m = _EXACT.fullmatch(spec.strip())
    return (normalize_name(m.group("name")), m.group("version")) if m else None


def parse_dry_run(text: str) -> Resolution:
    """uv's ``--dry-run`` report (`` + name==version`` / `` - name==version`` lines)."""
    installs: list[Pin] = []
    replaced: list[DistName] = []
    for line in text.splitlines():
        m = _CHANGE.match(line.rstrip())
        if m is None:
            continue
        name = normalize_name(m.group("name"))
        if m.group("op") == "+":
            installs.append((name, m.group("version")))
        else:
            replaced.append(name)
    return Resolution(tuple(installs), tuple(dict.fromkeys(replaced)))


def resolve(python: str, specs: Sequence[str], sources: Sources) -> Resolution:
    """Ask uv, against the target and with the plan's sources, what it would install.

    This and :func:`cudafix.fetch.staging.stage` are the whole of how an install is
    fetched: replace them together to stage differently.
    """
    uv = UvBackend(Path(python), sources)
    argv = [
        a for a in uv.reinstall_argv(specs, dry_run=True) if a not in ("--reinstall", "--no-deps")
    ]
    done = run(argv, timeout=RESOLVE_TIMEOUT)
    if done.returncode != 0:
        lines = [ln.strip() for ln in done.stderr.splitlines() if ln.strip()]
        cause = [ln for ln in lines if not ln.startswith("Using Python")]
        raise InputError(
            f"uv cannot resolve {' '.join(specs)}: {cause[0] if cause else 'no output'}",
            context=cause[1:4],
            hint="check the names and versions, and --find-links / --index-url / --offline",
        )
    return parse_dry_run(done.stderr + "\n" + done.stdout)
