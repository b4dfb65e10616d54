"""A frozen view of one environment: its distributions, their RECORDs, who owns which path.

Reading is done once, up front (``read_inventory``); everything after works on the value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cudafix.names import DistName, EnvPath


@dataclass(frozen=True)
class RecordEntry:
    """One line of a RECORD file, with its path made relative to the environment prefix."""

    path: EnvPath
    raw: str
    """The path exactly as written in RECORD (relative to its site-packages directory)."""
    sha256: str | None
    """urlsafe-base64, unpadded, as RECORD writes it."""
    size: int | None


@dataclass(frozen=True)
class UnsafeEntry:
    """A RECORD entry that points outside the environment: flagged, never acted on."""

    distribution: DistName
    raw: str
    reason: str


@dataclass(frozen=True)
class Distribution:
    """One installed ``*.dist-info``."""

    name: DistName
    version: str
    dist_info: EnvPath
    site_packages: EnvPath
    installer: str | None
    requires: tuple[str, ...]
    """Requires-Dist values, verbatim."""
    files: tuple[RecordEntry, ...]
    top_level: tuple[str, ...]
    """Importable top-level names (top_level.txt, or derived from RECORD)."""


@dataclass(frozen=True)
class Unmanaged:
    """An install cudafix will not plan for: ``*.egg-info`` or a dist-info without RECORD."""

    path: EnvPath
    name: str
    kind: str
    """``egg-info`` or ``no-record``."""


@dataclass(frozen=True)
class FileStat:
    """What ``lstat`` said about one path in the environment."""

    kind: str
    """``file``, ``symlink`` or ``other``."""
    size: int
    mode: int
    dev: int
    ino: int
    mtime_ns: int
    link_target: str | None = None


@dataclass(frozen=True)
class SharedPath:
    """A path two or more distributions claim, and whose bytes it holds."""

    path: EnvPath
    owners: tuple[DistName, ...]
    holder: DistName | None
    """The owner whose RECORD hash the bytes match; None when missing or nobody's."""
    missing: bool


@dataclass(frozen=True)
class Inventory:
    """Everything cudafix knows about an environment, read once."""

    prefix: Path
    python: Path | None
    site_packages: tuple[EnvPath, ...]
    distributions: Mapping[DistName, Distribution]
    unmanaged: tuple[Unmanaged, ...]
    unsafe: tuple[UnsafeEntry, ...]
    files: Mapping[EnvPath, FileStat]
    """Every non-directory path under the prefix (``.cudafix/`` excluded)."""
    owners: Mapping[EnvPath, tuple[DistName, ...]]
    """Ownership index: path -> distributions whose RECORD claims it."""
    shared: tuple[SharedPath, ...]
    missing: Mapping[DistName, tuple[EnvPath, ...]]
    """RECORD paths that do not exist on disk, per distribution."""
