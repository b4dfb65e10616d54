"""Tiny real wheels and real venvs for the inventory and target tests.

``make_wheel`` is valid by default (correct RECORD sha256 and sizes); tests corrupt the
*installed* copy, the way a broken environment is corrupted in the wild.
"""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import uv

UV = uv.find_uv_bin()


def record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def make_wheel(
    wheelhouse: Path,
    name: str,
    version: str,
    files: Mapping[str, bytes],
    *,
    requires: Sequence[str] = (),
    extra_metadata: str = "",
    dist_info: Mapping[str, bytes] | None = None,
) -> Path:
    """Write ``name-version-py3-none-any.whl`` holding ``files`` (``name-version.data/...`` ok).

    ``dist_info`` adds files to the dist-info directory (``entry_points.txt``, ...).
    """
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    meta += "".join(f"Requires-Dist: {r}\n" for r in requires) + extra_metadata
    content = dict(files)
    content.update({f"{info}/{n}": d for n, d in (dist_info or {}).items()})
    content[f"{info}/METADATA"] = meta.encode()
    content[f"{info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: wheelhelp\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    rows = [f"{p},{record_hash(d)},{len(d)}" for p, d in content.items()]
    rows.append(f"{info}/RECORD,,")
    content[f"{info}/RECORD"] = ("\n".join(rows) + "\n").encode()
    wheelhouse.mkdir(parents=True, exist_ok=True)
    path = wheelhouse / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for p, d in content.items():
            zf.writestr(p, d)
    return path


def uv_run(*args: str | Path, cache: Path) -> subprocess.CompletedProcess[str]:
    """Run uv offline with a private cache; fail the test loudly on error."""
    argv = [UV, *map(str, args)]
    env_cache = {"UV_CACHE_DIR": str(cache), "UV_NO_PROGRESS": "1", "UV_OFFLINE": "1"}
    proc = subprocess.run(
        argv, capture_output=True, text=True, env={**os.environ, **env_cache}, check=False
    )
    assert proc.returncode == 0, f"{argv} failed:\n{proc.stderr}"
    return proc


def make_venv(path: Path, cache: Path) -> Path:
    """A real venv for the interpreter running the tests (no seed packages)."""
    uv_run("venv", "--python", sys.executable, path, cache=cache)
    return path


def install(venv: Path, wheelhouse: Path, *names: str, cache: Path) -> None:
    uv_run(
        "pip", "install", "--offline", "--no-index", "--find-links", wheelhouse,
        "--python", venv / "bin" / "python", *names, cache=cache,
    )  # fmt: skip


def uninstall(venv: Path, *names: str, cache: Path) -> None:
    uv_run("pip", "uninstall", "--python", venv / "bin" / "python", *names, cache=cache)


def site_packages(venv: Path) -> Path:
    (sp,) = venv.glob("lib/python3.*/site-packages")
    return sp
