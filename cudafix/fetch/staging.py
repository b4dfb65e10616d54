"""Fetch the wheels a plan reinstalls or installs, outside the environment, before the lock.

Why: a reinstall of ``name==version`` assumes the wheel uv will fetch holds the files the
installed RECORD lists, but an index may serve another build under the same version (a
local rebuild, a mirror, a wheelhouse). Staging installs the pins into a scratch directory
with the same uv, interpreter and wheel sources the transaction will use, and reads what
landed; the planner then compares (:func:`cudafix.plan.staging.wheel_differences`) before
anything changes, so a plan that passes is a plan that commits. The scratch directory is
deleted after. This room runs uv and writes only to scratch directories; the planner
receives what it found as data (:class:`Staging`).
"""

from __future__ import annotations

import os
import posixpath
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cudafix.env.distinfo import CoreMetadata, parse_metadata
from cudafix.env.inventory import derive_top_level
from cudafix.env.record import Refusal, parse_record, resolve_record_path
from cudafix.fetch.backend import UvBackend
from cudafix.linker.elf import ElfInfo
from cudafix.linker.elfindex import read_elf_nofollow
from cudafix.model.names import (
    DistName,
    EnvPath,
    is_so_name,
    normalize_name,
    split_dist_info_name,
)
from cudafix.model.sources import Sources
from cudafix.process import run

STAGE_TIMEOUT = 1800.0
"""Seconds one staging install may take (a CUDA wheel is GBs on a slow link)."""

Pin = tuple[DistName, str]


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


def describe_sources(sources: Sources, environ: Mapping[str, str] = os.environ) -> str:
    """Where uv fetches from under ``sources``, in words a user can act on."""
    links = ", ".join(sources.find_links)
    if sources.offline:
        return f"find-links {links} or uv's cache (offline)" if links else "uv's cache (offline)"
    index = (
        environ.get("UV_DEFAULT_INDEX") or environ.get("UV_INDEX_URL") or "https://pypi.org/simple"
    )
    return f"find-links {links}, then the index {index}" if links else f"the index {index}"


def stage(python: Path, pins: Sequence[Pin], sources: Sources, site_packages: EnvPath) -> Staging:
    """Install ``pins`` with ``--target`` into a scratch directory and read what landed.

    One uv call for all pins; when it fails, each pin again alone, so a problem is
    attributed to the wheel that has it.
    """
    where = describe_sources(sources)
    if not pins:
        return Staging(fetched=True, source=where)
    uv = UvBackend(python, sources.offline, sources.find_links)
    wheels, problems = _stage_together(uv, pins, site_packages)
    if problems and len(pins) > 1:
        wheels, problems = {}, {}
        for pin in pins:
            one, bad = _stage_together(uv, [pin], site_packages)
            wheels.update(one)
            problems.update(bad)
    return Staging(fetched=True, wheels=wheels, problems=problems, source=where)


def _stage_together(
    uv: UvBackend, pins: Sequence[Pin], site: EnvPath
) -> tuple[dict[Pin, StagedWheel], dict[Pin, str]]:
    texts = [f"{n}=={v}" for n, v in pins]
    with tempfile.TemporaryDirectory(prefix="cudafix-stage-") as tmp:
        done = run(uv.stage_argv(texts, tmp), timeout=STAGE_TIMEOUT)
        if done.returncode != 0:
            lines = [ln.strip() for ln in done.stderr.splitlines() if ln.strip()]
            said = lines[-1] if lines else f"uv exited with status {done.returncode}"
            return {}, {pin: said for pin in pins}
        found = {w.name: w for w in _read_staged(Path(tmp), site)}
    wheels: dict[Pin, StagedWheel] = {}
    problems: dict[Pin, str] = {}
    for name, version in pins:
        wheel = found.get(name)
        if wheel is None:
            problems[(name, version)] = "uv installed no distribution of that name"
        else:
            wheels[(name, version)] = wheel
    return wheels, problems


def _read_staged(root: Path, site: EnvPath) -> list[StagedWheel]:
    out = []
    for info in sorted(root.glob("*.dist-info")):
        split = split_dist_info_name(info.name)
        if split is None or not (info / "RECORD").is_file():
            continue
        record = parse_record((info / "RECORD").read_text(encoding="utf-8"))
        files: dict[EnvPath, str | None] = {}
        elf: dict[EnvPath, ElfInfo] = {}
        for entry in record.entries:
            path = _landing(site, entry.path)
            if path is None:
                continue
            files[path] = entry.sha256
            local = posixpath.normpath(entry.path)
            if is_so_name(local) and not local.startswith("../"):
                verdict = read_elf_nofollow(root / local)
                if isinstance(verdict, ElfInfo):
                    elf[path] = verdict
        meta = _metadata(info / "METADATA")
        top = info / "top_level.txt"
        tops = (
            tuple(t for t in top.read_text(encoding="utf-8").split() if t)
            if top.is_file()
            else derive_top_level(e.path for e in record.entries)
        )
        out.append(
            StagedWheel(
                name=normalize_name(meta.name or split[0]),
                version=meta.version or split[1],
                files=files,
                dist_info=EnvPath(f"{site}/{info.name}"),
                requires=meta.requires,
                top_level=tops,
                elf=elf,
            )
        )
    return out


def _metadata(path: Path) -> CoreMetadata:
    return parse_metadata(path.read_text(encoding="utf-8")) if path.is_file() else CoreMetadata()


def _landing(site: EnvPath, row: str) -> EnvPath | None:
    """Where a ``--target`` RECORD row lands in the real environment (scripts go to bin/)."""
    if row.startswith("bin/"):
        return EnvPath(posixpath.normpath(row))
    resolved = resolve_record_path(site, row)
    return None if isinstance(resolved, Refusal) else resolved
