"""After the backend ran: did it do what the planner predicted, and nothing else?"""

from __future__ import annotations

from pathlib import Path

from cudafix.inventory import Inventory, read_inventory
from cudafix.names import EnvPath
from cudafix.plan import Plan


def compare(plan: Plan, after: Inventory) -> list[str]:
    """Differences between the planned after-state and ``after``; empty when they agree."""
    problems: list[str] = []
    installed = after.distributions
    for d in plan.remove:
        if d.name in installed:
            problems.append(f"{d.name} is still installed")
    for r in plan.reinstall:
        dist = installed.get(r.name)  # type: ignore[call-overload]
        if dist is None:
            problems.append(f"{r.name} was to be reinstalled but is not installed")
        elif dist.version != r.version:
            problems.append(f"{r.name} is at {dist.version}, not {r.version}")
    expected = set(plan.preconditions.distributions) - {d.name for d in plan.remove}
    problems += [f"{n} disappeared" for n in sorted(expected - set(installed))]
    stays = set(plan.rewritten_paths) | set(plan.kept_paths)
    problems += [
        f"{p} should have been deleted"
        for p in plan.deleted_paths
        if p not in stays and EnvPath(p) in after.files
    ]
    problems += [
        f"{p} should be present"
        for p in sorted(stays)
        if EnvPath(p) not in after.files and not _installer_metadata(p)
    ]
    return problems


def prediction_mismatches(plan: Plan) -> list[str]:
    """Re-read the environment (no interpreter needed) and :func:`compare`."""
    prefix = Path(plan.target.prefix)
    python = Path(plan.target.python) if plan.target.python else None
    sites = [EnvPath(s) for s in plan.target.site_packages]
    return compare(plan, read_inventory(prefix, sites, python))


def _installer_metadata(path: str) -> bool:
    """dist-info files each installer writes its own way (INSTALLER, uv_cache.json, ...)."""
    return any(part.endswith(".dist-info") for part in path.split("/")[:-1])
