"""Pack a directory tree into a real, installable wheel (PEP 427 / 491).

The one wheel builder of the project: scenarios pack trees with ``pack_wheel``, tests write
wheels from a mapping with ``write_wheel`` (through ``tests/support/wheels.py``). Only what
installers read is written: METADATA 2.1, WHEEL, top_level.txt and a RECORD with sha256 and
sizes. INSTALLER is left to uv or pip. The archive is deterministic (sorted
entries, fixed timestamps), so the same tree always yields the same bytes.
"""

from __future__ import annotations

import re
import stat
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from cudafix.env.hashing import hash_bytes

_EPOCH = (1980, 1, 1, 0, 0, 0)
_GENERATOR = "cudafix-scenarios"


@dataclass(frozen=True)
class WheelMeta:
    """The core metadata of one wheel."""

    name: str
    version: str
    requires: Sequence[str] = ()
    tag: str = "py3-none-any"
    """``{python tag}-{abi tag}-{platform tag}``."""
    extra_metadata: str = ""
    """Raw METADATA lines appended after Requires-Dist (``Requires-Python: ...\\n``)."""
    purelib: bool = False

    @property
    def escaped_name(self) -> str:
        """The name as wheel file and dist-info directory names spell it."""
        return re.sub(r"[-_.]+", "_", self.name).lower()

    @property
    def dist_info(self) -> str:
        return f"{self.escaped_name}-{self.version}.dist-info"

    @property
    def filename(self) -> str:
        return f"{self.escaped_name}-{self.version}-{self.tag}.whl"


def record_hash(data: bytes) -> str:
    """``sha256=<urlsafe base64, unpadded>``, the RECORD encoding."""
    return "sha256=" + hash_bytes(data)


def record_line(path: str, data: bytes) -> str:
    """One RECORD row for ``path`` holding ``data``."""
    return f"{path},{record_hash(data)},{len(data)}"


def _metadata(meta: WheelMeta) -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {meta.name}", f"Version: {meta.version}"]
    lines += [f"Requires-Dist: {req}" for req in meta.requires]
    return "\n".join(lines) + "\n" + meta.extra_metadata + "\n"


def _wheel_file(meta: WheelMeta) -> str:
    purelib = "true" if meta.purelib else "false"
    lines = ["Wheel-Version: 1.0", f"Generator: {_GENERATOR}", f"Root-Is-Purelib: {purelib}"]
    return "\n".join([*lines, f"Tag: {meta.tag}"]) + "\n"


def top_level(paths: Iterable[str]) -> list[str]:
    """Importable top-level names, as setuptools writes top_level.txt."""
    names = {p.split("/", 1)[0].split(".", 1)[0] for p in paths if ".dist-info/" not in p}
    return sorted(n for n in names if n.isidentifier())


def _tree_files(tree: Path) -> Iterator[tuple[str, Path]]:
    for path in sorted(tree.rglob("*")):
        if path.is_file() and not path.is_symlink():
            yield path.relative_to(tree).as_posix(), path


def _zip_info(arcname: str, mode: int) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(arcname, date_time=_EPOCH)
    info.external_attr = (stat.S_IFREG | mode) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


Member = tuple[str, bytes, int]
"""One archive entry: name, bytes, permission bits."""


def pack_wheel(meta: WheelMeta, tree: Path, out_dir: Path) -> Path:
    """Write ``tree``'s regular files plus dist-info into ``out_dir/<filename>``; return it."""
    members: list[Member] = []
    for arcname, path in _tree_files(tree):
        mode = 0o755 if path.stat().st_mode & stat.S_IXUSR else 0o644
        members.append((arcname, path.read_bytes(), mode))
    return write_wheel(meta, members, out_dir)


def write_wheel(meta: WheelMeta, members: Sequence[Member], out_dir: Path) -> Path:
    """Write ``members`` plus METADATA, WHEEL, top_level.txt and RECORD; return the wheel.

    ``members`` may already hold files of the dist-info directory (``entry_points.txt``).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    members = list(members)
    info = meta.dist_info
    names = [arc for arc, _, _ in members]
    members.append((f"{info}/METADATA", _metadata(meta).encode(), 0o644))
    members.append((f"{info}/WHEEL", _wheel_file(meta).encode(), 0o644))
    members.append(
        (f"{info}/top_level.txt", "".join(f"{n}\n" for n in top_level(names)).encode(), 0o644)
    )
    record = [record_line(arc, data) for arc, data, _ in members] + [f"{info}/RECORD,,"]
    members.append((f"{info}/RECORD", ("\n".join(record) + "\n").encode(), 0o644))
    target = out_dir / meta.filename
    with zipfile.ZipFile(target, "w") as zf:
        for arcname, data, mode in members:
            zf.writestr(_zip_info(arcname, mode), data)
    return target
