"""Medians and Markdown tables."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def spread(values: Sequence[float]) -> str:
    """``median (min-max, n=N)`` in seconds, rounded for a table."""
    if not values:
        return "-"
    return f"{median(values):.3f} ({min(values):.3f}-{max(values):.3f}, n={len(values)})"


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
