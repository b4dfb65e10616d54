"""What ``cudafix doctor`` reports: findings and the report, as values (``doctor --json``).

Pure values: :func:`cudafix.plan.doctor.diagnose` builds them, the renderer words them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict

DOCTOR_SCHEMA_VERSION = 1

Severity = Literal["error", "warning", "info"]
FindingKind = Literal[
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


class Choice(BaseModel):
    """One way out of a finding, as a value the renderer words (``mixed-cuda``)."""

    model_config = ConfigDict(frozen=True)

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
    """One problem, with where it is and what to do next."""

    model_config = ConfigDict(frozen=True)

    kind: FindingKind
    severity: Severity
    message: str
    details: list[str] = []
    """Every detail line (renderers may shorten; JSON has them all)."""
    hint: str | None = None
    """The next step as a person reads it: ``reason`` and ``command`` together."""
    command: list[str] = []
    """The argv of the command that fixes this (empty: no command does), runnable as is."""
    reason: str | None = None
    """Why ``command`` is the fix, or what to do when no command does."""
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
        return (self.kind, self.distribution, self.consumer, self.need)


_SAME_FACT = {"clobbered": "other-bytes", "foreign-bytes": "other-bytes"}
"""Kinds that state one fact about a path, whoever claims it: its bytes are not its
RECORD's. When the clobbering owner goes, ``clobbered`` becomes ``foreign-bytes``."""


def new_problems(before: Iterable[Finding], after: Iterable[Finding]) -> list[Finding]:
    """Problems (errors, warnings) in ``after`` that ``before`` did not have: a subject not
    found before, or one that now names a path it did not (5 missing files going to 3 is
    no new problem; a 6th is). A finding whose paths were all named before by a finding
    stating the same fact about them is not new either."""
    known: dict[Subject, set[str]] = {}
    facts: dict[str, set[str]] = {}
    for f in before:
        known.setdefault(f.subject, set()).update(f.paths)
        facts.setdefault(_SAME_FACT.get(f.kind, f.kind), set()).update(f.paths)

    def old(f: Finding) -> bool:
        paths = set(f.paths)
        if f.subject in known and paths <= known[f.subject]:
            return True
        return bool(paths) and paths <= facts.get(_SAME_FACT.get(f.kind, f.kind), set())

    return [f for f in after if f.severity != "info" and not old(f)]


class DoctorReport(BaseModel):
    """Every finding for one environment (``cudafix doctor --json``)."""

    model_config = ConfigDict(frozen=True)

    schema_version: int = DOCTOR_SCHEMA_VERSION
    prefix: str
    distributions: int
    elf_objects: int
    roots: dict[str, list[str]] = {}
    """Where load chains start, by kind (``extension``, ``executable``, ``run-time``): EnvPaths."""
    imported_objects: int = 0
    """ELF objects the chains of extension modules and run-time loads load."""
    findings: list[Finding]
    repair: dict[str, str]
    """Distributions ``cudafix repair`` would reinstall, with the reason."""
    install: dict[str, str] = {}
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
