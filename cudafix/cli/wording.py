"""A plan's reasons and warnings as the sentences a person reads: the one place they are worded.

The renderer prints them, and a refused plan's error (raised by the CLI or at the
transaction's door) carries them as typed reasons that :func:`error_context` words here too,
so the dry run and the refusal say the same thing.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from cudafix.model.commands import cudafix_line, shell_join, uv_list_argv, venv_flags
from cudafix.model.errors import CudafixError, PlanRefused
from cudafix.model.names import cuda_major, site_relative

if TYPE_CHECKING:  # --help imports the renderer and must not pay for pydantic
    from cudafix.model import reasons as R
    from cudafix.model.plan import Target

ADD_SOURCE = "--find-links DIR, --index-url URL or --extra-index-url URL"


def reason_text(reason: R.Reason, target: Target) -> str:
    """One refusal reason as a sentence, paths shown relative to ``target``'s site-packages."""
    sites = target.site_packages
    match reason.kind:
        case "need-lost":
            return _need_lost(reason, target)
        case "requirement-broken":
            return f"{reason.subject} requires {reason.requirement}: {reason.reason}"
        case "self-dependency":
            return f"cudafix runs inside the target and needs {reason.subject}"
        case "shared-deleted":
            return _shared_deleted(reason, sites)
        case "no-wheel":
            return (
                f"no wheel for {reason.subject}=={reason.version} can be had from "
                f"{reason.source}: {reason.problem}; {_another_source(reason.recorded)}"
            )
        case "another-build":
            return _another_build(reason, sites)
        case "duplicate-dist-info":
            return (
                f"{reason.subject} has a second dist-info directory {reason.paths[0]}; the "
                "installer may act on either: remove the stray one first"
            )
        case "renamed-dist-info":
            own = reason.directory
            return (
                f"{reason.subject}: its directory is {own} but its RECORD lists "
                f"{', '.join(reason.listed)}; an uninstall would leave {own} behind: rename it "
                f"back, or reinstall {reason.subject}"
            )
        case "through-symlink":
            return (
                f"{len(reason.paths)} path(s) go through the symlinked directory {reason.subject} "
                f"({_first(reason.paths)}): cudafix never writes or deletes through a symlink"
            )
        case "unreadable-record":
            return (
                f"{reason.paths[0]} cannot be read exactly ({reason.reason}); what "
                f"{reason.subject} owns is unknown, so the plan cannot be trusted: fix that "
                "RECORD first"
            )
        case "installed-already":
            return (
                f"{reason.subject} is installed ({reason.installed}); remove it in a step before "
                f"installing {reason.subject}=={reason.version}"
            )
        case "overwrite":
            return (
                f"{reason.subject} would overwrite {len(reason.paths)} path(s) that "
                f"{' and '.join(reason.owners)} claims with other bytes: "
                f"{_paths(reason.paths, sites)}"
            )
        case "build-switch":
            return _build_switch(reason, sites)


def warning_text(warning: R.PlanWarning, target: Target, sources: Sequence[str] = ()) -> str:
    """One warning as a sentence, paths shown as :func:`reason_text` shows them; a command
    it names takes the plan's ``sources`` (``--find-links DIR``, ...)."""
    match warning.kind:
        case "provider-switch":
            sites, prefix = target.site_packages, target.prefix
            return (
                f"{site_relative(warning.subject, sites, prefix)} "
                f"({warning.distribution or 'unowned'}) will load {warning.need} from "
                f"{site_relative(warning.after, sites, prefix)} instead of "
                f"{site_relative(warning.before, sites, prefix)}"
            )
        case "entries-stripped":
            n = len(warning.paths)
            return (
                f"{n} RECORD entr{'y' if n == 1 else 'ies'} point outside the environment or "
                "name a directory; cudafix strips them from RECORD first, so the backend "
                "leaves them alone"
            )
        case "kept-foreign":
            sites = target.site_packages
            owners = ", ".join(warning.owners)
            if len(warning.paths) == 1:
                return (
                    f"kept {site_relative(warning.paths[0], sites)} holds {warning.subject}'s "
                    f"bytes, not {owners}'s; add --repair to reinstall its own"
                )
            return (
                f"kept {len(warning.paths)} paths hold {warning.subject}'s bytes, not {owners}'s: "
                f"{_paths(warning.paths, sites)}; add --repair to reinstall their own"
            )
        case "unfetched":
            return (
                f"wheels not fetched (--no-fetch): not checked that {', '.join(warning.pins)} "
                "can be had, or that they hold the files the plan assumes"
            )
        case "same-bytes":
            return (
                f"{warning.subject} also claims {len(warning.paths)} path(s) of "
                f"{' and '.join(warning.owners)} (same bytes): "
                f"{_paths(warning.paths, target.site_packages)}; "
                "uninstalling either later deletes them for both (cudafix remove guards that)"
            )
        case "mixed-majors":
            return (
                f"mixed CUDA majors introduced: {', '.join(warning.names)} (CUDA "
                f"{warning.major}) into an environment of CUDA "
                f"{', '.join(map(str, warning.present))} distributions"
            )
        case "requirements-set-aside":
            return _set_aside(warning, target, sources)


def _set_aside(warning: R.RequirementsSetAside, target: Target, sources: Sequence[str]) -> str:
    """The unmet requirements a repair leaves out, why, and the dry run that shows them."""
    shown = "; ".join(reason_text(r, target) for r in warning.shown)
    more = warning.reasons - len(warning.shown)
    see = cudafix_line(
        "install",
        *warning.specs,
        "--dry-run",
        target=venv_flags(Path(target.prefix)),
        tail=sources,
    )
    return (
        f"{len(warning.specs)} unmet requirement(s) left out of the repair: installing them "
        f"is refused ({shown}{f'; and {more} more' if more > 0 else ''}); the rest repairs "
        f"what is broken. To see that plan: {see}"
    )


def reinstall_text(why: R.ReinstallWhy, sites: Sequence[str]) -> str:
    """Why a distribution is reinstalled, as the clause after its pin; paths shown relative
    to ``sites``."""
    match why.kind:
        case "missing-files":
            return f"{why.count} file(s) from its RECORD are missing"
        case "foreign-own-files":
            return f"{why.count} of its own file(s) hold another build's bytes"
        case "stale-scripts":
            return f"{why.count} of its scripts name an interpreter that is gone"
        case "co-owns-deleted":
            # the most telling path: a shared library beats an ``__init__.py``
            example = sorted(why.paths, key=lambda p: (".so" not in p, p))[0]
            more = f" and {len(why.paths) - 1} more" if len(why.paths) > 1 else ""
            return f"co-owns {site_relative(example, sites)}{more}, which the removal deletes"
        case "holds-foreign":
            return f"{site_relative(why.paths[0], sites)} holds {why.holder}'s bytes, not its own"
        case "script-step":
            return f"step {why.step} of the script reinstalls it"


def alternative_text(does: R.AlternativeDoes, sites: Sequence[str] = ()) -> str:
    """What a safer alternative does, as the comment under its command, and what it leaves
    behind (paths shown relative to ``sites``)."""
    match does.kind:
        case "remove-then-reinstall":
            return (
                f"remove, then reinstall {', '.join(does.pins)} so its own files come back; "
                "leaves none of the removed files"
            )
        case "remove-keeping-shared":
            kept = (
                f"remove, keeping {len(does.paths)} shared path(s) that remaining distributions "
                "claim"
            )
            if not does.foreign:
                return f"{kept}; leaves each with its remaining owner's bytes"
            first = site_relative(does.foreign[0], sites)
            more = ", ..." if len(does.foreign) > 1 else ""
            return (
                f"{kept}; leaves {' and '.join(does.holders)}'s bytes in "
                f"{len(does.foreign)} of them ({first}{more})"
            )
        case "install-today":
            return f"install {', '.join(does.pins)}, the build the consumers load today"


def reason_lines(reasons: Sequence[R.Reason], target: Target) -> list[str]:
    """Every reason, worded: a refused plan's error context and its verdict's list."""
    return [reason_text(r, target) for r in reasons]


def error_context(err: CudafixError) -> list[str]:
    """An error's context lines as printed, a refused plan's reasons worded after them."""
    if isinstance(err, PlanRefused) and err.target is not None:
        return [*err.context, *reason_lines(err.reasons, err.target)]
    return list(err.context)


def listing_hint(python: str) -> str:
    """Where to read what is installed, as a command for this target."""
    return f"`{shell_join(uv_list_argv(python))}` lists what is installed"


def _need_lost(lost: R.NeedLost, target: Target) -> str:
    sites = target.site_packages
    how = (
        f" loads {site_relative(lost.need, sites, target.prefix)} at run time "
        f"(for {lost.run_time_load})"
        if lost.run_time_load
        else f" needs {lost.need}"
    )
    return (
        f"{site_relative(lost.subject, sites)} ({lost.distribution or 'no distribution'})"
        f"{how}, which would no longer be found"
    )


def _first(paths: Sequence[str], shown: str | None = None) -> str:
    """The first path, with ``, ...`` when there are more."""
    return (shown if shown is not None else paths[0]) + (", ..." if len(paths) > 1 else "")


def _shared_deleted(reason: R.SharedDeleted, sites: Sequence[str]) -> str:
    owners = reason.owners
    return (
        f"it deletes {len(reason.paths)} path(s) that {' and '.join(owners)} also "
        f"claim{'s' if len(owners) == 1 else ''} "
        f"({_first(reason.paths, site_relative(reason.paths[0], sites))}); "
        "nothing in the plan puts them back"
    )


def _another_build(reason: R.AnotherBuild, sites: Sequence[str]) -> str:
    diffs = reason.differences
    shown = "; ".join(site_relative(d, sites) for d in diffs[:3])
    more = f" and {len(diffs) - 3} more" if len(diffs) > 3 else ""
    return (
        f"the wheel for {reason.subject}=={reason.version} from {reason.source} is another "
        f"build than the installed one ({len(diffs)} path(s) differ: {shown}{more}); "
        "reinstalling it would not bring the installed files back; "
        f"{_another_source(reason.recorded)}"
    )


def _another_source(recorded: str | None) -> str:
    """How to point cudafix at the right wheel: where it was installed from, if recorded,
    and the options that add a source."""
    if recorded is None:
        return f"point cudafix at the wheel it was installed from with {ADD_SOURCE}"
    local = recorded.removeprefix("file://")
    if local != recorded and local.endswith(".whl"):
        return (
            f"it was installed from {recorded} (its direct_url.json): "
            f"add --find-links {shlex.quote(posixpath.dirname(local))}"
        )
    return f"it was installed from {recorded} (its direct_url.json): add it with {ADD_SOURCE}"


def _build_switch(s: R.BuildSwitch, sites: Sequence[str]) -> str:
    after, build = site_relative(s.after, sites), _builds(s.after_owners[:1])
    what = (
        f"{after} would hold {build}'s bytes"
        if s.before == s.after
        else f"{after} ({build}) would shadow {site_relative(s.before, sites)}"
    )
    return (
        f"{site_relative(s.subject, sites)} ({s.distribution or 'no distribution'})"
        f" would switch builds of {s.need}: {what}, not {_builds(s.before_owners)}'s"
    )


def _builds(owners: Sequence[str]) -> str:
    """``nvidia-cudnn-cu13 (CUDA 13)``: whose build, and for which major when it says."""
    shown = []
    for o in owners:
        major = cuda_major(o)
        shown.append(f"{o} (CUDA {major})" if major else o)
    return " and ".join(shown) or "no distribution"


def _paths(paths: Sequence[str], sites: Sequence[str], limit: int = 4) -> str:
    shown = ", ".join(site_relative(p, sites) for p in paths[:limit])
    return shown + (f" and {len(paths) - limit} more" if len(paths) > limit else "")


def undo_effects(changed: Sequence[str]) -> str:
    """What undoing a transaction does, in package terms, from what it changed (``+six
    1.17.0``, ``-x 1``, ``x 1 -> 2``, ``~x``): ``removes six 1.17.0; puts back x 1``."""
    removes, returns, back, files = [], [], [], []
    for change in changed:
        if change.startswith("+"):
            removes.append(change[1:])
        elif change.startswith("-"):
            returns.append(change[1:])
        elif change.startswith("~"):
            files.append(change[1:])
        elif " -> " in change:
            name_old, new = change.rsplit(" -> ", 1)
            name, _, old = name_old.partition(" ")
            back.append(f"{name} back from {new} to {old}")
    said = [
        *([f"removes {', '.join(removes)}"] if removes else []),
        *([f"puts back {', '.join(returns)}"] if returns else []),
        *([f"takes {', '.join(back)}"] if back else []),
        *([f"puts back the files of {', '.join(files)} as they were before"] if files else []),
    ]
    return "; ".join(said)
