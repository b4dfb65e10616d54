"""Where reinstalled and installed wheels may come from, as the user said it (passed to uv/pip)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sources:
    """``--offline``, ``--find-links``, ``--no-fetch``: the wheel sources a plan may use."""

    offline: bool = False
    find_links: tuple[str, ...] = ()
    fetch: bool = True
    """Stage (download) reinstalled and installed wheels while planning; off: ``--no-fetch``."""
