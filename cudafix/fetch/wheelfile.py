"""Which local wheel file a staging install unpacked, and a private, checked copy of it.

A plan that installs a wheel from a ``--find-links`` directory must install *that* file:
the directory is anyone's to write, and a file of the same name swapped in after planning
(an extra ``zzz.pth`` runs at every interpreter start) would otherwise be installed
unseen. Staging records the file it used and its sha256 (:func:`identify`); applying copies
the file into a private directory, checks the copy's sha256 and installs the copy by path
(:func:`checked_copy`), so nothing can change it between the check and the install.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import zipfile
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import BinaryIO
from urllib.parse import unquote, urlparse

from cudafix.env.distinfo import INSTALLER_FILES
from cudafix.env.inventory import is_bytecode
from cudafix.env.record import parse_record
from cudafix.model.errors import StalePlan
from cudafix.model.names import EnvPath, is_env_path, normalize_name, split_dist_info_name
from cudafix.model.sources import is_url, link_path

Fingerprint = Counter[tuple[str | None, int | None]]
"""(sha256, size) of every file a wheel installs as-is: scripts and dist-info left out."""


def identify(
    name: str, version: str, staged: Mapping[EnvPath, str | None], find_links: Sequence[str]
) -> tuple[Path, str] | None:
    """The one wheel file in the local ``find_links`` directories that holds exactly the
    files staging unpacked (``staged``: EnvPath -> sha256, scripts and dist-info left out),
    with its sha256; None when it came from elsewhere (an index, uv's cache) or is ambiguous.
    """
    want = Counter((sha, None) for sha in staged.values())
    found = []
    for path in candidates(name, version, find_links):
        read = _read_wheel(path)
        if read is not None and _sizeless(read[1]) == want:
            found.append((path, read[0]))
    return found[0] if len(found) == 1 else None


def candidates(name: str, version: str, find_links: Sequence[str]) -> Iterable[Path]:
    """Wheel files named ``name``-``version`` in the local ``find_links`` directories (a
    directory, or a ``file://`` URL of one)."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename
    from packaging.version import Version

    for link in find_links:
        where = _local_dir(link)
        if where is None or not where.is_dir():
            continue
        for entry in sorted(where.iterdir()):
            if not entry.name.endswith(".whl"):
                continue
            try:
                wname, wversion, _build, _tags = parse_wheel_filename(entry.name)
            except InvalidWheelFilename:
                continue
            if str(wname) == normalize_name(name) and wversion == Version(version):
                yield entry


def _local_dir(link: str) -> Path | None:
    """The directory a ``--find-links`` value names on this machine; None for a page."""
    if link.startswith("file://"):
        return Path(unquote(urlparse(link).path))
    return None if is_url(link) else Path(link_path(link))


def _read_wheel(path: Path) -> tuple[str, Fingerprint] | None:
    """sha256 of the file and the fingerprint of its RECORD, read through one descriptor."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        digest = _sha256(fh)
        fh.seek(0)
        try:
            return digest, _fingerprint(zipfile.ZipFile(fh))
        except (zipfile.BadZipFile, KeyError, UnicodeDecodeError, OSError):
            return None


def _sha256(fh: BinaryIO) -> str:
    digest = hashlib.sha256()
    for chunk in iter(lambda: fh.read(1 << 20), b""):
        digest.update(chunk)
    return digest.hexdigest()


def _fingerprint(zf: zipfile.ZipFile) -> Fingerprint:
    infos = [n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/RECORD")]
    if len(infos) != 1:
        raise KeyError("no single RECORD")
    record = parse_record(zf.read(infos[0]).decode("utf-8"))
    if record.unreadable:
        raise KeyError(record.unreadable)
    return Counter((e.sha256, e.size) for e in record.entries if not _not_as_is(e.path, infos[0]))


def _not_as_is(path: str, record: str) -> bool:
    """dist-info files, scripts and bytecode: what staging does not compare either."""
    top = path.split("/", 1)[0]
    return (
        top == posixpath.dirname(record)
        or (top.endswith(".data") and path.split("/")[1:2] == ["scripts"])
        or is_bytecode(path)
    )


def _sizeless(fp: Fingerprint) -> Fingerprint:
    return Counter((sha, None) for sha, _size in fp.elements())


def checked_copy(wheel: str, sha256: str, into: Path) -> Path:
    """A private copy of ``wheel`` in ``into``, refused unless its bytes are ``sha256``.

    The copy is what gets installed: the check and the install see the same bytes.
    """
    dest = into / posixpath.basename(wheel)
    digest = hashlib.sha256()
    try:
        fd = os.open(wheel, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as src, dest.open("xb") as out:
            for chunk in iter(lambda: src.read(1 << 20), b""):
                digest.update(chunk)
                out.write(chunk)
    except FileNotFoundError as exc:
        raise StalePlan(f"{wheel}: the wheel the plan was made with is gone") from exc
    if digest.hexdigest() != sha256:
        raise StalePlan(
            f"{wheel} changed since the plan was made (sha256 {digest.hexdigest()[:12]}, "
            f"the plan's {sha256[:12]})",
            hint="plan again (--dry-run --out) and review what the new wheel installs",
        )
    return dest


def written_paths(wheel: Path, site: EnvPath) -> list[EnvPath]:
    """Every EnvPath installing ``wheel`` into a venv whose site-packages is ``site`` writes,
    from the wheel's own RECORD, each ``.data`` scheme mapped as installers map it in a venv
    (purelib, platlib: site-packages; scripts: ``bin/``; data: the prefix; headers:
    ``include/site/pythonX.Y/NAME/``). Rows that leave the environment are left out.

    Read from the checked copy about to be installed, so the transaction can snapshot all
    of them first, whatever the plan says the wheel holds.
    """
    with zipfile.ZipFile(wheel) as zf:
        infos = [n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/RECORD")]
        if len(infos) != 1:
            return []
        record = parse_record(zf.read(infos[0]).decode("utf-8", errors="replace"))
    info = infos[0].split("/")[0]
    name = (split_dist_info_name(info) or (info, ""))[0]
    python = site.split("/")[1] if site.count("/") >= 2 else "python3"
    schemes = {
        "purelib": site,
        "platlib": site,
        "scripts": "bin",
        "data": "",
        "headers": f"include/site/{python}/{name}",
    }
    out = []
    for entry in record.entries:
        parts = entry.path.split("/")
        if len(parts) > 2 and parts[0].endswith(".data") and parts[1] in schemes:
            path = posixpath.normpath(posixpath.join(schemes[parts[1]] or ".", *parts[2:]))
        else:
            path = posixpath.normpath(posixpath.join(site, entry.path))
        if is_env_path(path):
            out.append(EnvPath(path))
    out += [EnvPath(f"{site}/{info}/{f}") for f in sorted(INSTALLER_FILES)]
    return out
