"""doctor's words are made from its findings' fields alone, in the shape ``doctor --json`` had."""

from __future__ import annotations

import dataclasses
import json

from cudafix.cli.doctor_words import said, worded
from cudafix.model.doctor import (
    Difference,
    DoctorReport,
    Finding,
    ForeignBytes,
    MissingFiles,
    RequiredBy,
    RunTimeNeed,
)
from cudafix.model.reasons import MissingFiles as MissingWhy
from cudafix.plan.doctor import diagnose
from tests.support.facts import PREFIX, SITE, Dist, env, facts

REPAIR = ["cudafix", "repair", "--dry-run", "--venv", "/v"]


def _report() -> DoctorReport:
    missing = Finding(
        kind="missing-files",
        severity="error",
        facts=MissingFiles(version="1.2"),
        distribution="pa",
        paths=[env("pa/b.py")],
        command=REPAIR,
    )
    return DoctorReport(
        prefix=str(PREFIX),
        site_packages=[SITE],
        distributions=1,
        elf_objects=0,
        findings=[missing],
        repair={"pa": MissingWhy(subject="pa", count=1)},
        install={
            "pb==1": RequiredBy(distribution="pa"),
            "pc<2": RunTimeNeed(
                requested_as="fw[cuda]", requester=f"{PREFIX}/{SITE}/fw/x.so", need="libc.so.1"
            ),
        },
        target_flags="--venv /v",
        next_command=REPAIR,
    )


def test_a_finding_is_worded_from_its_facts_with_paths_shown_site_relative() -> None:
    [f] = worded(_report()).findings
    assert f.message == "pa 1.2 is installed but 1 of its files are missing"
    assert f.details == ["pa/b.py"]
    assert f.reason == "reinstalls pa==1.2"
    assert f.hint == "cudafix repair --dry-run --venv /v  (reinstalls pa==1.2)"


def test_the_reports_reasons_are_worded() -> None:
    report = worded(_report())
    assert report.repair == {"pa": "1 file(s) from its RECORD are missing"}
    assert report.install == {
        "pb==1": "required by pa",
        "pc<2": "fw[cuda] requires it; fw/x.so loads libc.so.1 at run time",
    }


def test_the_json_keeps_its_schema_and_key_order() -> None:
    data = json.loads(worded(_report()).model_dump_json())
    assert list(data) == [
        "schema_version", "prefix", "distributions", "elf_objects", "roots",
        "imported_objects", "findings", "repair", "install", "target_flags", "next_command",
    ]  # fmt: skip
    assert list(data["findings"][0]) == [
        "kind", "severity", "message", "details", "hint", "command", "reason",
        "distribution", "consumer", "need", "provider", "paths", "owners", "choices",
    ]  # fmt: skip


def test_every_finding_of_a_diagnosis_is_said_on_one_line() -> None:
    f = facts(
        [Dist("nvidia-a-cu12", "1", {"a.py": "A"}), Dist("nvidia-b-cu13", "1", {"b.py": "B"})]
    )
    report = diagnose(f)
    assert said(report, report.findings) == [
        "[mixed-cuda] distributions for more than one CUDA major are installed: cu12: 1; cu13: 1"
    ]


def test_how_foreign_bytes_differ_is_worded_per_file() -> None:
    found = Finding(
        kind="foreign-bytes",
        severity="warning",
        facts=ForeignBytes(
            version="2", differences=[Difference(size=3, recorded_size=1), Difference()]
        ),
        distribution="pa",
        paths=[env("pa/a.so"), env("pa/b.so")],
        command=REPAIR,
    )
    [f] = worded(_report().model_copy(update={"findings": [found]})).findings
    assert f.message == (
        "2 file(s) of pa 2 hold bytes its RECORD does not list "
        "(another build was installed over them)"
    )
    assert f.details == ["pa/a.so: 3 bytes, RECORD says 1", "pa/b.so: sha256 differs from RECORD"]


def test_an_unfinished_transaction_is_worded_with_its_id_and_recover_as_the_fix() -> None:
    f = facts([Dist("pa", "1", {"a.py": "A"})])
    report = diagnose(dataclasses.replace(f, pending=("20261205T1",)), ("--venv", "/v"))
    [w] = worded(report).findings
    assert (w.kind, w.severity, w.details) == ("pending-transaction", "error", [])
    assert w.message.startswith("transaction 20261205T1 was not finished")
    assert w.hint is not None and w.hint.startswith("cudafix recover --venv /v  (rolls it back")
    two = diagnose(dataclasses.replace(f, pending=("t1", "t2")), ("--venv", "/v"))
    [w] = worded(two).findings
    assert w.message.startswith("2 transactions were") and w.details == [
        "unfinished: t1",
        "unfinished: t2",
    ]
