"""What ``cudafix doctor`` reports: findings and the report, as values.

Pure values: :func:`cudafix.plan.doctor.diagnose` builds them; :mod:`cudafix.cli.doctor_words`
alone words them (the text report and ``doctor --json``). Each finding carries the facts its
sentences are made of (:data:`FindingFacts`), so tests and comparisons never match prose.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Annotated, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from cudafix.model.names import DistName, EnvPath
from cudafix.model.reasons import ReinstallWhy

DOCTOR_SCHEMA_VERSION = 1

Severity = Literal["error", "warning", "info"]
FindingKind = Literal[
    "pending-transaction",
    "missing-files",
    "clobbered",
    "shared",
    "foreign-bytes",
    "unresolved",
    "mixed-cuda",
    "shadowed",
    "duplicate-soname",
    "requirement",
    "unsafe-record",
    "unreadable-record",
    "unmanaged",
    "bad-elf",
    "relocated",
    "bad-script",
]
Subject = tuple[str, str | None, str | None, str | None]
"""(kind, distribution, consumer, need): what a finding is about, whatever its wording."""


class _Value(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class Copy(_Value):
    """A file in the environment and the distributions whose RECORD claims it."""

    path: str
    """An EnvPath, or the absolute path the loader found it at."""
    owners: list[DistName] = []
    """Empty: no distribution claims it."""


class Holding(_Value):
    """What one path several distributions claim holds, judged against their RECORDs."""

    path: EnvPath
    state: Literal["missing", "unhashed", "identical", "holder", "unmatched"]
    """``missing``: not on disk; ``unhashed``: no owner's RECORD has its hash (bytecode pip
    compiled), so none disagrees; ``identical``: the bytes of every owner in ``owners``;
    ``holder``: the bytes of ``owners[0]`` only; ``unmatched``: no owner's bytes."""
    owners: list[str] = []


class Load(_Value):
    """One need of a load tree and the file it resolved to."""

    requester: str
    need: str
    provider: str


class PendingTransaction(_Value):
    """Transactions a killed or interrupted run left unfinished in the environment: it may
    be half-changed, and every other finding may be that half."""

    kind: Literal["pending-transaction"] = "pending-transaction"
    txids: list[str]
    """Their ids, oldest first (``cudafix recover`` finishes or rolls back each)."""


class MissingFiles(_Value):
    """RECORD files of ``Finding.distribution`` not on disk (``Finding.paths``)."""

    kind: Literal["missing-files"] = "missing-files"
    version: str


class SharedPaths(_Value):
    """Paths several distributions claim (``Finding.paths``, owned by ``Finding.owners``)."""

    kind: Literal["shared-paths"] = "shared-paths"
    holdings: list[Holding]
    """Per path, what it holds; as many as ``Finding.paths``, in their order."""
    differ: int
    """How many paths hold bytes an owner's RECORD does not list (0: ``shared``)."""
    removes: str | None = None
    """The owner ``Finding.command`` removes (None: no removal is offered)."""
    required_by: dict[str, list[str]] = {}
    """Per owner, the frameworks that require it: set when none can go without breaking one."""


class Difference(_Value):
    """How a file's bytes differ from its RECORD's: its size, or (sizes agreeing, or none
    recorded) its sha256."""

    size: int | None = None
    """The size on disk, when it is not the recorded one (None: the sha256 differs)."""
    recorded_size: int | None = None


class ForeignBytes(_Value):
    """Files of ``Finding.distribution`` holding bytes its RECORD does not list."""

    kind: Literal["foreign-bytes"] = "foreign-bytes"
    version: str
    differences: list[Difference]
    """Per path of ``Finding.paths``, how its bytes differ from the RECORD's."""


class Scripts(_Value):
    """Scripts of ``Finding.distribution`` whose ``#!`` line was rewritten (``relocated``) or
    names an interpreter that does not exist (``bad-script``)."""

    kind: Literal["scripts"] = "scripts"
    version: str | None = None
    """The distribution's version (None for a relocated script: information)."""
    interpreters: list[str]
    """Per path of ``Finding.paths``, the interpreter its ``#!`` line names."""


class Provided(_Value):
    """A file that provided a library at the last reading, and its distribution then."""

    path: str
    """EnvPath."""
    distribution: str
    version: str


class Unresolved(_Value):
    """A need (``Finding.need``) of an object that nothing on its search path provides."""

    kind: Literal["unresolved"] = "unresolved"
    requester: str
    """The object as the loader saw it (absolute, or a path outside the environment)."""
    requester_owners: list[DistName] = []
    chains: int = 0
    """The load chains through the object that fail (0: nothing loads it)."""
    root: str = ""
    """Where one of those chains starts."""
    searched: list[str] = []
    """The directories searched, each once, in order (empty: ``searched_as`` lists them)."""
    searched_as: str | None = None
    """An earlier need of the same object, searched in the same directories: listing them
    once per object keeps the report objects x (needs + directories) long."""
    searched_count: int = 0
    """How many directories were searched."""
    system: str | None = None
    """The system stack (the NVIDIA driver) that provides the need: nothing to install."""
    optional_for: str | None = None
    """The framework that loads the object only if it can, and runs without it."""
    elsewhere: list[Copy] = []
    """Copies of the need in the environment, off the object's search path."""
    gone: Provided | None = None
    """What provided the need at the last reading of this environment, gone since."""
    partly_provided: bool = False
    """Nothing loads the object, yet its other needs are met in this environment: the stack
    it was built for is installed, so it fails when loaded."""
    stack_absent: bool = False
    """None of the object's needs is met by another distribution of this environment, and
    no requirement names what it lacks: a part for a stack that is not installed (cupy's
    cuTENSOR and NCCL modules without those libraries), optional whatever loads it."""


class RunTimeUnresolved(_Value):
    """A framework's run-time load (``cudafix/data/runtime.toml``) that resolves nowhere."""

    kind: Literal["run-time"] = "run-time"
    requester: str
    requester_owners: list[DistName] = []
    requested_as: str
    """The framework (with its extra) that asks for the library."""
    installed: bool
    """Whether the libraries were installed from wheels (else the framework uses a system CUDA)."""
    searched: list[str] = []
    evidence: str
    """Where the run-time load is documented."""
    specs: list[str] = []
    """What ``Finding.command`` installs: the unmet requirements of the extra."""


class MixedMajors(_Value):
    """Distributions of more than one CUDA major installed."""

    kind: Literal["mixed-majors"] = "mixed-majors"
    majors: dict[int, list[str]]
    """Per major, the distributions of it, sorted."""
    needed_by: dict[int, list[str]] = {}
    """Per major, the frameworks whose requirement closure holds it."""
    pattern: list[str] = []
    """The removal to adapt (``nvidia-*-cuNN``) when no framework shows which major is used."""


class MixedSonames(_Value):
    """One process image (the load tree of ``root``) mapping two majors of one library."""

    kind: Literal["mixed-sonames"] = "mixed-sonames"
    root: str
    loads: list[Load]
    """The needs of those majors and where they resolved, by soname."""


class DuplicateSoname(_Value):
    """A soname (``Finding.need``) with copies no consumer's search path puts side by side."""

    kind: Literal["duplicate-soname"] = "duplicate-soname"
    copies: list[Copy]


class Shadowed(_Value):
    """A consumer whose search path holds several copies of ``Finding.need``."""

    kind: Literal["shadowed"] = "shadowed"
    requester: str
    found: str
    """The copy the loader finds first (absolute)."""
    found_owners: list[DistName] = []
    competing: int
    """The copies on the consumer's search path."""
    wrong: bool
    """The copy found is not of the build the consumer's distribution requires."""
    copies: list[Copy]
    """Every copy in the environment."""
    searched: list[str] = []
    """The directories searched, in order."""
    removes: str
    """The distribution of the copy found first: what removing it would take out."""
    repairs_shared: bool = False
    """Whether that distribution shares paths, so its removal reinstalls what shares them."""


class RequirementUnmet(_Value):
    """A Requires-Dist of ``Finding.distribution`` that the environment does not meet."""

    kind: Literal["requirement"] = "requirement"
    requested_as: str
    """The distribution with the extra the requirement belongs to (``name[extra]``)."""
    requirement: str
    problem: str
    """What is installed instead (``dep 3.0 is installed, <3,>=2 is required``)."""
    removal: list[str] = []
    """When no command fixes it: the removal of the distribution, the other way out."""


class UnsafeRecord(_Value):
    """A RECORD entry of ``Finding.distribution`` that points outside the environment."""

    kind: Literal["unsafe-record"] = "unsafe-record"
    entry: str
    problem: str


class UnreadableRecord(_Value):
    """A RECORD (``Finding.paths[0]``) that cannot be read exactly."""

    kind: Literal["unreadable-record"] = "unreadable-record"
    problem: str


class UnloadableElf(_Value):
    """A file named like a library that is no loadable ELF object."""

    kind: Literal["unloadable-elf"] = "unloadable-elf"
    path: EnvPath
    problem: str
    detail: str


class ForeignElf(_Value):
    """An ELF object built for another machine or class than this interpreter's."""

    kind: Literal["foreign-elf"] = "foreign-elf"
    path: EnvPath
    machine: str
    elf_class: int
    expected_machine: str
    expected_class: int


class Unmanaged(_Value):
    """An install cudafix does not plan for (``egg-info``, no RECORD, ...)."""

    kind: Literal["unmanaged"] = "unmanaged"
    name: str
    path: EnvPath
    install: str
    """How it was installed (:attr:`cudafix.env.inventory.Unmanaged.kind`)."""


FindingFacts = Annotated[
    PendingTransaction
    | MissingFiles
    | SharedPaths
    | ForeignBytes
    | Scripts
    | Unresolved
    | RunTimeUnresolved
    | MixedMajors
    | MixedSonames
    | DuplicateSoname
    | Shadowed
    | RequirementUnmet
    | UnsafeRecord
    | UnreadableRecord
    | UnloadableElf
    | ForeignElf
    | Unmanaged,
    Field(discriminator="kind"),
]
"""What a finding was built from, per family: the renderer words them."""


class RequiredBy(_Value):
    """A requirement ``repair`` installs because ``distribution`` requires it and it is not
    installed at all."""

    kind: Literal["required"] = "required"
    distribution: str


class RunTimeNeed(_Value):
    """A requirement ``repair`` installs because a framework's run-time load misses it."""

    kind: Literal["run-time"] = "run-time"
    requested_as: str
    requester: str
    need: str


class Returning(_Value):
    """A requirement ``repair`` installs because the library its distribution provided at
    the last reading went since (an uninstall cudafix did not run)."""

    kind: Literal["returning"] = "returning"
    need: str
    path: str
    """EnvPath of the file that provided it."""


InstallWhy = Annotated[RequiredBy | RunTimeNeed | Returning, Field(discriminator="kind")]
"""Why ``repair`` installs a requirement."""


class Choice(BaseModel):
    """One way out of a finding, as a value the renderer words (``mixed-cuda``)."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    action: Literal["keep-all", "remove-leftovers", "remove-framework"]
    """``keep-all``: nothing to do, every major is some framework's; ``remove-leftovers``:
    remove a major no framework needs; ``remove-framework``: remove the frameworks of one
    major with the libraries of that major no other framework needs."""
    majors: list[int] = []
    frameworks: list[str] = []
    """Framework distributions the choice removes."""
    distributions: list[str] = []
    """Everything the choice removes, frameworks first."""
    command: str | None = None
    """The dry run of the removal, runnable as printed (None for ``keep-all``)."""


class Finding(BaseModel):
    """One problem, with where it is, what it was found from and what to do next."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    kind: FindingKind
    severity: Severity
    facts: FindingFacts
    """What the finding was built from: everything its words say."""
    command: list[str] = []
    """The argv of the command that fixes this (empty: no command does), runnable as is."""
    distribution: str | None = None
    consumer: str | None = None
    """The object whose need this is about (EnvPath, or absolute outside the venv)."""
    need: str | None = None
    """The soname needed."""
    provider: str | None = None
    """Where the need resolves (None: nowhere)."""
    paths: list[str] = []
    """EnvPaths the finding is about (missing, shared, overwritten or competing copies)."""
    owners: list[str] = []
    """Distributions involved (owners of ``paths``, or of the provider)."""
    choices: list[Choice] = []
    """The ways out, when there is more than one (``mixed-cuda``)."""

    @property
    def subject(self) -> Subject:
        """The finding's stable identity with :attr:`paths`: messages carry counts and
        wording, so comparing runs by message calls an improvement a new problem."""
        return subject(self)


class Judged(Protocol):
    """What comparing findings reads: a :class:`Finding`, or one read back from
    ``doctor --json``."""

    @property
    def kind(self) -> str: ...
    @property
    def severity(self) -> str: ...
    @property
    def distribution(self) -> str | None: ...
    @property
    def consumer(self) -> str | None: ...
    @property
    def need(self) -> str | None: ...
    @property
    def paths(self) -> list[str]: ...


def subject(f: Judged) -> Subject:
    """(kind, distribution, consumer, need): :attr:`Finding.subject` of any judged finding."""
    return (f.kind, f.distribution, f.consumer, f.need)


J = TypeVar("J", bound=Judged)


_SAME_FACT = {"clobbered": "other-bytes", "foreign-bytes": "other-bytes"}
"""Kinds that state one fact about a path, whoever claims it: its bytes are not its
RECORD's. When the clobbering owner goes, ``clobbered`` becomes ``foreign-bytes``."""


def new_problems(before: Iterable[Judged], after: Iterable[J]) -> list[J]:
    """Problems (errors, warnings) in ``after`` that ``before`` did not have: a subject not
    found before, or one that now names a path it did not (5 missing files going to 3 is
    no new problem; a 6th is). A finding whose paths were all named before by a finding
    stating the same fact about them is not new either."""
    known: dict[Subject, set[str]] = {}
    facts: dict[str, set[str]] = {}
    for f in before:
        known.setdefault(subject(f), set()).update(f.paths)
        facts.setdefault(_SAME_FACT.get(f.kind, f.kind), set()).update(f.paths)

    def old(f: J) -> bool:
        paths = set(f.paths)
        if subject(f) in known and paths <= known[subject(f)]:
            return True
        return bool(paths) and paths <= facts.get(_SAME_FACT.get(f.kind, f.kind), set())

    return [f for f in after if f.severity != "info" and not old(f)]


class DoctorReport(BaseModel):
    """Every finding for one environment, as values (``cudafix doctor --json`` words them)."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    schema_version: int = DOCTOR_SCHEMA_VERSION
    prefix: str
    site_packages: list[str] = []
    """The environment's site-packages dirs (EnvPaths): paths are shown relative to them."""
    distributions: int
    elf_objects: int
    roots: dict[str, list[str]] = {}
    """Where load chains start, by kind (``extension``, ``executable``, ``run-time``): EnvPaths."""
    imported_objects: int = 0
    """ELF objects the chains of extension modules and run-time loads load."""
    findings: list[Finding]
    repair: dict[DistName, ReinstallWhy]
    """Distributions ``cudafix repair`` would reinstall, with the reason."""
    install: dict[str, InstallWhy] = {}
    """Requirements ``cudafix repair`` would install, with the reason: required
    distributions not installed at all (``NAME==VERSION`` as required), and what a
    framework's requested extra asks for and its run-time loads miss
    (``nvidia-cudnn-cu12<10,>=9.8``)."""
    target_flags: str = ""
    """``--venv DIR`` or ``--python PATH``, carried into every command the report prints."""
    next_command: list[str] = []
    """The argv to run next (empty when healthy or when no command fixes what is found)."""

    @property
    def healthy(self) -> bool:
        return not any(f.severity != "info" for f in self.findings)


SayFindings = Callable[[DoctorReport, Sequence[Finding]], list[str]]
"""How the command line says findings of a report's environment, one line each: a
transaction judged on doctor's findings is given it by its caller, and words nothing itself."""
