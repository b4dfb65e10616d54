"""doctor's report of a real venv, read in this process: typed findings to assert on.

The CLI's ``doctor --json`` carries the words; tests that check what was found read the
findings' facts instead (:class:`cudafix.model.doctor.Finding`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypeVar

from cudafix.env.target import locate_target
from cudafix.gather import gather
from cudafix.model.doctor import DoctorReport, Finding
from cudafix.plan.doctor import diagnose

T = TypeVar("T")


def diagnosed(venv: Path) -> DoctorReport:
    """What ``cudafix doctor --venv VENV`` finds, without target flags in its commands."""
    return diagnose(gather(locate_target(None, str(venv), os.environ, Path.cwd())))


def with_facts(findings: list[Finding], kind: type[T]) -> list[tuple[Finding, T]]:
    """The findings whose facts are of ``kind``, each with its facts so narrowed."""
    return [(f, f.facts) for f in findings if isinstance(f.facts, kind)]
