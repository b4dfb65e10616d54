"""doctor's findings in words: the sentences of the text report and of ``doctor --json``.

The findings are values (:mod:`cudafix.model.doctor`) carrying what they were found from;
every message, detail line, hint and reason is made here, from those fields alone. Paths are
shown relative to their site-packages dir, commands as a shell reads them back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from pydantic import BaseModel, ConfigDict

from cudafix.cli.wording import reinstall_text
from cudafix.model.commands import shell_join
from cudafix.model.doctor import (
    DOCTOR_SCHEMA_VERSION,
    Choice,
    Copy,
    Difference,
    DoctorReport,
    DuplicateSoname,
    Finding,
    FindingKind,
    ForeignBytes,
    ForeignElf,
    Holding,
    InstallWhy,
    MissingFiles,
    MixedMajors,
    MixedSonames,
    PendingTransaction,
    RequirementUnmet,
    RunTimeUnresolved,
    Scripts,
    Severity,
    Shadowed,
    SharedPaths,
    UnloadableElf,
    Unmanaged,
    UnreadableRecord,
    Unresolved,
    UnsafeRecord,
)
from cudafix.model.names import site_relative

T = TypeVar("T")


class WordedFinding(BaseModel):
    """One finding as ``doctor --json`` writes it: its words beside its identifying fields."""

    model_config = ConfigDict(frozen=True, defer_build=True)

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
    need: str | None = None
    provider: str | None = None
    paths: list[str] = []
    owners: list[str] = []
    choices: list[Choice] = []


class WordedReport(BaseModel):
    """The report as ``cudafix doctor --json`` writes it (schema ``DOCTOR_SCHEMA_VERSION``)."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    schema_version: int = DOCTOR_SCHEMA_VERSION
    prefix: str
    distributions: int
    elf_objects: int
    roots: dict[str, list[str]] = {}
    imported_objects: int = 0
    findings: list[WordedFinding]
    repair: dict[str, str]
    """Distributions ``cudafix repair`` would reinstall, with the reason."""
    install: dict[str, str] = {}
    """Requirements ``cudafix repair`` would install, with the reason."""
    target_flags: str = ""
    next_command: list[str] = []

    @property
    def healthy(self) -> bool:
        return not any(f.severity != "info" for f in self.findings)


def worded(report: DoctorReport, *, shown: int | None = None) -> WordedReport:
    """The report with every finding and reason in words.

    ``shown``: the text report's view, which shows at most that many detail lines a
    finding and then how many more: only those are worded, and the paths are left out (its
    lines name them). Wording every one of a million missing paths to show eight would cost
    seconds and hundreds of megabytes.
    """
    where = _Where(report.prefix, report.site_packages, shown)
    return WordedReport(
        schema_version=report.schema_version,
        prefix=report.prefix,
        distributions=report.distributions,
        elf_objects=report.elf_objects,
        roots=report.roots,
        imported_objects=report.imported_objects,
        findings=[where.finding(f) for f in report.findings],
        repair={n: reinstall_text(r, report.site_packages) for n, r in report.repair.items()},
        install={spec: where.install(why) for spec, why in report.install.items()},
        target_flags=report.target_flags,
        next_command=report.next_command,
    )


def said(report: DoctorReport, findings: Sequence[Finding]) -> list[str]:
    """Findings of ``report``'s environment as one line each: ``[kind] message``."""
    where = _Where(report.prefix, report.site_packages, shown=0)
    return [f"[{f.kind}] {where.finding(f).message}" for f in findings]


@dataclass(frozen=True)
class _Words:
    message: str
    details: list[str]
    hint: str | None = None
    reason: str | None = None


def _step(command: list[str], message: str, details: list[str], reason: str) -> _Words:
    """Words of a finding whose command is its fix: the hint is the command and why."""
    return _Words(message, details, f"{shell_join(command)}  ({reason})", reason)


def _owned(owners: Sequence[str]) -> str:
    return ", ".join(owners) or "unowned"


@dataclass(frozen=True)
class _Where:
    """One environment's paths as people read them."""

    prefix: str
    sites: Sequence[str]
    shown: int | None = None
    """At most this many detail lines a finding, then one that says how many more."""

    def show(self, path: str) -> str:
        """An EnvPath, or an absolute path inside the environment, relative to its
        site-packages dir."""
        return site_relative(path, self.sites, self.prefix)

    def copy(self, c: Copy) -> str:
        return f"{self.show(c.path)} ({_owned(c.owners)})"

    def install(self, why: InstallWhy) -> str:
        if why.kind == "required":
            return f"required by {why.distribution}"
        if why.kind == "returning":
            return (
                f"provided {why.need} ({self.show(why.path)}) at the last reading of this "
                "environment; gone since"
            )
        return (
            f"{why.requested_as} requires it; {self.show(why.requester)} loads "
            f"{self.show(why.need)} at run time"
        )

    def lines(self, items: Sequence[T], word: Callable[[T], str]) -> list[str]:
        """One detail line per item, each worded only if it is shown (the rest are
        placeholders that :meth:`finding` counts)."""
        if self.shown is None or len(items) <= self.shown:
            return [word(i) for i in items]
        return [*map(word, items[: self.shown]), *[""] * (len(items) - self.shown)]

    def finding(self, f: Finding) -> WordedFinding:
        said = self.words(f)
        details, paths = said.details, f.paths
        if self.shown is not None:
            paths = []
            if len(details) > self.shown:
                details = [*details[: self.shown], f"... and {len(details) - self.shown} more"]
        return WordedFinding(
            kind=f.kind,
            severity=f.severity,
            message=said.message,
            details=details,
            hint=said.hint,
            command=f.command,
            reason=said.reason,
            distribution=f.distribution,
            consumer=f.consumer,
            need=f.need,
            provider=f.provider,
            paths=paths,
            owners=f.owners,
            choices=f.choices,
        )

    def words(self, f: Finding) -> _Words:
        match f.facts:
            case PendingTransaction() as facts:
                return _pending(f, facts)
            case MissingFiles() as facts:
                return self._missing(f, facts)
            case SharedPaths() as facts:
                return self._shared(f, facts)
            case ForeignBytes() as facts:
                return self._foreign(f, facts)
            case Scripts() as facts:
                return self._scripts(f, facts)
            case Unresolved() as facts:
                return self._unresolved(f, facts)
            case RunTimeUnresolved() as facts:
                return self._run_time(f, facts)
            case MixedMajors() as facts:
                return _majors(f, facts)
            case MixedSonames() as facts:
                return self._sonames(facts)
            case DuplicateSoname() as facts:
                return self._duplicate(f, facts)
            case Shadowed() as facts:
                return self._shadowed(f, facts)
            case RequirementUnmet() as facts:
                return _requirement(f, facts)
            case _:
                return self._record(f)

    def _missing(self, f: Finding, facts: MissingFiles) -> _Words:
        name = f.distribution
        return _step(
            f.command,
            f"{name} {facts.version} is installed but {len(f.paths)} of its files are missing",
            self.lines(f.paths, self.show),
            f"reinstalls {name}=={facts.version}",
        )

    def _shared(self, f: Finding, facts: SharedPaths) -> _Words:
        message = f"{len(f.paths)} path(s) are claimed by {' and '.join(f.owners)}" + (
            f"; {facts.differ} hold bytes an owner's RECORD does not list" if facts.differ else ""
        )
        details = self.lines(facts.holdings, lambda h: f"{self.show(h.path)}: {_holds(h)}")
        head = "uninstalling any one of them with pip or uv deletes these files for all; "
        reason = None
        if not facts.differ:
            hint = head + "`cudafix remove` plans for that (it reinstalls or keeps them)"
        elif facts.removes is not None:
            hint = head + f"remove one with `{shell_join(f.command)}`"
            reason = (
                f"removes {facts.removes} and reinstalls the other owners, so each path holds "
                "its remaining owner's bytes"
            )
        else:
            needs = "; ".join(
                f"{', '.join(fs)} require{'s' if len(fs) == 1 else ''} {o}"
                for o in f.owners
                for fs in [facts.required_by.get(o, [])]
            )
            hint = (
                f"{needs}: removing either breaks a framework; keep both (one framework loads "
                "the other's bytes), or remove one framework with its libraries (see mixed-cuda)"
            )
        return _Words(message, details, hint, reason)

    def _foreign(self, f: Finding, facts: ForeignBytes) -> _Words:
        name = f.distribution
        return _step(
            f.command,
            f"{len(f.paths)} file(s) of {name} {facts.version} hold bytes its RECORD does not "
            "list (another build was installed over them)",
            self.lines(
                list(zip(f.paths, facts.differences, strict=True)),
                lambda pd: f"{self.show(pd[0])}: {_differs(pd[1])}",
            ),
            f"reinstalls {name}=={facts.version}",
        )

    def _scripts(self, f: Finding, facts: Scripts) -> _Words:
        name = f.distribution
        if f.kind == "relocated":
            return _Words(
                f"{self.show(f.paths[0])} of {name}: relocated, its shebang points at "
                f"{facts.interpreters[0]} (its RECORD hash covers the old shebang, so the rest "
                "of the script was not compared)",
                [],
            )
        return _step(
            f.command,
            f"{len(f.paths)} script(s) of {name} {facts.version} name an interpreter that does "
            "not exist, so they cannot start",
            self.lines(
                list(zip(f.paths, facts.interpreters, strict=True)),
                lambda pi: f"{self.show(pi[0])}: #!{pi[1]}",
            ),
            f"reinstalls {name}=={facts.version}",
        )

    def _unresolved(self, f: Finding, facts: Unresolved) -> _Words:
        why = ""
        gone = facts.gone
        if gone is not None:
            why = (
                f"; {gone.distribution} {gone.version} provided it at the last reading of this "
                "environment, and it went since"
            )
        elif facts.system is not None:
            why = f"; {f.need} comes from {facts.system}, not from a wheel"
        elif facts.optional_for is not None:
            why = f"; {facts.optional_for} imports it only if it can, and runs without it"
        elif facts.stack_absent:
            why = (
                "; no other distribution here meets any of its needs, and no requirement "
                "names this one: a part for a stack that is not installed"
            )
        elif facts.partly_provided:
            why = (
                "; its other needs are met in this environment, so the stack it was built "
                "for is installed and it fails when loaded"
            )
        elif f.severity == "info":
            why = (
                "; no extension module loads it (nor an executable or a run-time load), "
                "so nothing fails until something does"
            )
        owners = ", ".join(facts.requester_owners) or "no distribution"
        message = f"{self.show(facts.requester)} ({owners}) needs {f.need}, which is not found{why}"
        details = (
            [f"fails on each of the {facts.chains} load chain(s) through it, "
             f"e.g. from {self.show(facts.root)}"]
            if facts.chains else []
        )  # fmt: skip
        if facts.searched_as is not None:
            details.append(
                f"searched the same {facts.searched_count} directories as for {facts.searched_as}"
            )
        else:
            details += [f"searched {self.show(d)}" for d in facts.searched]
        if gone is not None:
            details.append(
                f"{f.need} was {self.show(gone.path)} of {gone.distribution} {gone.version}"
            )
            return _step(
                f.command, message, details, f"installs {gone.distribution}=={gone.version}"
            )
        details += [f"{f.need} is in the RECORD of {c}, but missing on disk" for c in f.owners]
        if facts.system is not None:
            hint = f"nothing to do unless this host should have {facts.system}"
            return _Words(message, details, hint)
        if f.command:
            if f.owners:
                reason = f"reinstalls {', '.join(f.owners)}"
            else:
                reason = (
                    f"{', '.join(sorted(set(facts.requester_owners)))} requires it; not installed"
                )
            return _step(f.command, message, details, reason)
        if not facts.elsewhere:
            return _Words(message, details, f"install the distribution that provides {f.need}")
        listing = ", ".join(self.copy(c) for c in facts.elsewhere)
        hint = (
            f"{f.need} is in the venv at {listing}, not on this object's search path: it loads "
            "only in a process that has already loaded that copy"
        )
        return _Words(message, details, hint)

    def _run_time(self, f: Finding, facts: RunTimeUnresolved) -> _Words:
        why = (
            ""
            if facts.installed
            else f"; none of {facts.requested_as}'s wheels is installed (system CUDA)"
        )
        owners = ", ".join(facts.requester_owners) or "no distribution"
        message = (
            f"{self.show(facts.requester)} ({owners}) "
            f"loads {self.show(f.need or '')} at run time (for {facts.requested_as}), which is "
            f"not found{why}"
        )
        details = [f"searched {self.show(d)}" for d in facts.searched]
        details.append(f"evidence: {facts.evidence}")
        if not facts.specs:
            return _Words(message, details)
        return _step(f.command, message, details, f"installs {', '.join(facts.specs)}")

    def _sonames(self, facts: MixedSonames) -> _Words:
        return _Words(
            f"loading {self.show(facts.root)} maps {' and '.join(ld.need for ld in facts.loads)}",
            [
                f"{self.show(ld.requester)} needs {ld.need} ({self.show(ld.provider)})"
                for ld in facts.loads
            ],
            "two majors of one library in one process: one of them is a leftover build",
        )

    def _duplicate(self, f: Finding, facts: DuplicateSoname) -> _Words:
        return _Words(
            f"{f.need} is provided at {len(facts.copies)} places, but no consumer's search "
            "path holds two of them; a process that loads both by path gets two copies",
            [self.copy(c) for c in facts.copies],
        )

    def _shadowed(self, f: Finding, facts: Shadowed) -> _Words:
        message = (
            f"{self.show(facts.requester)} finds {f.need} at {self.show(facts.found)} "
            f"({_owned(facts.found_owners)}) first, of {facts.competing} on its search path"
            + ("; that copy is not of the build its distribution requires" if facts.wrong else "")
        )
        details = [
            *(self.copy(c) for c in facts.copies),
            f"searched first: {', '.join(self.show(d) for d in facts.searched[:4])}",
        ]
        if not facts.wrong:
            return _Words(message, details)
        hint = f"remove the copy its distribution does not require: `{shell_join(f.command)}`"
        reason = f"removes {facts.removes}, whose copy is found first" + (
            ", and reinstalls what shares its paths" if facts.repairs_shared else ""
        )
        return _Words(message, details, hint, reason)

    def _record(self, f: Finding) -> _Words:
        match f.facts:
            case UnsafeRecord() as facts:
                return _Words(
                    f"{f.distribution}'s RECORD lists {facts.entry!r}: {facts.problem};"
                    " cudafix will not act on it",
                    [],
                    "inspect that RECORD by hand; cudafix refuses to remove this distribution",
                )
            case UnreadableRecord() as facts:
                return _Words(
                    f"{f.paths[0]} cannot be read exactly ({facts.problem}): pip and uv would "
                    f"each read other rows, so what {f.distribution} owns is unknown",
                    [],
                    "fix that RECORD by hand (or remove its dist-info and reinstall); until "
                    "then cudafix refuses every plan in this environment",
                )
            case UnloadableElf() as facts:
                return _Words(f"{self.show(facts.path)}: {facts.problem} ({facts.detail})", [])
            case ForeignElf() as facts:
                return _Words(
                    f"{self.show(facts.path)}: built for {facts.machine} (ELF{facts.elf_class}), "
                    f"this interpreter loads {facts.expected_machine} (ELF{facts.expected_class})",
                    [],
                )
            case Unmanaged() as facts:
                return _Words(
                    f"{facts.name} at {facts.path} is a {facts.install} install;"
                    " cudafix does not plan for it",
                    [],
                )
        raise AssertionError(f"no words for {f.facts.kind}")


def _pending(f: Finding, facts: PendingTransaction) -> _Words:
    """A run killed mid-transaction: what else the report says may be its half-change."""
    n = len(facts.txids)
    which = f"transaction {facts.txids[0]} was" if n == 1 else f"{n} transactions were"
    return _step(
        f.command,
        f"{which} not finished (the run was killed or interrupted): the environment may be "
        "half-changed, and what else is found here may be that half",
        [f"unfinished: {t}" for t in facts.txids] if n > 1 else [],
        f"rolls {'it' if n == 1 else 'each'} back to the state before it, byte for byte; "
        "add --dry-run to look first",
    )


def _differs(d: Difference) -> str:
    if d.size is not None:
        return f"{d.size} bytes, RECORD says {d.recorded_size}"
    return "sha256 differs from RECORD"


def _holds(h: Holding) -> str:
    match h.state:
        case "missing":
            return "missing"
        case "unhashed":
            return "no owner's RECORD has its hash (bytecode pip compiled), so none disagrees"
        case "identical":
            return "identical bytes in " + ", ".join(h.owners)
        case "holder":
            return f"holds {h.owners[0]}'s bytes"
        case "unmatched":
            return "holds bytes no owner's RECORD matches"


def _majors(f: Finding, facts: MixedMajors) -> _Words:
    """Which framework needs which major, and the way out when one is a leftover."""
    used = facts.needed_by
    needed = "; ".join(
        f"{', '.join(fs)} need{'s' if len(fs) == 1 else ''} cu{m}" for m, fs in sorted(used.items())
    )
    message = (
        "distributions for more than one CUDA major are installed: "
        + "; ".join(f"cu{k}: {len(v)}" for k, v in sorted(facts.majors.items()))
        + (f" ({needed})" if needed else "")
    )
    details = [f"cu{k}: {', '.join(v)}" for k, v in sorted(facts.majors.items())]
    leftover = sorted(set(facts.majors) - set(used))
    hint = reason = None
    if not used:
        hint = f"remove the leftovers of the major you do not use: `{shell_join(facts.pattern)}`"
    elif len(used) == 1 and leftover:
        only = ", ".join(f"cu{m}" for m in sorted(used))
        commands = "; ".join(f"`{c.command}`" for c in f.choices)
        hint = f"what import loads needs {only}; remove the leftovers: {commands}"
        reason = (
            f"what import loads needs only cu{next(iter(used))}; the cu{leftover[0]} "
            "wheels are leftovers no framework needs"
        )
    return _Words(message, details, hint, reason)


def _requirement(f: Finding, facts: RequirementUnmet) -> _Words:
    """A broken Requires-Dist, and what its command (``remove``, ``install`` or ``repair``)
    does about it; by hand when none does."""
    name = f.distribution
    message = f"{facts.requested_as} requires {facts.requirement}: {facts.problem}"
    match f.command[1:2]:
        case ["remove"]:
            reason = (
                f"{name} is a leftover of a CUDA major no framework here needs; "
                "removing it, with --repair putting back the files it shares, mends this"
            )
        case ["install"]:
            reason = f"installs it as {name} requires"
        case ["repair"]:
            allowed = facts.requirement.split(";")[0].strip()
            reason = f"installs a version {allowed} allows, as uv resolves it (or remove {name})"
        case _:
            hint = f"install a matching version, or `{shell_join(facts.removal)}`"
            return _Words(message, [], hint)
    return _step(f.command, message, [], reason)
