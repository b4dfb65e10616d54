"""Turn selectors (names or shell globs) into the distributions they mean."""

from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Iterable, Mapping, Sequence

from cudafix.env.inventory import Unmanaged
from cudafix.model.errors import UnmatchedSelector, UsageError
from cudafix.model.names import DistName, normalize_name


def _normalize_pattern(selector: str) -> str:
    """Normalise a selector like a name, keeping glob characters (``NVIDIA_*_cu13`` works)."""
    parts = selector.split("*")
    return "*".join(normalize_name(p) if p else "" for p in parts)


def select(
    installed: Iterable[DistName],
    selectors: Sequence[str],
    exclude: Sequence[str] = (),
    unmanaged: Sequence[Unmanaged] = (),
    versions: Mapping[DistName, str] | None = None,
) -> tuple[DistName, ...]:
    """Return the installed names matched by ``selectors`` and not by ``exclude``, sorted.

    A selector that matches nothing is an error, listing near misses, so a typo never
    turns into a silent no-op in a cleanup script. ``NAME==VERSION`` (as pip and uv accept
    it) selects NAME only if VERSION is what is installed (``versions``), else it is refused:
    removing another version than the one named is never what was meant.
    """
    names = sorted(set(installed))
    if not selectors:
        raise UsageError(
            "no distributions selected", hint="name at least one, e.g. 'nvidia-*-cu13'"
        )
    chosen: set[DistName] = set()
    unmatched: list[str] = []
    for selector in selectors:
        selector, version = _pinned(selector)
        pattern = _normalize_pattern(selector)
        hits = [n for n in names if fnmatch.fnmatchcase(n, pattern)]
        if version is not None and hits:
            _check_version(selector, version, hits, versions or {})
        if not hits:
            unmatched.append(selector)
        chosen.update(hits)
    if unmatched:
        raise UnmatchedSelector(
            f"selector {unmatched[0]!r} matches no installed distribution",
            context=[_unmanaged(s, unmanaged) or _near_misses(s, names) for s in unmatched],
        )
    excluded = {n for n in chosen for e in exclude if fnmatch.fnmatchcase(n, _normalize_pattern(e))}
    return tuple(sorted(chosen - excluded))


def _pinned(selector: str) -> tuple[str, str | None]:
    """``NAME==VERSION`` split in two; a plain name or glob has no version."""
    name, sep, version = selector.partition("==")
    return (name.strip(), version.strip()) if sep else (selector, None)


def _check_version(
    selector: str, version: str, hits: Sequence[DistName], versions: Mapping[DistName, str]
) -> None:
    other = [f"{n} {versions[n]}" for n in hits if n in versions and versions[n] != version]
    if other:
        raise UsageError(
            f"{selector}=={version} is not installed: the installed version is {other[0]}",
            hint=f"remove it by name ({selector}) or name the installed version",
        )


_UNMANAGED_WHY = {
    "no-record": "has no RECORD, so no installer can uninstall it",
    "egg-info": "is an egg-info install, which cudafix does not plan for",
    "symlink": "is a symlink, which cudafix does not act on",
    "duplicate": "is a second dist-info of an installed name",
}


def _unmanaged(selector: str, unmanaged: Sequence[Unmanaged]) -> str | None:
    """Say so when the selector names an install cudafix does not manage."""
    pattern = _normalize_pattern(selector)
    hits = [u for u in unmanaged if fnmatch.fnmatchcase(normalize_name(u.name), pattern)]
    if not hits:
        return None
    said = "; ".join(f"{u.path} {_UNMANAGED_WHY.get(u.kind, u.kind)}" for u in hits[:3])
    return f"{selector}: not managed: {said}"


def _near_misses(selector: str, names: Sequence[DistName]) -> str:
    plain = _normalize_pattern(selector).replace("*", "")
    close = difflib.get_close_matches(plain, names, n=5, cutoff=0.5)
    close += [n for n in names if plain and plain in n and n not in close][: 5 - len(close)]
    if not close:
        return f"{selector}: no similar names installed"
    return f"{selector}: did you mean " + ", ".join(close) + "?"
