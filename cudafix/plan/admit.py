"""Whether a plan may be applied: the refusal check, and the fields of a plan file.

Decided here, beside the planner, by whoever is about to apply a plan: the CLI before it asks
for confirmation, the transaction at its door. A refused plan's error carries the plan's
typed reasons; the CLI words them (:func:`cudafix.cli.wording.error_context`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from cudafix.model.errors import PlanRefused
from cudafix.model.names import is_dist_name, is_env_path, is_module_name
from cudafix.model.plan import Plan


def refuse_unless_allowed(plan: Plan, force: bool) -> None:
    """Raise :class:`PlanRefused` for a refused plan unless ``force``: the one check.

    The CLI makes it before asking for confirmation; :func:`cudafix.tx.apply.run_transaction`
    makes it again at the transaction's door, for callers that reach it directly.
    """
    if not plan.options.fetched and (plan.reinstall or plan.install):
        raise PlanRefused(
            "the plan was made with --no-fetch: its wheels were never staged, so what they "
            "would write is unknown and could not be rolled back; nothing was changed",
            hint="plan it again without --no-fetch (its dry run stages and checks the wheels)",
        )
    if plan.verdict == "refused" and not force:
        raise PlanRefused(
            "the plan was refused; nothing was changed", reasons=plan.reasons, target=plan.target
        )


_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://\S+")


def input_problems(plan: Plan) -> list[str]:
    """Every field of ``plan`` that is not what it claims to be, where cudafix would hand
    it to uv, pip or the target interpreter: empty for a plan cudafix made.

    A plan file is input. A "name" of ``--target=/elsewhere`` is an option to uv, a probe
    module of ``os; ...`` is code, a library of ``../../x.so`` is outside the environment:
    each is refused before anything runs, even with ``--no-plan-probes``.
    """
    return list(_input_problems(plan))


def _input_problems(plan: Plan) -> Iterator[str]:
    names = [("remove", i, d.name) for i, d in enumerate(plan.remove)]
    names += [("reinstall", i, r.name) for i, r in enumerate(plan.reinstall)]
    names += [("install", i, p.name) for i, p in enumerate(plan.install)]
    for field, i, name in names:
        if not is_dist_name(name):
            yield f"{field}[{i}].name {name!r}: not a distribution name"
    pins = [("reinstall", r.version) for r in plan.reinstall]
    pins += [("install", p.version) for p in plan.install]
    for field, version in pins:
        if not _is_version(version):
            yield f"{field} version {version!r}: not a version (PEP 440)"
    for module in [*plan.probe_modules, *plan.probes.imports]:
        if not is_module_name(module):
            yield f"probe module {module!r}: not a Python module name"
    for library in plan.probe_libraries:
        if not is_env_path(library):
            yield f"probe library {library!r}: not a path inside the environment"
    for link in plan.options.find_links:
        if not (link.startswith("/") or _URL.fullmatch(link)):
            yield f"find-links {link!r}: not an absolute path or a URL"
    for pin in [*plan.reinstall, *plan.install]:
        if pin.wheel is not None and not (pin.wheel.startswith("/") and pin.wheel_sha256):
            yield f"wheel {pin.wheel!r}: not an absolute path with its sha256"


def _is_version(text: str) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        Version(text)
    except InvalidVersion:
        return False
    return text == text.strip()
