"""Cleanup scripts: a TOML file of ordered steps and probes, compiled into ONE plan.

Why one plan: a script is all or nothing. It becomes one planner request
(:func:`script_request`): one simulation sees every removal at once, so no step can orphan
a soname another step still needs, and requirements are judged on the after-state the
installs make. ``cudafix apply`` runs the result as one transaction: uninstall -> reinstall
-> install -> probes, or roll back.

Schema (version 1; keys are kebab-case; unknown keys are errors, reported with their line)::

    version = 1                       # optional
    description = "why this script exists"

    [policy]                          # defaults for the whole script
    repair = false                    # reinstall co-owners of deleted shared paths
    keep-shared = false               # put back shared paths remaining distributions claim
    offline = false                   # uv --offline for reinstalls and installs
    find-links = ["wheels"]           # wheel dirs (relative to the script's directory) or URLs
    backend = "uv"                    # or "pip"
    allow-broken-requirements = false

    [[steps]]                         # exactly one of remove / reinstall / install per step
    remove = ["nvidia-*-cu13", "sglang"]   # names or globs, as for `cudafix remove`
    exclude = ["nvidia-nvtx-cu13"]    # only with remove
    repair = true                     # only with remove; applies to the whole plan
    keep-shared = false               # only with remove; applies to the whole plan
    missing-ok = true                 # a selector that matches nothing is skipped, not an error

    [[steps]]
    reinstall = ["nvidia-cudnn-cu12"] # installed distributions, reinstalled at the same version

    [[steps]]
    install = ["nvidia-cudnn-cu13==9.13.0.50"]  # exact pins, installed --no-deps

    [probes]                          # must pass after applying, or everything rolls back
    imports = ["torch"]
    python = ["import torch; assert torch.version.cuda.startswith('12')"]
    commands = ["python -c 'import torch'"]
    auto = true                       # also the import/dlopen probes the planner chooses
    timeout = 120                     # seconds per probe

    [[probes.expect]]                 # output (stdout + stderr) must contain `output`
    python = "import torch; print(torch.version.cuda)"   # or: command = "..."
    output = "12.8"

Options combine: the whole script is one plan, so ``repair`` (or ``keep-shared``) in any
remove step, or in ``[policy]``, applies to the whole removal.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from packaging.requirements import InvalidRequirement, Requirement
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from cudafix.model import plan as P
from cudafix.model.errors import InputError, UsageError
from cudafix.model.names import BackendName, DistName, is_dist_name, is_selector, normalize_name
from cudafix.model.plan import Probes
from cudafix.model.reasons import ScriptStep
from cudafix.model.sources import Sources, link_path
from cudafix.plan.facts import Facts
from cudafix.plan.planner import Request
from cudafix.plan.select import select

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]


def _kebab(name: str) -> str:
    return name.replace("_", "-")


class _Strict(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="forbid", strict=True, alias_generator=_kebab, populate_by_name=False
    )


class Policy(_Strict):
    """Defaults for the whole script (``[policy]``)."""

    repair: bool = False
    keep_shared: bool = False
    offline: bool = False
    find_links: list[str] = Field(default_factory=list)
    backend: BackendName = "uv"
    allow_broken_requirements: bool = False


def parse_pin(pin: str) -> tuple[DistName, str]:
    """``name==version`` exactly; anything looser would make the plan depend on the index."""
    try:
        req = Requirement(pin)
    except InvalidRequirement as exc:
        raise ValueError(f"{pin!r} is not a requirement: {exc}") from exc
    specs = list(req.specifier)
    exact = len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version
    if not exact or req.extras or req.marker or req.url:
        raise ValueError(f"{pin!r} is not an exact pin; write name==version")
    return normalize_name(req.name), specs[0].version


class StepTable(_Strict):
    """One ``[[steps]]`` table: exactly one of ``remove``, ``reinstall``, ``install``."""

    remove: list[str] | None = None
    exclude: list[str] = Field(default_factory=list)
    repair: bool = False
    keep_shared: bool = False
    missing_ok: bool = False
    reinstall: list[str] | None = None
    install: list[str] | None = None

    @field_validator("install")
    @classmethod
    def _pins(cls, pins: list[str] | None) -> list[str] | None:
        for pin in pins or ():
            parse_pin(pin)
        return pins

    @field_validator("reinstall")
    @classmethod
    def _names(cls, names: list[str] | None) -> list[str] | None:
        """Names reach uv's command line: a name is never an option or a path."""
        for name in names or ():
            if not is_dist_name(name):
                raise ValueError(f"{name!r} is not a distribution name")
        return names

    @field_validator("remove", "exclude")
    @classmethod
    def _selectors(cls, selectors: list[str] | None) -> list[str] | None:
        for selector in selectors or ():
            if not is_selector(selector):
                raise ValueError(f"{selector!r} is not a distribution name or pattern")
        return selectors

    @model_validator(mode="after")
    def _one_action(self) -> StepTable:
        actions = [a for a in ("remove", "reinstall", "install") if getattr(self, a) is not None]
        if len(actions) != 1:
            raise ValueError("a step needs exactly one of remove, reinstall, install")
        if not getattr(self, actions[0]):
            raise ValueError(f"{actions[0]} lists nothing")
        remove_only = self.exclude or self.repair or self.keep_shared or self.missing_ok
        if actions[0] != "remove" and remove_only:
            raise ValueError("exclude, repair, keep-shared and missing-ok belong to a remove step")
        return self

    @property
    def kind(self) -> str:
        return "remove" if self.remove else "reinstall" if self.reinstall else "install"


class Script(_Strict):
    """A whole cleanup script."""

    version: Literal[1] = 1
    description: str = ""
    policy: Policy = Field(default_factory=Policy)
    steps: list[StepTable] = Field(min_length=1)
    probes: Probes = Field(default_factory=Probes)


@dataclass(frozen=True)
class LoadedScript:
    """A validated script, with its source kept to point errors at lines."""

    path: Path
    source: str
    script: Script

    def where(self, *loc: str | int) -> str:
        line = locate(self.source, loc)
        return f"{self.path}:{line}" if line else str(self.path)


# -- loading -------------------------------------------------------------------------------


def load_script(path: Path, source: str) -> LoadedScript:
    """Validate ``source``, the text the caller read from ``path``; every problem is
    reported at once, each with its line."""
    return LoadedScript(path, source, parse_script(source, path))


def parse_script(source: str, path: Path = Path("<script>")) -> Script:
    """Parse TOML text into a :class:`Script` or raise :class:`InputError` naming lines."""
    try:
        data = tomllib.loads(source)
    except tomllib.TOMLDecodeError as exc:
        at = re.search(r"\(at line (\d+), column \d+\)", str(exc))
        where = f"{path}:{at.group(1)}" if at else f"{path}:{len(source.splitlines())}"
        raise InputError(f"{where}: not valid TOML: {exc}") from exc
    try:
        # strict=True reaches the nested values of other modules (Probes) too: a script's
        # ``auto = "yes"`` or ``imports = "torch"`` is an error, not coerced.
        return Script.model_validate(data, strict=True)
    except ValidationError as exc:
        lines = [_error_line(source, path, e["loc"], e["msg"]) for e in exc.errors()]
        raise InputError(lines[0], context=lines[1:], hint="see `cudafix apply --help`") from exc


def _error_line(source: str, path: Path, loc: tuple[str | int, ...], msg: str) -> str:
    line = locate(source, loc)
    where = f"{path}:{line}" if line else str(path)
    dotted = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
    return f"{where}: {dotted or 'script'}: {msg}"


_HEADER = re.compile(r"^\s*(\[\[?)\s*([A-Za-z0-9_.\- ]+?)\s*\]\]?\s*(?:#.*)?$")
_KEY = re.compile(r"""^\s*["']?([A-Za-z0-9_\-]+)["']?\s*[=.]""")


def _tables(lines: Sequence[str]) -> dict[tuple[str, int | None], int]:
    """Each table header's 0-based line: ``[a]`` -> (a, None), n-th ``[[a]]`` -> (a, n)."""
    out: dict[tuple[str, int | None], int] = {("", None): -1}
    counts: dict[str, int] = {}
    for i, line in enumerate(lines):
        m = _HEADER.match(line)
        if m:
            name = re.sub(r"\s*\.\s*", ".", m.group(2))
            if m.group(1) == "[[":
                counts[name] = counts.get(name, -1) + 1
                out[(name, counts[name])] = i
            else:
                out[(name, None)] = i
    return out


def _key_line(lines: Sequence[str], start: int, key: str) -> int | None:
    for i in range(start + 1, len(lines)):
        if _HEADER.match(lines[i]):
            return None
        m = _KEY.match(lines[i])
        if m and m.group(1) == key:
            return i
    return None


def locate(source: str, loc: Sequence[str | int]) -> int | None:
    """1-based line of the key or table a validation error names, best effort."""
    lines = source.splitlines()
    tables = _tables(lines)
    for cut in range(len(loc), -1, -1):
        head, rest = loc[:cut], loc[cut:]
        index = head[-1] if head and isinstance(head[-1], int) else None
        names = [str(p) for p in (head[:-1] if index is not None else head)]
        start = tables.get((".".join(names), index))
        if start is None:
            continue
        key = next((p for p in rest if isinstance(p, str)), None)
        found = _key_line(lines, start, key) if key else None
        line = found if found is not None else start
        return line + 1 if line >= 0 else None
    return None


# -- compiling -----------------------------------------------------------------------------


def script_options(
    loaded: LoadedScript,
    sources: Sources = Sources(),  # noqa: B008 - a frozen value
    backend: BackendName | None = None,
) -> P.Options:
    """The one set of options the whole plan runs with (policy, any step's flags, the CLI):
    the command line's ``sources`` add to the policy's, its ``backend`` replaces it."""
    s, base = loaded.script, loaded.path.parent
    removes = [st for st in s.steps if st.remove]
    links = [link_path(p, base) for p in s.policy.find_links]
    links += [link_path(p) for p in sources.find_links]
    return P.Options(
        index_url=sources.index_url,
        extra_index_urls=list(sources.extra_index_urls),
        repair=s.policy.repair or any(st.repair for st in removes),
        keep_shared=s.policy.keep_shared or any(st.keep_shared for st in removes),
        allow_broken_requirements=s.policy.allow_broken_requirements,
        offline=s.policy.offline or sources.offline,
        find_links=list(dict.fromkeys(links)),
        fetched=sources.fetch,
        backend=backend or s.policy.backend,
    )


def script_request(loaded: LoadedScript, facts: Facts, options: P.Options) -> Request:
    """The script as one planner request: removals together, then reinstalls and installs."""
    names, selectors = _removals(loaded, facts)
    return Request(
        names,
        selectors,
        options,
        reinstall=_reinstalls(loaded, facts, set(names)),
        installs=tuple(parse_pin(p) for st in loaded.script.steps for p in st.install or ()),
        probes=loaded.script.probes,
        source=str(loaded.path.absolute()),
    )


def _removals(loaded: LoadedScript, facts: Facts) -> tuple[tuple[DistName, ...], tuple[str, ...]]:
    installed = tuple(facts.inventory.distributions)
    names: dict[DistName, None] = {}
    selectors: list[str] = []
    for i, step in enumerate(loaded.script.steps):
        for sel in step.remove or ():
            try:
                hits = select(installed, [sel], step.exclude, facts.inventory.unmanaged)
            except UsageError as exc:
                if step.missing_ok:
                    continue
                raise UsageError(
                    f"{loaded.where('steps', i, 'remove')}: {exc.message}",
                    context=exc.context,
                    hint="fix the selector, or set missing-ok = true in that step",
                ) from exc
            names.update(dict.fromkeys(hits))
            selectors.append(sel)
    return tuple(names), tuple(selectors)


def _reinstalls(
    loaded: LoadedScript, facts: Facts, removed: set[DistName]
) -> dict[DistName, ScriptStep]:
    out: dict[DistName, ScriptStep] = {}
    installed = facts.inventory.distributions
    for i, step in enumerate(loaded.script.steps):
        for raw in step.reinstall or ():
            name = normalize_name(raw)
            where = loaded.where("steps", i, "reinstall")
            if name not in installed:
                raise UsageError(f"{where}: {name} is not installed, so it cannot be reinstalled")
            if name in removed:
                raise UsageError(f"{where}: {name} is reinstalled, but a remove step removes it")
            out[name] = ScriptStep(subject=name, step=i + 1)
    return out
