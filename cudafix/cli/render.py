"""Human-readable output: a plan as a diff a person reads in ten seconds, and doctor findings.

Rendering only formats values; it decides nothing. Colour is applied by the caller's
``style`` function (click.style on a terminal, identity elsewhere).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from cudafix.cli.wording import (
    alternative_text,
    error_context,
    reason_lines,
    reinstall_text,
    undo_effects,
    warning_text,
)
from cudafix.model.commands import shell_join
from cudafix.model.errors import CudafixError
from cudafix.model.names import site_relative

if TYPE_CHECKING:  # imported for annotations only: --help must not pay for pydantic
    from pathlib import Path

    from cudafix.cli.doctor_words import WordedFinding, WordedReport
    from cudafix.model.doctor import Choice, DoctorReport
    from cudafix.model.plan import Alternative, Plan
    from cudafix.model.transaction import HistoryEntry, TransactionDetail, UndoPreview

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


def size_text(n: int) -> str:
    """Bytes as a person reads them."""
    return _size(n)


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    raise AssertionError("unreachable")


def _site(plan: Plan, path: str) -> str:
    return site_relative(path, plan.target.site_packages, plan.target.prefix)


def render_plan(
    plan: Plan,
    style: Style = plain,
    *,
    verbosity: Verbosity = 0,
    next_argv: Sequence[str] | None = None,
    saved: str | None = None,
) -> str:
    """The plan as sections: what goes, what comes back, what breaks, the verdict, where the
    plan was ``saved``, and the command to run next (under ``verbosity`` -1, ``--quiet``: the
    verdict, its reasons and what next only)."""
    plan = printable(plan)
    verdict = _plan_verdict(plan, style)
    if saved is not None:
        verdict.append(f"Plan written to {shown(saved)}.")
    if next_argv:
        verdict.append(f"Next: {shown(shell_join(next_argv))}")
    if verbosity < 0:
        return "\n".join(verdict)
    return "\n".join([*_plan_sections(plan, style), "", *verdict])


def _lost_groups(plan: Plan, style: Style) -> list[str]:
    """One entry per library lost, its file and what takes it, naming the objects that
    need or load it (the first few, and how many more): a torch build's thirty objects
    losing one library is one entry, not thirty."""
    groups: dict[tuple[str, str, tuple[str, ...], str | None, tuple[str, ...]], list[str]] = {}
    for lost in plan.lost:
        key = (
            lost.need, lost.resolved_before, tuple(lost.lost_file_owners),
            lost.run_time_load, tuple(lost.searched),
        )  # fmt: skip
        who = f"{_site(plan, lost.consumer)} ({lost.consumer_distribution or 'no distribution'})"
        groups.setdefault(key, []).append(who)
    out = []
    for (need, before, owners, run_time, searched), consumers in groups.items():
        named = ", ".join(consumers[:_CONSUMERS_SHOWN])
        if len(consumers) > _CONSUMERS_SHOWN:
            named += f" and {len(consumers) - _CONSUMERS_SHOWN} more"
        out.append(
            style(f"x {_site(plan, need)}", fg="red", bold=True)
            + (" loaded at run time by" if run_time else " needed by")
            + f" {named}"
            + (f" for {run_time}" if run_time else "")
            + "\n"
            f"    resolves today to {_site(plan, before)}\n"
            f"    which goes: claimed by {' and '.join(owners) or 'no distribution'}"
            + (" (all removed or deleted with the shared path)" if owners else "")
            + "\n    nothing else on its search path provides it"
            + (
                f" (searched {', '.join(_site(plan, d) for d in searched[:4])}"
                + (", ..." if len(searched) > 4 else "")
                + ")"
                if searched
                else ""
            )
        )
    return out


_CONSUMERS_SHOWN = 3
"""Objects named per lost library; the rest are counted (``--json`` lists every one)."""


def _plan_sections(plan: Plan, style: Style) -> list[str]:
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
        [
            style(f"+ {r.name}=={r.version}", fg="green")
            + f"  ({reinstall_text(r.reason, plan.target.site_packages)})"
            for r in plan.reinstall
        ],
    )
    out += _section(
        "Shared paths (claimed by a removed and a remaining distribution)", _shared_groups(plan)
    )
    out += _section("Sonames lost", _lost_groups(plan, style))
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
    out += _section(
        "Warnings",
        [
            style("! ", fg="yellow") + warning_text(w, plan.target, plan.options.sources.cli_args())
            for w in plan.warnings
            if w.kind != "provider-switch"  # each is a line of "Provider switches" above
        ],
    )
    return out


def _plan_verdict(plan: Plan, style: Style) -> list[str]:
    out: list[str] = []
    if plan.verdict == "pass":
        out.append(style("Verdict: PASS", fg="green", bold=True) + f"  ({_counts(plan)})")
    else:
        out.append(style("Verdict: REFUSED", fg="red", bold=True))
        out += [f"  - {r}" for r in reason_lines(plan.reasons, plan.target)]
        if _only_requirements(plan):
            out.append(
                "  (add --allow-broken-requirements to go ahead, leaving those requirements broken)"
            )
        sections = [_checked_alternatives(plan), _unchecked_alternatives(plan)]
        if plan.alternatives and plan.alternatives[0].unstaged:
            sections.reverse()  # the first alternative (doctor's choice) is offered first
        out += [line for section in sections for line in section]
    return out


def _alternative_lines(plan: Plan, alternatives: Sequence[Alternative]) -> list[str]:
    sites = plan.target.site_packages
    return [
        f"  {shell_join(a.argv)}\n      # {alternative_text(a.summary, sites)}"
        for a in alternatives
    ]


def _checked_alternatives(plan: Plan) -> list[str]:
    checked = [a for a in plan.alternatives if not a.unstaged]
    if not checked:
        return []
    return ["Safe alternatives (re-simulated, they pass):", *_alternative_lines(plan, checked)]


def _unchecked_alternatives(plan: Plan) -> list[str]:
    unchecked = [a for a in plan.alternatives if a.unstaged]
    if not unchecked:
        return []
    where = shell_join(plan.options.sources.cli_args()) or "uv's default index"
    return [
        "Alternatives that pass if the wheels match the installed builds (their dry "
        f"run fetches and compares them, from {where}):",
        *_alternative_lines(plan, unchecked),
    ]


def _only_requirements(plan: Plan) -> bool:
    """Whether ``--allow-broken-requirements`` alone turns the verdict: broken requirements
    are the plan's only reasons (a flag is suggested only when it changes the verdict)."""
    return (
        bool(plan.reasons)
        and not plan.options.allow_broken_requirements
        and all(r.kind == "requirement-broken" for r in plan.reasons)
    )


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
    groups: dict[tuple[tuple[str, ...], str, str], list[str]] = {}
    for s in plan.shared_paths:
        if len(s.matching) > 1:  # the wheels ship the same bytes there, as doctor says
            held = "identical bytes in " + ", ".join(s.matching)
        else:
            held = f"holds {s.holder}'s bytes" if s.holder else "holds no owner's bytes"
        groups.setdefault((tuple(s.owners), held, s.fate), []).append(_site(plan, s.path))
    lines = []
    for (owners, held, fate), paths in groups.items():
        shown = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
        lines.append(f"{shown}\n    claimed by {' and '.join(owners)}; {held}; {fate}")
    return lines


def _counts(plan: Plan) -> str:
    """Counts that add up: a kept path is one the backend deletes and the transaction puts
    back, so it counts as kept, not also as deleted."""
    installed = f", {len(plan.install)} installed" if plan.install else ""
    deleted = len(set(plan.deleted_paths) - set(plan.kept_paths))  # older plans: in both
    return (
        f"{len(plan.remove)} removed, {len(plan.reinstall)} reinstalled{installed}, "
        f"{deleted} paths deleted, {len(plan.kept_paths)} kept"
    )


def _section(title: str, lines: Sequence[str]) -> list[str]:
    return [f"\n{title}:", *(f"  {line}" for line in lines)] if lines else []


def _more(total: int, shown: int, what: str) -> list[str]:
    return [f"    ... and {total - shown} more {what}".rstrip()] if total > shown else []


Verbosity = int
"""-1 ``--quiet``: the verdict and the next command; 0: problems, one line per kind of
information; 1 ``--verbose``: every finding."""

_DETAILS = 8
_MARK = {"error": ("x", "red"), "warning": ("!", "yellow"), "info": ("i", "blue")}
_NOTES = {
    "unresolved": "needs only the NVIDIA driver, an optional system library or a plugin "
    "nothing loads would provide, not found",
    "shared": "path groups several distributions claim with identical bytes",
    "duplicate-soname": "sonames with copies no search path puts side by side",
    "shadowed": "sonames with several copies on one search path, the right one found first",
    "bad-elf": "files named like libraries that this interpreter cannot load",
    "unmanaged": "installs cudafix does not plan for",
    "relocated": "scripts whose shebang was rewritten for this location (a relocated venv)",
}


def render_report(report: DoctorReport, style: Style, levels: Sequence[Verbosity]) -> list[str]:
    """Doctor findings: errors, warnings, then information folded by kind (all of it at
    verbosity 1); the verdict and the next command last. One text per verbosity of
    ``levels``, worded once: doctor keeps ``-q``, plain and ``-v``; 20k notes take a second."""
    from cudafix.cli.doctor_words import worded

    report_shown = printable(worded(report, shown=_DETAILS))
    return [_render_worded(report_shown, style, v) for v in levels]


def _render_worded(report: WordedReport, style: Style, verbosity: Verbosity) -> str:
    out = [
        f"Environment: {report.prefix}",
        f"{report.distributions} distributions, {report.elf_objects} ELF objects",
        _entry_points(report),
    ]
    for severity in ("error", "warning"):
        for finding in (f for f in report.findings if f.severity == severity):
            out += _finding(finding, style)
    decisions = [f for f in report.findings if f.severity == "info" and f.choices]
    notes = [f for f in report.findings if f.severity == "info" and not f.choices]
    if verbosity >= 0:
        for finding in decisions:  # information that offers a choice is read, not folded
            out += _finding(finding, style)
    if verbosity > 0:
        for finding in notes:
            out += _finding(finding, style)
    elif notes:
        out.append("")
        out += _folded(notes, style)
    if verbosity < 0:
        out = []
    else:
        out.append("")
    out += _verdict(report, style)
    return "\n".join(out)


def _folded(notes: Sequence[WordedFinding], style: Style) -> list[str]:
    """One line per kind of information: how many, what they are, how to see them."""
    kinds: dict[str, int] = {}
    for f in notes:
        kinds[f.kind] = kinds.get(f.kind, 0) + 1
    mark = style("i", fg="blue", bold=True)
    return [
        f"{mark} {n} {'note' if n == 1 else 'notes'}: {_NOTES.get(kind, kind)}; `--verbose` to list"
        for kind, n in kinds.items()
    ]


def _verdict(report: WordedReport, style: Style) -> list[str]:
    problems = [f for f in report.findings if f.severity != "info"]
    if not problems:
        return [style("Healthy: no problems found.", fg="green", bold=True)]
    out = [style(f"{len(problems)} problem(s) found.", fg="red", bold=True)]
    if report.next_command:
        why = _next_why(report) if report.next_command[1:2] in (["repair"], ["install"]) else ""
        out.append(f"Next: {shell_join(report.next_command)}" + (f"   # {why}" if why else ""))
    return out


def _next_why(report: WordedReport) -> str:
    doing = []
    if report.install:
        doing.append("installs " + ", ".join(f"{s} ({why})" for s, why in report.install.items()))
    if report.repair:
        doing.append("reinstalls " + ", ".join(report.repair))
    return "; ".join(doing)


def _entry_points(report: WordedReport) -> str:
    """How many objects import loads, and from how many entry points of each kind."""
    names = {"extension": "extension module(s)", "executable": "executable(s)",
             "run-time": "run-time load(s)"}  # fmt: skip
    kinds = ", ".join(f"{len(v)} {names.get(k, k)}" for k, v in sorted(report.roots.items()))
    return f"import loads {report.imported_objects} of them; load chains start at {kinds or 'none'}"


def _finding(f: WordedFinding, style: Style) -> Iterable[str]:
    mark, colour = _MARK[f.severity]
    yield ""
    yield style(f"{mark} [{f.kind}] ", fg=colour, bold=True) + f.message
    yield from (f"    {d}" for d in f.details)  # worded for it: the first few, how many more
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
    lines += [f"  {shown(c)}" for c in error_context(err)]
    if err.hint:
        lines.append(f"hint: {shown(err.hint)}")
    return "\n".join(lines)


# -- the transaction log ------------------------------------------------------------------


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "-"


def _command_line(command: Sequence[str]) -> str:
    """The recorded command as it was typed: ``cudafix`` and its arguments, quoted."""
    return shown(shell_join(["cudafix", *command[1:]])) if command else "-"


def _changed(e: HistoryEntry, short: Callable[[str], str] = str) -> str:
    """What a transaction changed, in package terms; one not committed changed nothing."""
    said = shown(", ".join(e.changed))
    if e.state != "committed":
        planned = shown(", ".join(e.planned))
        return "nothing changed" + (f" (planned: {planned})" if planned else "")
    if e.undoes:
        said = f"undid {short(e.undoes)}" + (f": {said}" if said else "")
    said = said or "nothing"
    return said + (f" (undone by {short(e.undone_by)})" if e.undone_by else "")


_STATE_COLOUR = {"committed": "green", "rolled-back": "yellow", "pending": "red"}


def render_history(prefix: Path, entries: Sequence[HistoryEntry], style: Style = plain) -> str:
    """Newest first, like ``git log``: short id, time, command, outcome, what it changed in
    package terms; then the command line as typed."""
    if not entries:
        return f"No transactions in {prefix}."
    shorts = {e.txid: e.short or e.txid for e in entries}

    def short(txid: str) -> str:
        return shorts.get(txid, txid)

    out = []
    for e in entries:
        state = style(f"{e.state:<11}", fg=_STATE_COLOUR.get(e.state, "red"))
        what = _changed(e, short)
        out.append(f"{short(e.txid)}  {_when(e.time)}  {e.name or e.kind:<7}  {state}  {what}")
        out.append(f"    {_command_line(e.command)}")
        if e.error:
            out.append(f"    {shown(e.error)}")
    return "\n".join(out)


def _entry_lines(e: HistoryEntry) -> list[str]:
    return [
        f"Transaction {e.txid} ({e.name or e.kind}), {_when(e.time)}: {e.state}",
        f"  command:  {_command_line(e.command)}",
        f"  changed:  {_changed(e)}",
        *([f"  kept:     {len(e.kept)} shared path(s)"] if e.kept else []),
        *([f"  error:    {shown(e.error)}"] if e.error else []),
        "  snapshot: " + ("kept (it can be undone)" if e.snapshot else "deleted"),
    ]


def render_detail(detail: TransactionDetail, style: Style = plain) -> str:
    """``cudafix show``: the summary; ``--json`` has the journal and every path."""
    steps = [str(r.get("event", "?")) for r in detail.journal]
    shown_steps = " -> ".join(steps[:12]) + (" -> ..." if len(steps) > 12 else "")
    return "\n".join(
        [
            *_entry_lines(detail.entry),
            f"  journal:  {len(steps)} step(s): {shown_steps}",
            f"  paths:    {len(detail.paths)} snapshotted (`--json` lists them)",
        ]
    )


def render_undo_preview(preview: UndoPreview, style: Style = plain, accept: bool = False) -> str:
    """What an undo restores and whether it will be refused, shown before it asks (and by
    ``undo --dry-run``, which decides as the undo itself does)."""
    e = preview.entry
    out = ["Undo:", *_entry_lines(e)]
    if not preview.readable:
        out.append(
            "  not checked: its snapshot is readable only by the user who made it; run undo "
            "as a user who can write the environment"
        )
        return "\n".join(out)
    effects = undo_effects(e.changed)
    out.append(
        f"  {shown(effects)}"
        if effects
        else f"  restores the {preview.paths} path(s) it touched to their state before it"
    )
    if preview.conflicts:
        out.append(style("Verdict: REFUSED", fg="red", bold=True) + "  (changed since the commit)")
        out += [f"  - {shown(c)}" for c in preview.conflicts[:10]]
        out += _more(len(preview.conflicts), 10, "")
    elif preview.blocked:
        said = undo_break_lines(preview)
        verdict, why = (
            ("Verdict: PASS (accepted)", "--accept: it undoes anyway")
            if accept
            else ("Verdict: REFUSED", "it would bring back problems; --accept undoes anyway")
        )
        out.append(style(verdict, fg="yellow" if accept else "red", bold=True) + f"  ({why})")
        out += [f"  - {shown(line)}" for line in said[:10]]
        out += _more(len(said), 10, "")
    else:
        out.append(
            style("Verdict: can be undone", fg="green", bold=True)
            + (
                "  (nothing it touched changed since, and doctor finds no new error in the state "
                "it restores; when it runs it is probed and judged again, and rolled back if it "
                "brings back an error)"
                if preview.after is not None
                else "  (nothing it touched changed since, and nothing it takes out is needed; "
                "the state it restores is judged when a user who can write the environment "
                "undoes it, and rolled back if it brings back an error)"
            )
        )
    out += [f"  - brings back {shown(line)}" for line in _brought_back_warnings(preview)]
    return "\n".join(out)


def _brought_back_warnings(preview: UndoPreview) -> list[str]:
    """The warnings the state an undo restores has and the environment has not now."""
    if preview.after is None:
        return []
    from cudafix.cli.doctor_words import said

    return said(preview.after, [f for f in preview.brings_back if f.severity != "error"])


def undo_break_lines(preview: UndoPreview) -> list[str]:
    """Why an undo is refused unless accepted: the needs it would leave unfound, as the
    refusal of a plan says them, and the errors doctor finds in the state it restores."""
    from cudafix.cli.doctor_words import said

    lost = [] if preview.target is None else reason_lines(list(preview.breaks), preview.target)
    found = [] if preview.after is None else said(preview.after, list(preview.errors))
    return [*lost, *found]
