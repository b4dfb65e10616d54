"""What ``cudafix doctor`` reports: findings and the report, as values (``doctor --json``).

Pure values: :func:`cudafix.plan.doctor.diagnose` builds them, the renderer words them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

DOCTOR_SCHEMA_VERSION = 1

Severity = Literal["error", "warning", "info"]


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

    kind: str
    """``missing-files``, ``clobbered``, ``shared``, ``foreign-bytes``, ``unresolved``,
    ``mixed-cuda``, ``shadowed``, ``duplicate-soname``, ``requirement``, ``unsafe-record``,
    ``unreadable-record``, ``unmanaged``, ``bad-elf``."""
    severity: Severity
    message: str
    details: list[str] = []
    """Every detail line (renderers may shorten; JSON has them all)."""
    hint: str | None = None
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
    """Requirements ``cudafix repair`` would install (``nvidia-cudnn-cu12<10,>=9.8``), with
    the reason: what a framework's requested extra asks for and its run-time loads miss."""
    target_flags: str = ""
    """``--venv DIR`` or ``--python PATH``, carried into every command the report prints."""

    @property
    def healthy(self) -> bool:
        return not any(f.severity != "info" for f in self.findings)
