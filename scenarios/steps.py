"""Replay a scenario's steps on a fresh venv: real uv/pip installs, then confined edits.

Hostile edits (extra RECORD lines, FIFOs, symlinks) are made here rather than shipped in
wheels, because a wheel cannot carry them. Every path a step writes is checked to stay in
the venv, following symlinks of its parents, so a scenario can point a link outside the
venv but never writes through it. Only ``{outside}/`` paths write next to the venv.
"""

from __future__ import annotations

import os
import posixpath
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from cudafix.env.hashing import hash_path
from cudafix.env.reading import find_dist_info
from cudafix.model.errors import BackendError, InputError
from cudafix.process import run
from scenarios.spec import Step
from scenarios.wheel import record_line

OUTSIDE = "{outside}"
SITE = "{site}"


@dataclass(frozen=True)
class Venv:
    """The venv being built, and where steps get their wheels and tools."""

    root: Path
    wheelhouse: Path
    uv: Path
    env: Mapping[str, str]
    compile_bytecode: bool = False
    """Install steps write ``.pyc`` files (the scenario's ``compile``)."""

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    @property
    def site(self) -> Path:
        version = f"python{sys.version_info.major}.{sys.version_info.minor}"
        return self.root / "lib" / version / "site-packages"

    @property
    def outside(self) -> Path:
        """A directory next to the venv that hostile symlinks may point at."""
        return self.root.parent / f"{self.root.name}.outside"


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _existing_ancestor(path: Path) -> Path:
    """The nearest parent that exists (or is a link): checked before any mkdir below it."""
    parent = path.parent
    while not parent.exists() and not parent.is_symlink():
        parent = parent.parent
    return parent


def confined(venv: Venv, template: str) -> Path:
    """The absolute path a step names; refuse one that leaves the venv (or ``{outside}``)."""
    root, rel = venv.root, template.replace(SITE, venv.site.relative_to(venv.root).as_posix())
    if rel.startswith(OUTSIDE):
        root, rel = venv.outside, rel[len(OUTSIDE) :].lstrip("/")
        root.mkdir(exist_ok=True)
    norm = posixpath.normpath(rel)
    if rel.startswith("/") or norm == ".." or norm.startswith("../"):
        raise InputError(f"step path leaves its tree: {template!r}")
    path = root / norm
    if not _inside(_existing_ancestor(path).resolve(), root.resolve()):
        raise InputError(f"step path goes through a symlink out of its tree: {template!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def dist_info(venv: Venv, name: str) -> Path:
    """The installed ``*.dist-info`` of distribution ``name``."""
    site = venv.site.relative_to(venv.root).as_posix()
    found = find_dist_info(venv.root, [site], name)
    if found is None:
        raise InputError(f"step names {name!r}, which is not installed")
    return venv.root / found


def _append_record(venv: Venv, name: str, line: str) -> None:
    record = dist_info(venv, name) / "RECORD"
    text = record.read_text(encoding="utf-8")
    sep = "" if text.endswith("\n") or not text else "\n"
    record.write_text(f"{text}{sep}{line}\n", encoding="utf-8")


def _site_rel(venv: Venv, path: Path) -> str:
    return os.path.relpath(path, venv.site)


def _check(venv: Venv, argv: list[str]) -> None:
    done = run(argv, env=venv.env)
    if done.returncode != 0:
        context = [done.stdout[-2000:], done.stderr[-2000:]]
        raise BackendError(f"scenario step failed: {' '.join(argv)}", context=context)


def _install(venv: Venv, step: Step) -> None:
    """Offline install; bytecode only where the scenario asks (pip compiles by default)."""
    deps = ["--no-deps"] if step.no_deps else []
    links = ["--no-index", "--find-links", str(venv.wheelhouse)]
    if step.installer == "uv":
        base = [str(venv.uv), "pip", "install", "--offline", *links, "--python", str(venv.python)]
        base += ["--compile-bytecode"] if venv.compile_bytecode else []
    else:
        base = [sys.executable, "-m", "pip", "--python", str(venv.python), "install", *links]
        base += ["--no-cache-dir", "--disable-pip-version-check"]
        base += [] if venv.compile_bytecode else ["--no-compile"]
    _check(venv, [*base, *deps, *step.packages])


def uninstall_argv(venv_python: Path, uv: Path, step: Step) -> list[str]:
    """The plain uv/pip command a user would run for an uninstall step."""
    if step.installer == "uv":
        return [str(uv), "pip", "uninstall", "--python", str(venv_python), *step.packages]
    pip = [sys.executable, "-m", "pip", "--python", str(venv_python)]
    return [*pip, "uninstall", "-y", "--disable-pip-version-check", *step.packages]


def _uninstall(venv: Venv, step: Step) -> None:
    _check(venv, uninstall_argv(venv.python, venv.uv, step))


def _write(venv: Venv, step: Step) -> None:
    path = confined(venv, step.path or "")
    if path.is_symlink():
        raise InputError(f"write would follow a symlink: {step.path!r}")
    data = step.text.encode()
    path.write_bytes(data)
    if step.dist:
        _append_record(venv, step.dist, record_line(_site_rel(venv, path), data))


def _symlink(venv: Venv, step: Step) -> None:
    path = confined(venv, step.path or "")
    target = (step.target or "").replace(OUTSIDE, str(venv.outside))
    if OUTSIDE in (step.target or ""):
        venv.outside.mkdir(exist_ok=True)
    path.symlink_to(target)
    if step.dist:
        _append_record(venv, step.dist, f"{_site_rel(venv, path)},,")


def _mkfifo(venv: Venv, step: Step) -> None:
    path = confined(venv, step.path or "")
    os.mkfifo(path)
    if step.dist:
        _append_record(venv, step.dist, f"{_site_rel(venv, path)},,")


def _grow(venv: Venv, step: Step) -> None:
    """Extend a file sparsely (``truncate``) and keep its owner's RECORD row true."""
    path = confined(venv, step.path or "")
    if path.is_symlink() or not path.is_file():
        raise InputError(f"grow needs a regular file: {step.path!r}")
    os.truncate(path, step.size or 0)
    if step.dist:
        _rewrite_record_row(venv, step.dist, _site_rel(venv, path), path)


def _rewrite_record_row(venv: Venv, name: str, rel: str, path: Path) -> None:
    encoded = hash_path(path)  # streamed: grown files are GB-sized
    assert encoded is not None, path
    row = f"{rel},sha256={encoded},{path.stat().st_size}"
    record = dist_info(venv, name) / "RECORD"
    lines = record.read_text(encoding="utf-8").splitlines()
    lines = [row if ln.rsplit(",", 2)[0] == rel else ln for ln in lines]
    record.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _record_edit(venv: Venv, step: Step) -> None:
    if step.action == "append-record":
        _append_record(venv, step.dist or "", step.line or "")
    else:
        (dist_info(venv, step.dist or "") / "RECORD").unlink()


_ACTIONS: dict[str, Callable[[Venv, Step], None]] = {
    "install": _install,
    "uninstall": _uninstall,
    "append-record": _record_edit,
    "remove-record": _record_edit,
    "write": _write,
    "symlink": _symlink,
    "mkfifo": _mkfifo,
    "grow": _grow,
}


def replay(venv: Venv, step: Step) -> None:
    """Apply one step to ``venv``."""
    _ACTIONS[step.action](venv, step)
