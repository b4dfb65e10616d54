"""What a staging install found, as values: the wheels it unpacked and what it could not get.

Apart from :mod:`cudafix.fetch.staging`, which runs uv to find them, so the planner and
a reading that fetches nothing (``doctor``, a removal's dry run) hold these values without
importing what runs a subprocess.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cudafix.env.inventory import is_bytecode
from cudafix.linker.elf import ElfInfo
from cudafix.model.names import DistName, EnvPath

Pin = tuple[DistName, str]
"""An exact version to install or reinstall, ``name==version`` as (name, version)."""


@dataclass(frozen=True)
class StagedWheel:
    """A wheel as a staging install unpacked it."""

    name: DistName
    version: str
    files: Mapping[EnvPath, str | None]
    """Where each RECORD row lands in the environment, with its sha256 (None: unhashed)."""
    dist_info: EnvPath
    requires: tuple[str, ...]
    top_level: tuple[str, ...]
    elf: Mapping[EnvPath, ElfInfo] = field(default_factory=dict)
    """The wheel's shared objects and extensions, read where they landed: the after-state's
    libraries, for simulating an install with the loader."""
    size: int = 0
    """Bytes the wheel installs (its RECORD's sizes): what fetching it meant, for progress."""
    wheel: Path | None = None
    """The local wheel file that was staged (a ``--find-links`` directory's), if known."""
    wheel_sha256: str | None = None
    """Hex sha256 of ``wheel`` as staged."""

    @property
    def version_pin(self) -> Pin:
        return (self.name, self.version)


@dataclass(frozen=True)
class Staging:
    """What fetching the plan's wheels found, as data for the planner."""

    fetched: bool = False
    """False when nothing was fetched (``--no-fetch``): the planner cannot check wheels."""
    wheels: Mapping[Pin, StagedWheel] = field(default_factory=dict)
    problems: Mapping[Pin, str] = field(default_factory=dict)
    """Pins that could not be had, with uv's last word."""
    source: str = ""
    """Where uv looked, for messages: the find-links directories, the index, or its cache."""
    recorded: Mapping[DistName, str] = field(default_factory=dict)
    """Where installed distributions being reinstalled came from, when their
    ``direct_url.json`` says: a source the user can add when the index has no such wheel."""


def is_payload(path: str, dist_info: str) -> bool:
    """A RECORD row two installs of one wheel agree on: the wheel's own files.

    Not bytecode (compiled at install, or not), scripts under ``bin/`` (generated from entry
    points) nor anything in the dist-info directory (installer files, the name's case).
    """
    return not (is_bytecode(path) or path.startswith("bin/") or path.startswith(dist_info + "/"))
