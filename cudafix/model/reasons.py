"""A plan's decisions as typed records, not sentences: refusals, warnings, reinstalls, alternatives.

The planner decides these; :mod:`cudafix.cli.wording` alone words them. Each refusal,
warning and reinstall reason has a stable identity, ``(kind, subject, paths)``, and each
alternative's summary is its kind and pins or paths, so tests and comparisons never match prose.
Paths are EnvPaths as the plan holds them; the wording shows them site-relative.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Said(BaseModel):
    """A decision's identity: what kind, about whom, which paths."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    kind: str
    """What was decided; each record narrows it to its own ``Literal``."""
    subject: str
    """The distribution, object or link the record is about."""
    paths: list[str] = Field(default_factory=list)
    """The EnvPaths it concerns, in the plan's order."""

    @property
    def identity(self) -> tuple[str, str, tuple[str, ...]]:
        """``(kind, subject, paths)``: equal for the same decision, whatever its wording."""
        return (str(self.kind), self.subject, tuple(self.paths))


class NeedLost(_Said):
    """A remaining object (``subject``) whose need would no longer be found."""

    kind: Literal["need-lost"] = "need-lost"
    distribution: str | None
    need: str
    run_time_load: str | None = None
    """Who asks for it at run time (``runtime.toml``); None for DT_NEEDED."""


class RequirementBroken(_Said):
    """A Requires-Dist of ``subject`` (``name[extra]``) the plan leaves unmet."""

    kind: Literal["requirement-broken"] = "requirement-broken"
    requirement: str
    reason: str


class SelfDependency(_Said):
    """cudafix runs inside the target and needs ``subject``, which the plan removes."""

    kind: Literal["self-dependency"] = "self-dependency"


class SharedDeleted(_Said):
    """``paths`` that remaining ``owners`` claim, deleted for good."""

    kind: Literal["shared-deleted"] = "shared-deleted"
    owners: list[str]


class NoWheel(_Said):
    """No wheel for ``subject==version`` can be had from ``source``."""

    kind: Literal["no-wheel"] = "no-wheel"
    version: str
    source: str
    problem: str
    recorded: str | None = None
    """Where it was installed from (its ``direct_url.json``), when recorded."""


class AnotherBuild(_Said):
    """The wheel for ``subject==version`` differs from the installed build at ``paths``."""

    kind: Literal["another-build"] = "another-build"
    version: str
    source: str
    differences: list[str]
    """Each path with how it differs (``PATH: only in the wheel``), as staging compared them."""
    recorded: str | None = None


class DuplicateDistInfo(_Said):
    """``subject`` has a second dist-info directory (``paths[0]``)."""

    kind: Literal["duplicate-dist-info"] = "duplicate-dist-info"


class RenamedDistInfo(_Said):
    """``subject``'s dist-info ``directory`` is not the one its RECORD lists."""

    kind: Literal["renamed-dist-info"] = "renamed-dist-info"
    directory: str
    listed: list[str]


class ThroughSymlink(_Said):
    """``paths`` the plan acts on through the symlinked directory ``subject``."""

    kind: Literal["through-symlink"] = "through-symlink"


class UnreadableRecord(_Said):
    """``subject``'s RECORD (``paths[0]``) cannot be read exactly."""

    kind: Literal["unreadable-record"] = "unreadable-record"
    reason: str


class InstalledAlready(_Said):
    """An install of ``subject==version`` while ``installed`` is installed and stays."""

    kind: Literal["installed-already"] = "installed-already"
    installed: str
    version: str


class Overwrite(_Said):
    """An install by ``subject`` writes other bytes over ``paths`` that ``owners`` claim."""

    kind: Literal["overwrite"] = "overwrite"
    owners: list[str]


class _Switch(_Said):
    """A remaining object (``subject``, owned by ``distribution``) that finds ``need`` at
    ``after`` instead of ``before``."""

    distribution: str | None
    need: str
    before: str
    after: str


class BuildSwitch(_Switch):
    """A remaining object would load another distribution's build of ``need``: ``after``
    (written by an install) instead of ``before``."""

    kind: Literal["build-switch"] = "build-switch"
    before_owners: list[str]
    after_owners: list[str]


Reason = Annotated[
    NeedLost
    | RequirementBroken
    | SelfDependency
    | SharedDeleted
    | NoWheel
    | AnotherBuild
    | DuplicateDistInfo
    | RenamedDistInfo
    | ThroughSymlink
    | UnreadableRecord
    | InstalledAlready
    | Overwrite
    | BuildSwitch,
    Field(discriminator="kind"),
]
"""Why a plan is refused: any one of these refuses it."""


class ProviderSwitched(_Switch):
    """A remaining object will load ``need`` from another file."""

    kind: Literal["provider-switch"] = "provider-switch"


class EntriesStripped(_Said):
    """RECORD entries (``paths``) that leave the environment or name a directory."""

    kind: Literal["entries-stripped"] = "entries-stripped"


class KeptForeign(_Said):
    """Kept shared ``paths`` hold ``subject``'s bytes, not ``owners``' (one per holder and
    owners, as doctor folds a clobber)."""

    kind: Literal["kept-foreign"] = "kept-foreign"
    owners: list[str]


class Unfetched(_Said):
    """Wheels (``pins``, ``NAME==VERSION``) not fetched (``--no-fetch``), so not checked."""

    kind: Literal["unfetched"] = "unfetched"
    pins: list[str]


class SameBytes(_Said):
    """An install by ``subject`` also claims ``paths`` of ``owners``, with the same bytes."""

    kind: Literal["same-bytes"] = "same-bytes"
    owners: list[str]


class MixedMajors(_Said):
    """Installs (``names``) of CUDA ``major`` into an environment of CUDA ``present``."""

    kind: Literal["mixed-majors"] = "mixed-majors"
    major: int
    names: list[str]
    present: list[int]


class RequirementsSetAside(_Said):
    """A repair that leaves out the installs of unmet requirements (``specs``): with them,
    its plan was refused (``reasons``, the first ``shown`` of them kept here); without, it
    repairs what is broken."""

    kind: Literal["requirements-set-aside"] = "requirements-set-aside"
    specs: list[str]
    reasons: int
    shown: list[Reason]


PlanWarning = Annotated[
    ProviderSwitched
    | EntriesStripped
    | KeptForeign
    | Unfetched
    | SameBytes
    | MixedMajors
    | RequirementsSetAside,
    Field(discriminator="kind"),
]
"""Worth knowing, never a refusal."""


class MissingFiles(_Said):
    """``count`` files from ``subject``'s RECORD are missing."""

    kind: Literal["missing-files"] = "missing-files"
    count: int


class ForeignOwnFiles(_Said):
    """``count`` of ``subject``'s own (unshared) files hold another build's bytes."""

    kind: Literal["foreign-own-files"] = "foreign-own-files"
    count: int


class StaleScripts(_Said):
    """``count`` of ``subject``'s scripts name an interpreter that is gone."""

    kind: Literal["stale-scripts"] = "stale-scripts"
    count: int


class CoOwnsDeleted(_Said):
    """``subject`` co-owns ``paths``, which the removal deletes."""

    kind: Literal["co-owns-deleted"] = "co-owns-deleted"


class HoldsForeign(_Said):
    """``subject``'s shared path (``paths[0]``) holds ``holder``'s bytes, not its own."""

    kind: Literal["holds-foreign"] = "holds-foreign"
    holder: str


class ScriptStep(_Said):
    """Step ``step`` (from 1) of a plan script reinstalls ``subject``."""

    kind: Literal["script-step"] = "script-step"
    step: int


ReinstallWhy = Annotated[
    MissingFiles | ForeignOwnFiles | StaleScripts | CoOwnsDeleted | HoldsForeign | ScriptStep,
    Field(discriminator="kind"),
]
"""Why a distribution is reinstalled at its recorded version."""


class _Does(BaseModel):
    """What a safer alternative does, as its kind and the pins or paths it concerns."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class RemoveThenReinstall(_Does):
    """Remove, then reinstall ``pins`` (``NAME==VERSION``) so their own files come back."""

    kind: Literal["remove-then-reinstall"] = "remove-then-reinstall"
    pins: list[str]


class RemoveKeepingShared(_Does):
    """Remove, keeping the shared ``paths`` that remaining distributions claim."""

    kind: Literal["remove-keeping-shared"] = "remove-keeping-shared"
    paths: list[str]
    foreign: list[str] = Field(default_factory=list)
    """Those of ``paths`` left holding a removed distribution's bytes (``holders``')."""
    holders: list[str] = Field(default_factory=list)


class InstallToday(_Does):
    """Install ``pins`` (``NAME==VERSION``), the build the consumers load today."""

    kind: Literal["install-today"] = "install-today"
    pins: list[str]


AlternativeDoes = Annotated[
    RemoveThenReinstall | RemoveKeepingShared | InstallToday, Field(discriminator="kind")
]
"""What a safer alternative does."""
