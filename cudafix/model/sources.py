"""Where reinstalled and installed wheels may come from, as the user said it (passed to uv/pip)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sources:
    """``--offline`` and ``--find-links``: the wheel sources a plan may use."""

    offline: bool = False
    find_links: tuple[str, ...] = ()
