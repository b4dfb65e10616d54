"""Helpers for the loader tests: build trees of real shared objects, ask ldd, ask cudafix."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from cudafix.env.inventory import FileStat
from cudafix.linker.elfindex import EnvironmentView, index_environment
from cudafix.linker.hostview import HostView
from cudafix.linker.loader import DlopenTable, LoadTree, SearchConfig, resolve
from cudafix.model.names import EnvPath
from scenarios.cc import SharedObject, compile_shared

ARCH = HostView().arch()
"""What this host's interpreter runs: the index's ``expected`` (class, machine)."""

_LDD_LINE = re.compile(r"^\s*(\S+)(?: => (not found|\S+))?(?: \(0x[0-9a-f]+\))?\s*$")


def lib(
    path: Path,
    soname: str | None = None,
    needed: Sequence[Path | str] = (),
    rpath: Sequence[str] = (),
    *,
    runpath: bool = False,
    dlopen: Sequence[str] = (),
) -> Path:
    """Compile one shared object (soname defaults to the file name)."""
    obj = SharedObject(
        output=path,
        soname=soname if soname is not None else path.name,
        needed=needed,
        rpath=rpath,
        runpath=runpath,
        dlopen=dlopen,
    )
    return compile_shared(obj)


def scan(prefix: Path) -> dict[EnvPath, FileStat]:
    """lstat every non-directory under ``prefix``, as the inventory does."""
    files: dict[EnvPath, FileStat] = {}
    for dirpath, dirnames, filenames in os.walk(prefix):
        dirnames[:] = [d for d in dirnames if d != ".cudafix"]  # as the inventory does
        for name in filenames + [d for d in dirnames if Path(dirpath, d).is_symlink()]:
            full = Path(dirpath, name)
            st = full.lstat()
            kind = "symlink" if stat.S_ISLNK(st.st_mode) else "file"
            kind = kind if kind == "symlink" or stat.S_ISREG(st.st_mode) else "other"
            target = os.readlink(full) if kind == "symlink" else None
            rel = EnvPath(full.relative_to(prefix).as_posix())
            files[rel] = FileStat(
                kind, st.st_size, st.st_mode, st.st_dev, st.st_ino, st.st_mtime_ns, target
            )
    return files


def backdate(root: Path, seconds: int = 60) -> Path:
    """Move the mtime of every file under ``root`` ``seconds`` into the past (symlinks
    left alone): files that settled before a reading, whose facts the index may keep."""
    for path in [root, *root.rglob("*")]:
        if path.is_file() and not path.is_symlink():
            st = path.stat()
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - seconds * 10**9))
    return root


def view_of(prefix: Path, removed: frozenset[EnvPath] = frozenset()) -> EnvironmentView:
    files = scan(prefix)
    index = index_environment(prefix, files, None, expected=ARCH)
    return EnvironmentView(prefix, index, files, removed, system=HostView())


def cudafix_tree(
    root: Path, llp: Sequence[str] = (), table: Mapping[str, Sequence[str]] | None = None
) -> LoadTree:
    config = SearchConfig.for_host(HostView(), ld_library_path=llp)
    dlopen = DlopenTable.from_mapping(table or {})
    return resolve(str(root), view_of(root.parent), config, dlopen)


def ldd(root: Path, llp: Sequence[str] = ()) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LD_")}
    if llp:
        env["LD_LIBRARY_PATH"] = ":".join(llp)
    return subprocess.run(["ldd", str(root)], env=env, capture_output=True, text=True, check=False)


def parse_ldd(stdout: str) -> dict[str, str | None]:
    """need name -> path (None for "not found"), vdso and the interpreter left out."""
    found: dict[str, str | None] = {}
    for line in stdout.splitlines():
        match = _LDD_LINE.match(line)
        if match is None or match.group(2) is None:
            continue
        where = match.group(2)
        found.setdefault(match.group(1), None if where == "not found" else where)
    return found


def real(path: str | None) -> str | None:
    return os.path.realpath(path) if path is not None else None


def loaded_maps(root: Path) -> set[str]:
    """Files mapped after a real ``dlopen`` of ``root`` (constructors and their dlopens ran)."""
    code = (
        "import ctypes,sys; ctypes.CDLL(sys.argv[1]); "
        "print('\\n'.join(sorted({l.split()[-1] for l in open('/proc/self/maps') "
        "if l.split()[-1].startswith(sys.argv[2])})))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("LD_")}
    proc = subprocess.run(
        [sys.executable, "-c", code, str(root), str(root.parent)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return set(proc.stdout.split())
