"""Names as types, so a soname is never passed where a distribution name is expected."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from typing import Literal, NewType

DistName = NewType("DistName", str)
"""A PEP 503 normalised distribution name (``nvidia-cudnn-cu12``)."""

Soname = NewType("Soname", str)
"""A shared-object name as it appears in DT_SONAME or DT_NEEDED (``libcudnn.so.9``)."""

EnvPath = NewType("EnvPath", str)
"""A POSIX path relative to the environment prefix, lexically normalised, never escaping it
(``lib/python3.11/site-packages/nvidia/cudnn/lib/libcudnn.so.9``)."""

BackendName = Literal["uv", "pip"]
"""Which installer applies a plan (staging always uses uv)."""

DIST_INFO_SUFFIX = ".dist-info"
_SEPARATORS = re.compile(r"[-_.]+")

_CUDA_SUFFIX = re.compile(r"-cu(\d+)$")
_DIST_NAME = re.compile(r"[A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9]", re.IGNORECASE)
_SELECTOR = re.compile(r"[A-Z0-9*?\[][A-Z0-9._*?\[\]!-]*", re.IGNORECASE)


def is_dist_name(name: str) -> bool:
    """A PEP 508 distribution name (``nvidia-cudnn-cu12``), as written or normalised.

    Names from a plan file or a script reach uv's and pip's command lines: a name can
    never be an option (``--target=/elsewhere``), a path, a URL or a requirement.
    """
    return _DIST_NAME.fullmatch(name) is not None


def is_selector(text: str) -> bool:
    """A distribution name, or a shell glob over names (``nvidia-*-cu13``)."""
    return _SELECTOR.fullmatch(text) is not None


def is_module_name(name: str) -> bool:
    """A dotted Python module name (``torch``, ``jax.numpy``): probes import it as code."""
    return all(part.isidentifier() for part in name.split("."))


def is_env_path(path: str) -> bool:
    """The lexical form of an :data:`EnvPath`: relative, normalised, inside the prefix."""
    return (
        bool(path)
        and not path.startswith("/")
        and "\x00" not in path
        and posixpath.normpath(path) == path
        and path.split("/")[0] not in ("..", ".")
    )


def cuda_major(name: str) -> int | None:
    """The CUDA major a ``*-cuNN`` distribution is built for (``nvidia-cudnn-cu12`` -> 12)."""
    m = _CUDA_SUFFIX.search(normalize_name(name))
    return int(m.group(1)) if m else None


def normalize_name(name: str) -> DistName:
    """PEP 503 normalisation: selectors and RECORD owners compare on this form.

    The spec's own rule (as ``packaging.utils.canonicalize_name``), without importing
    ``packaging.utils``, which pulls ``packaging.tags`` into every start-up.
    """
    return DistName(_SEPARATORS.sub("-", name).lower())


def is_so_name(path: str) -> bool:
    """``libfoo.so`` or ``libfoo.so.1.2``: a name the loader (or a linker) would look for."""
    name = path.rpartition("/")[2]
    return name.endswith(".so") or ".so." in name


SONAME_LITERAL = rb"lib[A-Za-z0-9_+-]+(?:\.[A-Za-z0-9_+-]+)*?\.so(?:\.[0-9]+)*"
"""A library name as code spells it for ``dlopen()`` (``libcufft.so.11``, ``libnvrtc-builtins.so``):
the bytes pattern both the ELF and the Python source scans look for."""


def split_dist_info_name(dirname: str) -> tuple[str, str] | None:
    """``name``, ``version`` of a ``name-version.dist-info`` directory name, as written.

    None when ``dirname`` is not a dist-info name. The name is not normalised here, so a
    caller can tell an odd-case directory from a canonical one.
    """
    if not dirname.endswith(DIST_INFO_SUFFIX):
        return None
    name, sep, version = dirname[: -len(DIST_INFO_SUFFIX)].partition("-")
    return (name, version) if sep and name and version else None


def site_relative(path: str, site_packages: Sequence[str], prefix: str = "") -> str:
    """A path for people: relative to its site-packages dir (``nvidia/cudnn/lib/...``).

    ``path`` may be an EnvPath or, with ``prefix``, an absolute path inside the prefix.
    """
    if prefix and path.startswith(prefix.rstrip("/") + "/"):
        path = path[len(prefix.rstrip("/")) + 1 :]
    for site in site_packages:
        if path.startswith(site + "/"):
            return path[len(site) + 1 :]
    return path
