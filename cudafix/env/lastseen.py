"""Which distribution provided each needed library at the last reading of an environment.

pip and uv forget what they uninstalled; so a library some object needs that a plain
``pip uninstall`` took would be nameless to the next reading. Each reading remembers, per
soname some object of the environment needs, the files that provided it and the
distribution and version that owned them (``<venv>/.cudafix/cache/last-seen.json``); the
next one compares. A soname still needed and provided nowhere keeps its entry until
something provides it again or nothing needs it, so a second reading still knows.

Deleting the file is safe: it only forgets what went before the next reading.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from cudafix.env.statedir import StateDir, load_cache, save_cache
from cudafix.model.names import DistName, EnvPath, Soname, is_env_path, is_so_name

FORMAT = "cudafix-last-seen"
VERSION = 1


@dataclass(frozen=True, order=True)
class Seen:
    """One file that provided a soname, and the distribution that owned it then."""

    path: EnvPath
    distribution: DistName
    version: str


Memory = Mapping[Soname, tuple[Seen, ...]]
"""Soname -> the files that provided it (sorted)."""


def memory_path(prefix: Path) -> Path:
    return StateDir(prefix).cache / "last-seen.json"


def load(prefix: Path) -> dict[Soname, tuple[Seen, ...]]:
    """What the last reading remembered (empty when none, or unreadable)."""
    data = load_cache(memory_path(prefix), FORMAT, VERSION) or {}
    rows = data.get("libraries", {})
    out: dict[Soname, tuple[Seen, ...]] = {}
    if not isinstance(rows, dict):
        return out
    for soname, seen in rows.items():
        if not (isinstance(soname, str) and is_so_name(soname) and isinstance(seen, list)):
            continue
        kept = tuple(
            Seen(EnvPath(s[0]), DistName(s[1]), s[2])
            for s in seen
            if isinstance(s, list)
            and len(s) == 3
            and all(isinstance(v, str) and v for v in s)
            and is_env_path(s[0])
        )
        if kept:
            out[Soname(soname)] = kept
    return out


def save(prefix: Path, memory: Memory) -> bool:
    """Write ``memory`` under ``.cudafix/`` (False where cudafix may not write)."""
    rows = {s: [[e.path, e.distribution, e.version] for e in seen] for s, seen in memory.items()}
    return save_cache(
        memory_path(prefix), FORMAT, VERSION, {"libraries": dict(sorted(rows.items()))}
    )


def update(old: Memory, now: Memory, needed: Iterable[Soname]) -> dict[Soname, tuple[Seen, ...]]:
    """The memory after a reading: what provides each ``needed`` soname ``now``, and what
    provided a still-needed soname that nothing provides now (``old``'s entry)."""
    wanted = set(needed)
    out = {s: tuple(sorted(seen)) for s, seen in now.items() if s in wanted and seen}
    for soname, seen in old.items():
        if soname in wanted and soname not in out:
            out[soname] = seen
    return dict(sorted(out.items()))
