"""Environments whose metadata and ELF dynamic sections are large, to show how cudafix scales.

Two shapes, each built at 1x, 2x and 4x of a base size into a real venv
(``python -m venv --without-pip``) with a hand-written dist-info:

- ``elf``: N gcc-built shared objects, each with U DT_NEEDED entries that resolve nowhere
  and a DT_RUNPATH of R directories (N scales; U and R fixed). Resolution work is
  N x U x R directory probes at least; what must not grow faster is the memory kept.
- ``record``: one distribution whose RECORD lists K rows (K scales) of files that exist
  in a few directories, plus rows of files that are missing (doctor names them).

Used by ``benchmarks.run`` (section 5: time and peak RSS of ``doctor`` and ``remove
--dry-run`` at each size).
"""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from scenarios.cc import SharedObject, compile_shared

SITE = "lib/python{v}/site-packages".format(v=f"{sys.version_info[0]}.{sys.version_info[1]}")


def _venv(dest: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(dest)], check=True)
    return dest / SITE


def _digest(data: bytes) -> str:
    raw = hashlib.sha256(data).digest()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _dist_info(site: Path, name: str, rows: list[str]) -> None:
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "INSTALLER").write_text("pip\n")
    rows = [*rows, f"{info.name}/METADATA,,", f"{info.name}/INSTALLER,,", f"{info.name}/RECORD,,"]
    (info / "RECORD").write_text("\n".join(rows) + "\n")


def build_elf(dest: Path, objects: int, needs: int = 200, runpath: int = 60) -> Path:
    """A venv with ``objects`` shared objects of one distribution (see the module doc)."""
    site = _venv(dest)
    stubs = dest.parent / f"{dest.name}-stubs"
    stub_paths = [
        compile_shared(SharedObject(stubs / f"libgone{j}.so", soname=f"libgone{j}.so.1"))
        for j in range(needs)
    ]
    lib = site / "stress" / "lib"
    dirs = [f"$ORIGIN/../sub{k}/lib" for k in range(runpath)]
    first = compile_shared(
        SharedObject(
            lib / "libstress0.so",
            soname="libstress0.so",
            needed=stub_paths,
            rpath=dirs,
            runpath=True,
        )
    )
    data = first.read_bytes()
    rows = []
    for i in range(objects):
        path = lib / f"libstress{i}.so"
        if i:
            path.write_bytes(data)
        rows.append(f"stress/lib/{path.name},sha256={_digest(data)},{len(data)}")
    _dist_info(site, "stress", rows)
    return dest


def build_record(dest: Path, rows: int, present: int = 2000) -> Path:
    """A venv whose one distribution's RECORD has ``rows`` rows, ``present`` of them on disk."""
    site = _venv(dest)
    out = []
    for i in range(rows):
        rel = f"bigrec/d{i % 50}/module_with_a_long_name_{i}.py"
        if i < present:
            body = f"x = {i}\n".encode()
            path = site / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(body)
            out.append(f"{rel},sha256={_digest(body)},{len(body)}")
        else:
            out.append(f"{rel},sha256={_digest(rel.encode())},{len(rel)}")
    _dist_info(site, "bigrec", out)
    return dest


SHAPES: dict[str, tuple[str, Callable[[Path, int], Path]]] = {
    "elf": ("objects ({needs} unresolved needs, RUNPATH of {runpath} dirs each)", build_elf),
    "record": ("RECORD rows", build_record),
}


def pristine(root: Path, shape: str, size: int, needs: int = 200) -> Path:
    """The stress venv of ``shape`` at ``size``, built once under ``root`` and reused
    (``needs``: unresolved needs per ELF object, for ``elf``)."""
    dest = root / (f"stress-{shape}-{size}" + (f"-n{needs}" if shape == "elf" else ""))
    stamp = dest / ".stress-ready"
    if not stamp.exists():
        shutil.rmtree(dest, ignore_errors=True)
        shutil.rmtree(dest.parent / f"{dest.name}-stubs", ignore_errors=True)
        # In a child: a forked child's peak RSS starts at its parent's, so the harness must
        # not grow by building these.
        argv = [sys.executable, "-m", "benchmarks.stress", shape, str(size), str(dest), str(needs)]
        subprocess.run(argv, check=True, cwd=Path(__file__).resolve().parents[1])
        stamp.write_text("ok\n")
    return dest


if __name__ == "__main__":
    if sys.argv[1] == "elf":
        build_elf(Path(sys.argv[3]), int(sys.argv[2]), needs=int(sys.argv[4]))
    else:
        build_record(Path(sys.argv[3]), int(sys.argv[2]))
