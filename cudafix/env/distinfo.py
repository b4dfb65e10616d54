"""What a ``*.dist-info`` directory says besides RECORD: core metadata, installer files.

Shared by the inventory (installed distributions) and staging (wheels unpacked outside the
environment), so both read a distribution the same way.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from cudafix.model.names import DIST_INFO_SUFFIX

INSTALLER_FILES = frozenset(
    {"INSTALLER", "REQUESTED", "RECORD", "RECORD.jws", "RECORD.p7s"}
    | {"direct_url.json", "uv_cache.json"}
)
"""dist-info files an installer writes its own way (uv's cache file holds a timestamp), not
the wheel: two installs of one wheel may differ in them and still be the same build."""


@dataclass(frozen=True)
class CoreMetadata:
    """The METADATA fields cudafix uses; empty strings when the file does not say."""

    name: str = ""
    version: str = ""
    requires: tuple[str, ...] = ()


def parse_metadata(text: str) -> CoreMetadata:
    """METADATA headers, read leniently (``packaging.metadata``): a malformed field is dropped,
    never fatal, since pip and uv install such wheels too. (Imported here: a warm run reads
    no METADATA, and importing ``packaging.metadata`` takes about 40 ms.)"""
    from packaging.metadata import parse_email

    raw, _unparsed = parse_email(text)
    return CoreMetadata(
        name=raw.get("name", ""),
        version=raw.get("version", ""),
        requires=tuple(raw.get("requires_dist", ())),
    )


def name_and_version(text: str) -> CoreMetadata | None:
    """Name and Version of a METADATA text, from its headers, where each is there once on a
    line of its own (None otherwise, for :func:`parse_metadata`): a quick look, for a
    question that needs no more (which versions are installed now), without the email
    parser or ``packaging.metadata``."""
    found: dict[str, list[str]] = {"name": [], "version": []}
    last = ""
    for line in _LINES.split(text):
        if not line:
            break  # the end of the headers
        if line[0] in " \t":  # a header folded onto the next line
            if last in found:
                return None
            continue
        key, colon, value = line.partition(":")
        if not colon or not _FIELD.fullmatch(key) or _ODD.search(line):
            return None
        last = key.lower()
        if last in found:
            found[last].append(value.lstrip(" \t"))  # as the email parser reads it
    if len(found["name"]) != 1 or len(found["version"]) != 1:
        return None
    return CoreMetadata(name=found["name"][0], version=found["version"][0])


_LINES = re.compile(r"\r\n|\r|\n")
"""Where the email parser ends a line."""
_FIELD = re.compile(r"[\041-\071\073-\176]+")
"""A header's name as the email parser knows one (a line without one starts the body)."""
_ODD = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\x85\u2028\u2029]|=\?")
"""What the email parser may read otherwise than as plain text (controls, line separators
it does not end a line at, RFC 2047 encoded words): such a METADATA is parsed in full."""


def is_installer_file(path: str, dist_info: str) -> bool:
    """Whether ``path`` is one of ``dist_info``'s installer-written files (INSTALLER_FILES):
    the rows a RECORD digest leaves out, since two installs of one build differ in them."""
    head, _, base = path.rpartition("/")
    return head == dist_info and base in INSTALLER_FILES


def direct_url(prefix: Path, dist_info: str) -> str | None:
    """Where the distribution was installed from, if its installer recorded a direct URL
    (PEP 610 ``direct_url.json``: a wheel file, a local directory, a VCS URL). Never read
    through a symlink that leaves the environment."""
    path = prefix / dist_info / "direct_url.json"
    try:
        if not path.resolve().is_relative_to(prefix.resolve()):
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    url = data.get("url") if isinstance(data, dict) else None
    return url if isinstance(url, str) and url else None


def in_some_dist_info(path: str) -> bool:
    """Whether ``path`` lies in any ``*.dist-info`` directory.

    Each installer writes a dist-info its own way (INSTALLER, uv_cache.json, the name's case),
    so verify does not demand such a file back after a reinstall.
    """
    return any(part.endswith(DIST_INFO_SUFFIX) for part in path.split("/")[:-1])
