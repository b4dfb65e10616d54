"""Human-readable output: a plan as a diff a person reads in ten seconds, and doctor findings.

Rendering only formats values; it decides nothing. Colour is applied by the caller's
``style`` function (click.style on a terminal, identity elsewhere).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from cudafix.model.errors import CudafixError
from cudafix.model.names import site_relative

if TYPE_CHECKING:  # imported for annotations only: --help must not pay for pydantic
    from cudafix.model.doctor import Choice, DoctorReport, Finding
    from cudafix.model.plan import Plan

Style = Callable[..., str]

if TYPE_CHECKING:
    from pydantic import BaseModel

    M = TypeVar("M", bound=BaseModel)


def shown(text: str) -> str:
    """``text`` safe to print: each control or other non-printing character written as its
    Python escape (``\\n``, ``\\x1b``, ``\\u202e``).

    File names, RECORD rows, distribution names and error details come from the environment
    or a file, and a name holding a newline or an ESC sequence would otherwise forge output
    lines or drive the terminal. The renderer applies it to every value it prints; the line
    breaks and colours it adds itself are its own.
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _shown_value(value: Any) -> Any:
    if isinstance(value, str):
        return shown(value)
    if isinstance(value, list):
        return [_shown_value(v) for v in value]
    if isinstance(value, dict):
        return {_shown_value(k): _shown_value(v) for k, v in value.items()}
    return value


def printable(model: M) -> M:
    """``model`` with :func:`shown` applied to every string in it, keys included; the same
    object when nothing needed escaping (the usual case)."""
    dumped = model.model_dump()
    cleaned = _shown_value(dumped)
    return model if cleaned == dumped else type(model).model_validate(cleaned)


def plain(text: str, **_kw: object) -> str:
    return text


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    raise AssertionError("unreachable")


def _site(plan: Plan, path: str) -> str:
    return site_relative(path, plan.target.site_packages, plan.target.prefix)


def render_plan(plan: Plan, style: Style = plain, *, dry_run: bool = True) -> str:
    """The plan as sections: what goes, what comes back, what breaks, the verdict, what next."""
    plan = printable(plan)
    out: list[str] = [f"Environment: {plan.target.prefix}"]
    out += _section(
        "Remove",
        [
            style(f"- {d.name} {d.version}", fg="red") + f"  ({d.files} files, {_size(d.bytes)})"
            for d in plan.remove
        ],
    )
    out += _section(
        "Reinstall (same version, --no-deps)",
        [style(f"+ {r.name}=={r.version}", fg="green") + f"  ({r.reason})" for r in plan.reinstall],
    )
    out += _section(
        "Shared paths (claimed by a removed and a remaining distribution)", _shared_groups(plan)
    )
    out += _section(
        "Sonames lost",
        [
            style(f"x {_site(plan, lost.need)}", fg="red", bold=True)
            + (" loaded at run time by" if lost.run_time_load else " needed by")
            + f" {_site(plan, lost.consumer)}"
            + f" ({lost.consumer_distribution or 'no distribution'})"
            + (f" for {lost.run_time_load}" if lost.run_time_load else "")
            + "\n"
            f"    resolves today to {_site(plan, lost.resolved_before)}\n"
            f"    which goes: claimed by {' and '.join(lost.lost_file_owners) or 'no distribution'}"
            + (" (all removed or deleted with the shared path)" if lost.lost_file_owners else "")
            + "\n    nothing else on its search path provides it"
            + (
                f" (searched {', '.join(_site(plan, d) for d in lost.searched[:4])}"
                + (", ..." if len(lost.searched) > 4 else "")
                + ")"
                if lost.searched
                else ""
            )
            for lost in plan.lost
        ],
    )
    out += _section(
        "Provider switches",
        [
            style("~ ", fg="yellow")
            + f"{s.need} for {_site(plan, s.consumer)}: "
            + (
                f"{_site(plan, s.before)} ({', '.join(s.before_owners) or 'system'}) -> "
                f"{_site(plan, s.after)} ({', '.join(s.after_owners) or 'system'})"
                if s.before != s.after
                else f"{_site(plan, s.after)}, {', '.join(s.before_owners)}'s build -> "
                f"{', '.join(s.after_owners)}'s build (same path, other bytes)"
            )
            for s in plan.switches
        ],
    )
    out += _section(
        "Install (exact pins, --no-deps)",
        [
            style(f"+ {i.name}=={i.version}", fg="green") + f"  ({len(i.paths)} files)"
            for i in plan.install
        ],
    )
    out += _section(
        "Overwritten (paths installed distributions claim, written by an install)",
        _overwritten_groups(plan),
    )
    out += _section("Probes (from the script)", _script_probes(plan))
    out += _section(
        "Requirements broken",
        [f"{b.requested_as} requires {b.requirement}: {b.reason}" for b in plan.requirement_breaks],
    )
    out += _section(
        "Refused RECORD entries",
        [f"{r.distribution}: {r.entry!r} ({r.reason})" for r in plan.refused_paths],
    )
    out += _section("Warnings", [style("! ", fg="yellow") + w for w in plan.warnings])
    out.append("")
    if plan.verdict == "pass":
        out.append(style("Verdict: PASS", fg="green", bold=True) + f"  ({_counts(plan)})")
        if dry_run:
            out.append("Next: run the same command without --dry-run to apply it as a transaction.")
    else:
        out.append(style("Verdict: REFUSED", fg="red", bold=True))
        out += [f"  - {r}" for r in plan.reasons]
        if plan.alternatives:
            out.append("Safe alternatives (re-simulated, they pass):")
            out += [
                f"  {_command(plan, a.command)}\n      # {a.summary}" for a in plan.alternatives
            ]
    return "\n".join(out)


def _script_probes(plan: Plan) -> list[str]:
    p = plan.probes
    lines = [f"import {m}" for m in p.imports] + [f"python: {c}" for c in p.python]
    lines += [f"command: {c}" for c in p.commands]
    return lines + [f"{e.python or e.command!r} prints {e.output!r}" for e in p.expect]


def _overwritten_groups(plan: Plan) -> list[str]:
    """One line per (writer, owners, same bytes or not), every path listed."""
    groups: dict[tuple[str, tuple[str, ...], bool], list[str]] = {}
    for c in plan.overwritten:
        groups.setdefault((c.by, tuple(c.owners), c.same_bytes), []).append(_site(plan, c.path))
    return [
        f"{by} writes over {len(paths)} path(s) {' and '.join(owners)} claims"
        f" ({'same bytes' if same else 'OTHER BYTES'}):" + "".join(f"\n    {p}" for p in paths)
        for (by, owners, same), paths in groups.items()
    ]


def _shared_groups(plan: Plan) -> list[str]:
    """One line per (owners, holder, fate): 28 cudnn paths read as one fact, not 28."""
    groups: dict[tuple[tuple[str, ...], str | None, str], list[str]] = {}
    for s in plan.shared_paths:
        groups.setdefault((tuple(s.owners), s.holder, s.fate), []).append(_site(plan, s.path))
    lines = []
    for (owners, holder, fate), paths in groups.items():
        shown = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
        held = f"{holder}'s bytes" if holder else "no owner's bytes"
        lines.append(f"{shown}\n    claimed by {' and '.join(owners)}; holds {held}; {fate}")
    return lines


def _counts(plan: Plan) -> str:
    return (
        f"{len(plan.remove)} removed, {len(plan.reinstall)} reinstalled, "
        f"{len(plan.deleted_paths)} paths deleted, {len(plan.kept_paths)} kept"
    )


def _command(plan: Plan, flag: str) -> str:
    """The full command line of an alternative, with the options the plan was made with."""
    if flag.startswith("cudafix "):
        return flag  # an alternative that is a command of its own (an install's)
    words = ["cudafix", "remove", *(shlex.quote(s) for s in plan.selectors)]
    words += ["--venv", shlex.quote(plan.target.prefix), flag]
    opts = plan.options
    words += ["--offline"] if opts.offline else []
    words += [w for link in opts.find_links for w in ("--find-links", shlex.quote(link))]
    words += ["--backend", opts.backend] if opts.backend != "uv" else []
    words += ["--allow-broken-requirements"] if opts.allow_broken_requirements else []
    return " ".join([*words, "--dry-run"])


def _section(title: str, lines: Sequence[str]) -> list[str]:
    return [f"\n{title}:", *(f"  {line}" for line in lines)] if lines else []


def _more(total: int, shown: int, what: str) -> list[str]:
    return [f"    ... and {total - shown} more {what}".rstrip()] if total > shown else []


_DETAILS = 8
_MARK = {"error": ("x", "red"), "warning": ("!", "yellow"), "info": ("i", "blue")}


def render_report(report: DoctorReport, style: Style = plain) -> str:
    """Doctor findings, most urgent first, each with its next step."""
    report = printable(report)
    out = [
        f"Environment: {report.prefix}",
        f"{report.distributions} distributions, {report.elf_objects} ELF objects",
        _entry_points(report),
    ]
    for finding in report.findings:
        out += _finding(finding, style)
    out.append("")
    problems = [f for f in report.findings if f.severity != "info"]
    if not problems:
        out.append(style("Healthy: no problems found.", fg="green", bold=True))
    else:
        out.append(style(f"{len(problems)} problem(s) found.", fg="red", bold=True))
        if report.repair:
            command = " ".join(filter(None, ["cudafix repair --dry-run", report.target_flags]))
            out.append(f"Next: {command}   # reinstalls " + ", ".join(report.repair))
    return "\n".join(out)


def _entry_points(report: DoctorReport) -> str:
    """How many objects import loads, and from how many entry points of each kind."""
    names = {"extension": "extension module(s)", "executable": "executable(s)",
             "run-time": "run-time load(s)"}  # fmt: skip
    kinds = ", ".join(f"{len(v)} {names.get(k, k)}" for k, v in sorted(report.roots.items()))
    return f"import loads {report.imported_objects} of them; load chains start at {kinds or 'none'}"


def _finding(f: Finding, style: Style) -> Iterable[str]:
    mark, colour = _MARK[f.severity]
    yield ""
    yield style(f"{mark} [{f.kind}] ", fg=colour, bold=True) + f.message
    yield from (f"    {d}" for d in f.details[:_DETAILS])
    yield from _more(len(f.details), _DETAILS, "")
    if f.hint:
        yield f"    -> {f.hint}"
    if not f.hint:
        yield from (f"    -> {_choice(c)}" for c in f.choices)


def _choice(c: Choice) -> str:
    """One way out of a finding, in words."""
    majors = " and ".join(f"cu{m}" for m in c.majors)
    if c.action == "keep-all":
        both = "both" if len(c.majors) == 2 else "all"
        return f"keep {both} (nothing to do): {majors} are each what an installed framework needs"
    if c.action == "remove-leftovers":
        return f"remove the {majors} leftovers: `{c.command}`"
    if not c.command:
        return f"the {majors} framework's libraries are all needed by another framework"
    who = ", ".join(c.frameworks) or f"the {majors} libraries"
    return f"or remove {who} with its {majors} libraries: `{c.command}`"


def render_error(err: CudafixError, style: Style = plain) -> str:
    """One clear line, then context and the next command (pip's diagnostic errors)."""
    lines = [style("error", fg="red", bold=True) + f": {shown(err.message)}"]
    lines += [f"  {shown(c)}" for c in err.context]
    if err.hint:
        lines.append(f"hint: {shown(err.hint)}")
    return "\n".join(lines)
