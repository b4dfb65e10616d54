"""Sonames no wheel ships: the NVIDIA driver's libraries and optional system stacks.

Not finding them is expected on a machine without a GPU driver or those stacks, so both
``doctor`` and the transaction's probes grade such a gap as information, never a failure
(the table is ``cudafix/data/system.toml``).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Mapping
from importlib import resources

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]


@functools.cache
def provided_by_system() -> Mapping[str, str]:
    """Soname -> what provides it (``libcuda.so.1`` -> ``the NVIDIA driver``)."""
    text = resources.files("cudafix").joinpath("data/system.toml").read_text()
    table = tomllib.loads(text).get("provided-by", {})
    return {str(k): str(v) for k, v in table.items()}
