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

import contextlib
import fcntl
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

from cudafix.env.distinfo import CoreMetadata, parse_metadata
from cudafix.env.reading import derive_top_level
from cudafix.env.record import Refusal, parse_record, resolve_record_path
from cudafix.faults import crash_point
from cudafix.fetch.backend import UvBackend
from cudafix.fetch.staged import Pin, StagedWheel, Staging, is_payload
from cudafix.fetch.wheelfile import candidates as _candidates
from cudafix.fetch.wheelfile import identify
from cudafix.linker.elf import ElfInfo
from cudafix.linker.elfindex import read_elf_nofollow
from cudafix.model.errors import EnvironmentFault
from cudafix.model.names import (
    EnvPath,
    is_so_name,
    normalize_name,
    split_dist_info_name,
)
from cudafix.model.sources import Sources
from cudafix.process import Completed, run, run_live

STAGE_TIMEOUT = 1800.0
"""Seconds one staging install may take (a CUDA wheel is GBs on a slow link)."""


def describe_sources(sources: Sources) -> str:
    """Where uv fetches from under ``sources``, in words a user can act on."""
    return ", then ".join(sources.described())


def stage(python: Path, pins: Sequence[Pin], sources: Sources, site_packages: EnvPath) -> Staging:
    """Install ``pins`` with ``--prefix`` into a scratch directory and read what landed.

    A pin with a wheel of its name and version in a local ``--find-links`` directory is
    staged from a private copy of that file, past uv's cache (:func:`_stage_local`): uv
    keeps what it unpacked under the file's name and version, and a rebuilt wheel (``pip
    wheel .`` after a change) would otherwise be judged by the earlier build's bytes. The
    rest are staged from the sources as given. One uv call per group; when it fails, each
    pin again alone, so a problem is attributed to the wheel that has it.
    """
    where = describe_sources(sources)
    if not pins:
        return Staging(fetched=True, source=where)
    uv = UvBackend(python, sources)
    local = [p for p in pins if any(_candidates(*p, sources.find_links))]
    wheels, problems = _stage_each(uv, local, site_packages, private=True)
    rest = [p for p in pins if p not in local or p in problems]  # no local file uv can use
    more, problems = _stage_each(uv, rest, site_packages, private=False)
    wheels.update(more)
    return Staging(fetched=True, wheels=wheels, problems=problems, source=where)


def _stage_each(
    uv: UvBackend, pins: Sequence[Pin], site: EnvPath, *, private: bool
) -> tuple[dict[Pin, StagedWheel], dict[Pin, str]]:
    if not pins:
        return {}, {}
    wheels, problems = _stage_together(uv, pins, site, private)
    if problems and len(pins) > 1:
        wheels, problems = {}, {}
        for pin in pins:
            one, bad = _stage_together(uv, [pin], site, private)
            wheels.update(one)
            problems.update(bad)
    return wheels, problems


def _stage_together(
    uv: UvBackend, pins: Sequence[Pin], site: EnvPath, private: bool = False
) -> tuple[dict[Pin, StagedWheel], dict[Pin, str]]:
    """Stage ``pins`` in one uv call with ``--prefix``: uv lays the files out as it would in
    the environment (site-packages, ``bin/``, ``include/``, ``share/``: every ``.data``
    scheme where the target's installs put it), so the RECORD rows read here are the ones
    the real install writes. ``private``: from copies of the local wheel files alone."""
    texts = [f"{n}=={v}" for n, v in pins]
    with scratch_dir() as tmp:
        prefix = tmp / "prefix"
        prefix.mkdir()
        origin: dict[str, Path] = {}
        if private:
            house = tmp / "wheels"
            house.mkdir()
            origin = _copy_local(pins, uv.sources.find_links, house)
            links = (str(house),)
            only = Sources(offline=True, find_links=links, progress_fd=uv.sources.progress_fd)
            uv = UvBackend(uv.python, only, uv.uv, fresh=True)
        done = _run_uv(uv.stage_argv(texts, str(prefix)), uv.sources.progress_fd)
        if done.returncode != 0:
            lines = [ln.strip() for ln in done.stderr.splitlines() if ln.strip()]
            said = lines[-1] if lines else f"uv exited with status {done.returncode}"
            _machine_error(said, tmp)
            return {}, {pin: said for pin in pins}
        found = {w.name: w for w in _read_staged(prefix, site, uv.sources.find_links)}
    wheels: dict[Pin, StagedWheel] = {}
    problems: dict[Pin, str] = {}
    for name, version in pins:
        wheel = found.get(name)
        if wheel is None:
            problems[(name, version)] = "uv installed no distribution of that name"
        elif private and (wheel.wheel is None or wheel.wheel.name not in origin):
            problems[(name, version)] = "no single local wheel file holds what uv installed"
        elif private and wheel.wheel is not None:
            wheels[(name, version)] = replace(wheel, wheel=origin[wheel.wheel.name])
        else:
            wheels[(name, version)] = wheel
    return wheels, problems


def _copy_local(pins: Sequence[Pin], find_links: Sequence[str], into: Path) -> dict[str, Path]:
    """Copy every wheel file of the pins' names and versions in the local ``find_links``
    directories into ``into``; file name -> the file it was copied from. The first
    directory's file wins a name two directories hold (uv searches them in that order).

    The copy is what staging judges, and :func:`identify` hashes the copy: the plan holds
    the sha256 of the very bytes judged, which applying checks the file against again.
    """
    origin: dict[str, Path] = {}
    for name, version in pins:
        for path in _candidates(name, version, find_links):
            if path.name in origin:
                continue
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            except OSError:
                continue  # a symlink or unreadable: uv would not get it from us
            with os.fdopen(fd, "rb") as src, (into / path.name).open("xb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
            origin[path.name] = path
    return origin


def _run_uv(argv: Sequence[str], progress_fd: int | None) -> Completed:
    """uv's staging call: captured, or with its progress display live on ``progress_fd``
    (a first download of a GB-sized CUDA wheel is minutes), its tail still kept."""
    if progress_fd is None:
        return run(argv, timeout=STAGE_TIMEOUT)
    with open(os.devnull, "wb") as sink:
        return run_live(
            argv, echo=(sink.fileno(), progress_fd), timeout=STAGE_TIMEOUT, shown=InstallLinesHidden
        )


_ANSI = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]")
_ANSI_BEGUN = re.compile(rb"\x1b(\[[0-9;?]*[ -/]*)?\Z")
"""A control sequence cut off by the end of what was read."""
_INSTALL_LINES = (b"Using ", b"Installed ", b"Uninstalled ", b"Audited ", b" + ", b" - ", b" ~ ")
"""How uv's lines about an environment begin (``Using CPython ... interpreter at: V/bin/python``,
``Installed 1 package in 3ms``, `` + name==version``): said of the scratch directory, they
would read as a change to the user's environment."""


class InstallLinesHidden:
    """uv's display with its lines about the environment left out: its resolving spinner,
    download bars and ``Resolved``/``Prepared`` lines pass as they come.

    A line is judged by its visible text after its last carriage return (colours aside); a
    hidden line's control sequences still pass, so the terminal is left as uv leaves it.
    A line's start that may still become one to hide is held back until it is decided.
    """

    def __init__(self) -> None:
        self._held = b""
        self._shown = False
        """Part of the current segment (since the last ``\\r`` or ``\\n``) was shown."""

    def feed(self, data: bytes) -> bytes:
        data, self._held = self._held + data, b""
        out = []
        start = 0
        while (at := _next_end(data, start)) >= 0:
            if data[at : at + 1] == b"\r" and at + 1 == len(data) and not self._shown:
                break  # "\r" or "\r\n": told by the next byte
            end = at + (2 if data[at : at + 2] == b"\r\n" else 1)
            segment = data[start:at]
            if data[end - 1 : end] == b"\n" and not self._shown and _hidden(segment):
                out.append(b"".join(_ANSI.findall(segment)))
            else:
                out.append(data[start:end])
            self._shown = False
            start = end
        rest = data[start:]
        if not self._shown and _may_become_hidden(rest.removesuffix(b"\r")):
            self._held = rest
        else:
            out.append(rest)
            self._shown = self._shown or bool(_ANSI.sub(b"", rest).strip(b"\r"))
        return b"".join(out)

    def end(self) -> bytes:
        rest, self._held = self._held, b""
        segment = rest.removesuffix(b"\r")
        return b"".join(_ANSI.findall(segment)) if _hidden(segment) else rest


def _next_end(data: bytes, start: int) -> int:
    """Where the first ``\\r`` or ``\\n`` from ``start`` is, or -1."""
    found = [i for i in (data.find(b"\r", start), data.find(b"\n", start)) if i >= 0]
    return min(found, default=-1)


def _hidden(segment: bytes) -> bool:
    return _ANSI.sub(b"", segment).startswith(_INSTALL_LINES)


def _may_become_hidden(unfinished: bytes) -> bool:
    """Whether an unfinished line may still turn out to be one to hide (or ends in the
    middle of a control sequence, which cannot be judged yet)."""
    if _ANSI_BEGUN.search(unfinished):
        return True
    visible = _ANSI.sub(b"", unfinished)
    return any(p.startswith(visible) or visible.startswith(p) for p in _INSTALL_LINES)


_MACHINE = re.compile(r"\(os error (28|122|30|13)\)|No space left on device|Read-only file system")
"""uv's words for a failure of the machine (ENOSPC, EDQUOT, EROFS, EACCES), not the wheel."""


def _machine_error(said: str, where: Path) -> None:
    """Raise :class:`EnvironmentFault` (exit 1) when uv failed for want of space or rights
    in the scratch directory: no wheel is at fault, and "cannot be had" would mislead."""
    if _MACHINE.search(said):
        raise EnvironmentFault(
            f"staging wheels in {where.parent} failed: {said}",
            hint="free space there, or point TMPDIR at a file system with room",
        )


@contextlib.contextmanager
def scratch_dir() -> Iterator[Path]:
    """A private ``cudafix-stage-*`` directory in ``$TMPDIR``, removed after use.

    It holds an exclusive ``flock`` for as long as it is in use, so one left by a killed
    run (SIGKILL skips every cleanup) is told from a live one and removed by the next run.
    It is made under another name and renamed once locked: a sweeping run never sees a live
    directory unlocked.
    """
    base = Path(tempfile.gettempdir())
    _sweep(base)
    made = Path(tempfile.mkdtemp(prefix=".cudafix-new-", dir=base))
    fd = os.open(made, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    path = base / (SCRATCH_PREFIX + made.name.removeprefix(".cudafix-new-"))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        made.rename(path)
        crash_point("stage")
        yield path
    finally:
        for where in (path, made):  # ``made`` when the rename failed
            shutil.rmtree(where, ignore_errors=True)
        os.close(fd)


SCRATCH_PREFIX = "cudafix-stage-"


def _sweep(base: Path) -> None:
    """Remove this user's scratch directories whose run is gone (their flock is free)."""
    try:
        paths = [p for p in base.iterdir() if p.name.startswith(SCRATCH_PREFIX)]
    except OSError:
        return
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            continue  # a symlink or a file by that name: never ours, never followed
        try:
            if os.fstat(fd).st_uid == os.getuid():
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                shutil.rmtree(path, ignore_errors=True)
        except OSError:
            pass  # locked: a live run's
        finally:
            os.close(fd)


def _read_staged(root: Path, site: EnvPath, find_links: Sequence[str]) -> list[StagedWheel]:
    out = []
    for info in sorted((root / site).glob("*.dist-info")):
        split = split_dist_info_name(info.name)
        if split is None or not (info / "RECORD").is_file():
            continue
        record = parse_record((info / "RECORD").read_text(encoding="utf-8"))
        files: dict[EnvPath, str | None] = {}
        elf: dict[EnvPath, ElfInfo] = {}
        for entry in record.entries:
            path = resolve_record_path(site, entry.path)
            if isinstance(path, Refusal):
                continue
            files[path] = entry.sha256
            if is_so_name(path):
                verdict = read_elf_nofollow(str(root / path))
                if isinstance(verdict, ElfInfo):
                    elf[path] = verdict
        meta = _metadata(info / "METADATA")
        top = info / "top_level.txt"
        tops = (
            tuple(t for t in top.read_text(encoding="utf-8").split() if t)
            if top.is_file()
            else derive_top_level(e.path for e in record.entries)
        )
        name = normalize_name(meta.name or split[0])
        version = meta.version or split[1]
        dist_info = EnvPath(f"{site}/{info.name}")
        as_is = {p: h for p, h in files.items() if is_payload(p, dist_info)}
        local = identify(name, version, as_is, find_links)
        out.append(
            StagedWheel(
                name=name,
                version=version,
                files=files,
                dist_info=dist_info,
                requires=meta.requires,
                top_level=tops,
                elf=elf,
                size=sum(e.size or 0 for e in record.entries),
                wheel=local[0] if local else None,
                wheel_sha256=local[1] if local else None,
            )
        )
    return out


def _metadata(path: Path) -> CoreMetadata:
    return parse_metadata(path.read_text(encoding="utf-8")) if path.is_file() else CoreMetadata()
