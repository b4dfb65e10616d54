"""The plan: a documented, versioned value.

The planner produces it, ``--dry-run`` renders it, ``--json`` emits it, and the transaction
layer consumes it unchanged (uv's ``Plan``, auditwheel's queued updates). Paths are
:data:`~cudafix.model.names.EnvPath` strings, relative to the environment prefix.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from cudafix.model.names import BackendName, DistName
from cudafix.model.reasons import AlternativeDoes, PlanWarning, Reason, ReinstallWhy
from cudafix.model.sources import Sources

PLAN_SCHEMA_VERSION = 3
"""2: ``reasons``, ``warnings``, each reinstall's ``reason`` and each alternative's ``summary``
are typed records (:mod:`cudafix.model.reasons`), not text."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


# -- the probes a plan carries ---------------------------------------------------------------


class RunTimeProbe(_Frozen):
    """A framework object's run-time load, exercised after applying: the soname dlopen()ed
    through the object's own RPATH/RUNPATH, or the library loaded by its full path."""

    object: str
    """EnvPath of the framework object that loads it."""
    need: str
    """A soname, or the EnvPath of a library the framework loads by full path."""
    framework: str
    """The distribution owning ``object`` (for messages)."""
    search: list[str] = Field(default_factory=list)
    """For a soname: the object's RPATH then RUNPATH, expanded (``$ORIGIN``), in the order
    ld.so tries them; the probe loads the first copy there, else asks the system loader."""


class ExpectProbe(_Frozen):
    """Python code or a shell command whose output must contain ``output``."""

    python: str | None = None
    command: str | None = None
    output: str

    @model_validator(mode="after")
    def _one_source(self) -> ExpectProbe:
        if (self.python is None) == (self.command is None):
            raise ValueError("an expect probe needs exactly one of python, command")
        return self


class Probes(_Frozen):
    """Probes the plan carries (a cleanup script's ``[probes]``), run after applying, before
    commit; any failure rolls everything back."""

    imports: list[str] = Field(default_factory=list)
    python: list[str] = Field(default_factory=list)
    """Python snippets run by the target interpreter; each must exit 0."""
    commands: list[str] = Field(default_factory=list)
    """Shell commands run with the environment's bin/ first on PATH; each must exit 0."""
    expect: list[ExpectProbe] = Field(default_factory=list)
    auto: bool = True
    """Also run the import/dlopen probes the planner chose (probe_modules, probe_libraries)."""
    timeout: float | None = Field(default=None, gt=0)
    """Seconds per probe; None: the caller's default."""


# -- the plan ---------------------------------------------------------------------------------


class Target(_Frozen):
    """Which environment the plan was made for."""

    prefix: str
    """Absolute path of the environment (``sys.prefix`` of the target)."""
    python: str | None
    """The target interpreter, when it exists."""
    site_packages: list[str]
    """EnvPaths of the site-packages directories RECORD paths are relative to."""


class RemovedDistribution(_Frozen):
    """A distribution the backend will uninstall."""

    name: str
    version: str
    dist_info: str
    files: int
    """RECORD entries that exist on disk and will be deleted."""
    bytes: int


class SharedPath(_Frozen):
    """A path claimed by a removed distribution and by at least one that remains: what the
    plan does with one of the environment's co-owned paths
    (:class:`~cudafix.env.inventory.CoOwnedPath`, the fact it was found from)."""

    path: str
    owners: list[str]
    holder: str | None
    """Whose RECORD hash the bytes on disk match; None when nobody's (foreign bytes)."""
    remaining_owners: list[str]
    fate: Literal["deleted", "kept", "restored-by-reinstall"]
    matching: list[str] = Field(default_factory=list)
    """Every owner whose RECORD hash the bytes on disk match: several when the wheels ship
    identical bytes there (then no owner holds another's)."""


class LostNeed(_Frozen):
    """A need of a remaining object that resolves today and would not after the plan."""

    consumer: str
    consumer_distribution: str | None
    need: str
    resolved_before: str
    lost_file_owners: list[str]
    """Every distribution whose RECORD claims the file that goes."""
    searched: list[str]
    """The directories the loader would search after the plan, in order."""
    run_time_load: str | None = None
    """Set when the need is a framework's run-time load (``cudafix/data/runtime.toml``):
    who asked for the library (``jax-cuda12-plugin[with-cuda]``); None for DT_NEEDED."""


class ProviderSwitch(_Frozen):
    """A need that keeps resolving, but to another file."""

    consumer: str
    consumer_distribution: str | None
    need: str
    before: str
    after: str
    before_owners: list[str]
    after_owners: list[str]


class RequirementBreak(_Frozen):
    """One unsatisfied Requires-Dist of a distribution: what ``pip check`` reports
    (:func:`~cudafix.plan.requirements.check_requirements`), and, in a plan, one the plan
    leaves unsatisfied."""

    distribution: DistName
    requirement: str
    """The Requires-Dist value, verbatim."""
    reason: str
    extra: str = ""
    """The requested extra the requirement belongs to (``with-cuda``); ``""``: a base one."""

    @property
    def requested_as(self) -> str:
        """``jax-cuda12-plugin[with-cuda]``, or the bare name for a base requirement."""
        return f"{self.distribution}[{self.extra}]" if self.extra else self.distribution


class _Pinned(_Frozen):
    """The local wheel file a reinstall or install was staged from, when it was one."""

    wheel: str | None = None
    """The wheel file that was staged, when it is a local file (a ``--find-links``
    directory): the transaction installs a checked copy of this file, by path, never
    whatever the sources hold by then."""
    wheel_sha256: str | None = None
    """Hex sha256 of ``wheel`` when staged: a file with other bytes is refused (exit 3)."""


class Reinstall(_Pinned):
    """A distribution reinstalled at its recorded version so its own files come back."""

    name: str
    version: str
    reason: ReinstallWhy


class RefusedPath(_Frozen):
    """A RECORD entry cudafix will not act on: it leaves the environment, or names a directory
    (which uv would delete with everything under it)."""

    distribution: str
    entry: str
    reason: str


class Alternative(_Frozen):
    """A safer plan that the planner re-simulated and that passes."""

    argv: list[str]
    """Its dry run, as the command to run next (the request's target, sources and policy)."""
    summary: AlternativeDoes
    """What it does (:func:`cudafix.cli.wording.alternative_text` words it)."""
    unstaged: list[str] = Field(default_factory=list)
    """``NAME==VERSION`` of reinstalls whose wheels were not fetched for the simulation (an
    index is not fetched from just to suggest): it passes if those wheels are the installed
    builds, which its own dry run checks."""


class Precondition(_Frozen):
    """What the plan assumes of the environment; checked again before it is applied."""

    distributions: dict[str, str]
    """Every installed distribution and its version."""
    path_hashes: dict[str, str | None]
    """sha256 (RECORD encoding) of each shared path the plan touches; None if missing."""
    records: dict[str, str] = Field(default_factory=dict)
    """Digest of each affected distribution's RECORD rows (installer-written files left out,
    so the same wheel installed on two machines digests the same)."""


class Install(_Pinned):
    """A distribution installed at an exact version (``--no-deps``) after removals and reinstalls.

    ``paths`` are the EnvPaths a staging install of the same wheel wrote: the transaction
    snapshots them (most are absent), so a rollback deletes what the install added and puts
    back anything it overwrote.
    """

    name: str
    version: str
    paths: list[str] = Field(default_factory=list)
    requires: list[str] = Field(default_factory=list)
    """Its Requires-Dist, verbatim (checked against the after-state when planned)."""
    sha256: dict[str, str] = Field(default_factory=dict)
    """The staged RECORD's sha256 per path: what the install must have written (verified)."""


class OverwrittenPath(_Frozen):
    """A path an installed distribution claims that an install would write over."""

    path: str
    owners: list[str]
    """Remaining distributions whose RECORD claims it."""
    by: str
    """The distribution whose wheel writes it."""
    same_bytes: bool
    """The wheel's bytes equal those on disk (harmless now; a later uninstall still deletes it)."""


class Options(_Frozen):
    """How the plan was asked for."""

    repair: bool = False
    keep_shared: bool = False
    allow_broken_requirements: bool = False
    offline: bool = False
    find_links: list[str] = Field(default_factory=list)
    backend: BackendName = "uv"
    index_url: str | None = None
    """The index in place of PyPI the plan was made with (None: uv's default)."""
    extra_index_urls: list[str] = Field(default_factory=list)
    fetched: bool = True
    """False: planned with ``--no-fetch``: its wheels were never staged, so what they write
    is unknown and the plan can only be shown, never applied."""

    @property
    def sources(self) -> Sources:
        """Where the plan's wheels come from, as the backend is handed them."""
        return Sources(
            offline=self.offline,
            find_links=tuple(self.find_links),
            index_url=self.index_url,
            extra_index_urls=tuple(self.extra_index_urls),
        )


class Plan(_Frozen):
    """Everything a removal will do, and whether cudafix allows it."""

    schema_version: int = PLAN_SCHEMA_VERSION
    target: Target
    selectors: list[str]
    options: Options
    remove: list[RemovedDistribution]
    """Distributions the backend uninstalls, in order."""
    reinstall: list[Reinstall]
    """Distributions reinstalled (``--reinstall --no-deps``, same version) after the removal."""
    deleted_paths: list[str]
    """Every path the plan deletes (RECORD paths, dist-info, scripts): gone when it commits.
    A kept path is never one of them."""
    kept_paths: list[str]
    """Shared paths the transaction puts back after the backend deleted them (``--keep-shared``):
    what the backend deletes is these and ``deleted_paths`` (:attr:`uninstalled_paths`)."""
    rewritten_paths: list[str]
    """RECORD paths of reinstalled distributions: the backend rewrites them (snapshotted)."""
    holders_after: dict[str, str] = Field(default_factory=dict)
    """Paths two or more reinstalled distributions claim -> whose bytes they hold after:
    the last of them in ``reinstall`` order (the transaction reinstalls them one by one, in
    that order, and checks it)."""
    shared_paths: list[SharedPath]
    lost: list[LostNeed]
    switches: list[ProviderSwitch]
    requirement_breaks: list[RequirementBreak]
    refused_paths: list[RefusedPath]
    self_dependencies: list[str]
    """Distributions cudafix itself needs, when cudafix runs inside the target."""
    probe_modules: list[str]
    """Top-level modules of remaining distributions the plan touches: imported after applying."""
    probe_libraries: list[str]
    """Remaining ELF objects whose needs resolve into deleted or rewritten files: dlopened after."""
    probe_run_time: list[RunTimeProbe] = Field(default_factory=list)
    """Every run-time load of the framework objects whose run-time loads the plan changes
    (``cudafix/data/runtime.toml``): ``import`` loads none of them on a CPU host."""
    warnings: list[PlanWarning]
    """Things worth knowing that do not refuse the plan (provider switches, foreign bytes kept)."""
    verdict: Literal["pass", "refused"]
    reasons: list[Reason]
    """Why the plan is refused; empty for a plan that passes."""
    alternatives: list[Alternative]
    preconditions: Precondition
    install: list[Install] = Field(default_factory=list)
    """Exact pins installed (``--no-deps``) after the reinstalls, in order (``cudafix apply``)."""
    overwritten: list[OverwrittenPath] = Field(default_factory=list)
    """Paths remaining distributions claim that the installs write over (clobbers)."""
    probes: Probes = Field(default_factory=Probes)
    """Probes saved with the plan, so a plan file applied elsewhere is checked the same way."""
    source: str | None = None
    """The cleanup script the plan was compiled from, if any."""

    @property
    def uninstalled_paths(self) -> list[str]:
        """What the backend deletes: ``deleted_paths`` and the kept paths it puts back (a
        plan written before the two were told apart lists kept paths in both)."""
        return sorted({*self.deleted_paths, *self.kept_paths})
