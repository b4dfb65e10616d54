"""The CUDA major a distribution is built for, read from what it is rather than its name.

CUDA 12 wheels carry a ``-cu12`` suffix; CUDA 13 wheels mostly do not (``nvidia-cublas``
13.x, ``nvidia-cuda-runtime`` 13.x) and share ``nvidia/cu13/lib``. So the major comes from,
in order: the distribution's paths (``nvidia/cu13/...``), the sonames of the toolkit
libraries it provides (``libcudart.so.13``, ``libcublas.so.13``: those whose soname major is
CUDA's; cuDNN's ``.so.9`` and NCCL's ``.so.2`` say nothing about CUDA), the ``-cuNN``
suffix, and the version of a toolkit component versioned like CUDA itself. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from cudafix.env.inventory import Inventory
from cudafix.linker.elfindex import ElfIndex
from cudafix.model.names import DistName, cuda_major

_CUDA_DIR = re.compile(r"(?:^|/)nvidia/cu(\d+)/")
_TOOLKIT_SONAME = re.compile(r"lib(?:cudart|cublas|cublasLt|nvblas|nvrtc|nvJitLink)\.so\.(\d+)")
_VERSIONED_AS_CUDA = frozenset(
    {
        "nvidia-cublas",
        "nvidia-cuda-runtime",
        "nvidia-cuda-nvrtc",
        "nvidia-cuda-cupti",
        "nvidia-cuda-nvcc",
        "nvidia-nvjitlink",
    }
)
"""Toolkit components whose version's major is the CUDA major (``nvidia-cufft`` 12.x is
CUDA 13, ``nvidia-curand`` 10.x either: they are not here)."""
_VERSION_MAJOR = re.compile(r"(\d+)\.")


def cuda_majors(inventory: Inventory, elf: ElfIndex) -> dict[DistName, int]:
    """Every distribution whose CUDA major something it is says, with that major."""
    sonames: dict[DistName, list[str]] = {}
    for path, info in sorted(elf.objects.items()):
        for owner in inventory.owners.get(path, ()):
            sonames.setdefault(owner, []).append(info.soname or path.rsplit("/", 1)[-1])
    out: dict[DistName, int] = {}
    for name, dist in sorted(inventory.distributions.items()):
        major = major_of(name, dist.version, dist.paths, sonames.get(name, ()))
        if major is not None:
            out[name] = major
    return out


def major_of(
    name: DistName, version: str, paths: Iterable[str], sonames: Iterable[str]
) -> int | None:
    """The CUDA major one distribution (installed, or a staged wheel) says by what it is:
    its paths, then its toolkit sonames, its ``-cuNN`` suffix, its CUDA-like version."""
    return (
        _from_paths(paths)
        or _from_sonames(sonames)
        or cuda_major(name)
        or _from_version(name, version)
    )


def _from_sonames(sonames: Iterable[str]) -> int | None:
    for soname in sonames:
        m = _TOOLKIT_SONAME.fullmatch(soname)
        if m is not None:
            return int(m.group(1))
    return None


def versioned_as_cuda(name: DistName) -> bool:
    """Whether a release's version major is the CUDA major (``nvidia-cublas`` 13.x)."""
    return name in _VERSIONED_AS_CUDA


def _from_paths(paths: Iterable[str]) -> int | None:
    for path in paths:
        if "nvidia/cu" not in path:
            continue  # what _CUDA_DIR spells, looked for first: torch lists 15k files
        m = _CUDA_DIR.search(path)
        if m is not None:
            return int(m.group(1))
    return None


def _from_version(name: DistName, version: str) -> int | None:
    m = _VERSION_MAJOR.match(version)
    return int(m.group(1)) if name in _VERSIONED_AS_CUDA and m is not None else None
