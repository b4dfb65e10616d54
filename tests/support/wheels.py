"""Tiny real wheels, valid by default (correct RECORD sha256 and sizes).

Tests corrupt the *installed* copy, the way a broken environment is corrupted in the wild.
There is one wheel builder (``scenarios.wheel.write_wheel``); this module only turns a
``{path: bytes}`` mapping into its members.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from scenarios.compile import wheel_tag
from scenarios.wheel import WheelMeta, record_hash, write_wheel

__all__ = ["CUDNN_META", "cudnn_tree", "make_wheel", "record_hash"]

CUDNN_META = WheelMeta("nvidia-cudnn-cu12", "9.10.2.21", ("nvidia-cublas-cu12",), wheel_tag())
"""A platform wheel's metadata, for packing ``cudnn_tree`` with ``scenarios.wheel.pack_wheel``."""


def cudnn_tree(root: Path) -> Path:
    """A cudnn-shaped package tree under ``root``: an executable fake library, two modules."""
    (root / "nvidia" / "cudnn" / "lib").mkdir(parents=True)
    (root / "nvidia" / "__init__.py").write_text("")
    (root / "nvidia" / "cudnn" / "__init__.py").write_text("VARIANT = 'cu12'\n")
    lib = root / "nvidia" / "cudnn" / "lib" / "libcudnn.so.9"
    lib.write_bytes(b"\x7fELF not really")
    lib.chmod(0o755)
    return root


def make_wheel(
    wheelhouse: Path,
    name: str,
    version: str,
    files: Mapping[str, bytes],
    *,
    requires: Sequence[str] = (),
    extra_metadata: str = "",
    dist_info: Mapping[str, bytes] | None = None,
    scripts: bool = False,
) -> Path:
    """Write ``<name>-<version>-py3-none-any.whl`` holding ``files``; return its path.

    ``files`` may hold ``name-version.data/...`` paths; ``dist_info`` adds files to the
    dist-info directory; ``scripts`` adds a console script ``<name>-cli``.
    """
    meta = WheelMeta(name, version, tuple(requires), extra_metadata=extra_metadata, purelib=True)
    extra = dict(dist_info or {})
    if scripts:
        dist = meta.escaped_name
        extra["entry_points.txt"] = f"[console_scripts]\n{dist}-cli = {dist}_mod:main\n".encode()
    members = [(p, d, 0o644) for p, d in files.items()]
    members += [(f"{meta.dist_info}/{n}", d, 0o644) for n, d in extra.items()]
    return write_wheel(meta, members, wheelhouse)
