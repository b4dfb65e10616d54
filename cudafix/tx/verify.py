"""After the backend ran: did it do what the planner predicted, and nothing else?"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

from cudafix.env.distinfo import in_some_dist_info, is_installer_file
from cudafix.env.hashing import HashCache
from cudafix.env.inventory import is_bytecode
from cudafix.env.reading import installed_versions
from cudafix.model.names import DistName, EnvPath
from cudafix.model.plan import Install, Plan
from cudafix.tx import files
from cudafix.tx.difference import Deviation, DeviationKind


def compare(
    plan: Plan, installed: Mapping[DistName, str], exists: Callable[[str], bool]
) -> list[Deviation]:
    """Differences between the planned after-state and what is there; empty when they agree.

    Bytecode is derived data: whether a ``.pyc`` is there decides nothing (pip lists the
    ones it compiled, backends reinstall without compiling, Python writes them on import).
    """
    problems = [
        Deviation("still-installed", d.name) for d in plan.remove if DistName(d.name) in installed
    ]
    for r in plan.reinstall:
        version = installed.get(DistName(r.name))
        if version is None:
            problems.append(Deviation("not-reinstalled", r.name))
        elif version != r.version:
            problems.append(Deviation("other-version", r.name, version=version, planned=r.version))
    expected = set(plan.preconditions.distributions) - {d.name for d in plan.remove}
    problems += [Deviation("disappeared", n) for n in sorted(expected - set(installed))]
    stays = set(plan.rewritten_paths) | set(plan.kept_paths)
    problems += [
        Deviation("not-deleted", p)
        for p in plan.deleted_paths
        if p not in stays and not is_bytecode(p) and exists(p)
    ]
    problems += [
        Deviation("not-present", p)
        for p in sorted(stays)
        if not exists(p) and not in_some_dist_info(p) and not is_bytecode(p)
    ]
    return problems


def prediction_mismatches(plan: Plan) -> list[Deviation]:
    """Look only at what the plan names (no full walk) and :func:`compare`."""
    prefix = Path(plan.target.prefix)
    sites = [EnvPath(s) for s in plan.target.site_packages]
    return compare(plan, installed_versions(prefix, sites), lambda p: os.path.lexists(prefix / p))


def install_mismatches(plan: Plan) -> list[Deviation]:
    """After the install step: each pin is installed, and every file its staged RECORD
    hashes holds those bytes (so what was planned on is what landed)."""
    prefix = Path(plan.target.prefix)
    sites = [EnvPath(s) for s in plan.target.site_packages]
    installed = installed_versions(prefix, sites)
    digest = HashCache(prefix)
    problems = [
        Deviation("not-installed", i.name, version=i.version)
        for i in plan.install
        if installed.get(DistName(i.name)) != i.version
    ]
    for i in plan.install:
        for path, sha in sorted(i.sha256.items()):
            now = digest(EnvPath(path))
            if now != sha:
                kind: DeviationKind = "staged-missing" if now is None else "staged-differs"
                problems.append(Deviation(kind, path, distribution=i.name, version=i.version))
        problems += _beyond_staged(prefix, plan, i)
    return problems


def _beyond_staged(prefix: Path, plan: Plan, pin: Install) -> list[Deviation]:
    """Paths the install's own RECORD lists that its staged RECORD did not: a ``.pth`` or a
    ``share/`` file slipped in with another wheel of the same name and version."""
    info = files.dist_info(prefix, plan, pin.name, pin.version)
    if info is None:
        return []  # reported as not installed
    planned = set(pin.paths)
    return [
        Deviation("beyond-staged", path, distribution=pin.name, version=pin.version)
        for path in files.record_paths(prefix, info)
        if path not in planned and not is_bytecode(path) and not is_installer_file(path, info)
    ]
