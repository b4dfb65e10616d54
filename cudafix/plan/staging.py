"""Comparing a staged wheel with what is installed (pure: the wheel was fetched before).

A reinstall of ``name==version`` assumes the wheel holds the files the installed RECORD
lists; :func:`wheel_differences` says where it does not, so the planner refuses before
anything changes. Fetching is :mod:`cudafix.fetch.staging`'s.
"""

from __future__ import annotations

from cudafix.env.inventory import Distribution
from cudafix.fetch.staged import StagedWheel, is_payload

__all__ = ["is_payload", "wheel_differences"]


def wheel_differences(installed: Distribution, staged: StagedWheel) -> list[str]:
    """Paths whose presence or sha256 differs between the installed RECORD and the wheel.

    dist-info contents are left out (the directory name's case and installer files vary
    between installers); what matters is the files the distribution provides.
    """
    have = {e.path: e.sha256 for e in installed.files if is_payload(e.path, installed.dist_info)}
    want = {p: h for p, h in staged.files.items() if is_payload(p, staged.dist_info)}
    out = [f"{p}: not in the wheel" for p in sorted(set(have) - set(want))]
    out += [f"{p}: only in the wheel" for p in sorted(set(want) - set(have))]
    out += [
        f"{p}: other bytes (sha256 {(want[p] or '-')[:12]} in the wheel, {(have[p] or '-')[:12]}"
        " in the installed RECORD)"
        for p in sorted(set(have) & set(want))
        if have[p] and want[p] and have[p] != want[p]
    ]
    return out
