"""Who owns which path: the ownership index, RECORD paths missing, co-owned paths' holders.

Which owner's bytes a co-owned path holds is settled by RECORD sizes first and by a hash
only where a size agrees, so unshared gigabytes are never read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from cudafix.env.hashing import HashCache
from cudafix.env.inventory import CoOwnedPath, Distribution, Inventory, RecordEntry, is_bytecode
from cudafix.model.names import DistName, EnvPath

Hasher = Callable[[EnvPath], "str | None"]
"""RECORD-encoded sha256 of the bytes at an EnvPath, or None (see ``hashing.HashCache``)."""


def holder_of(
    inventory: Inventory,
    path: EnvPath,
    owners: Sequence[DistName],
    hasher: Hasher | None = None,
) -> tuple[DistName, ...]:
    """The owners (of ``owners``) whose RECORD hash matches the bytes now at ``path``.

    Sizes are compared first; the file is hashed only when some owner's RECORD size
    agrees (or is unrecorded), so unshared gigabytes are never read. Empty when the path
    is missing or holds nobody's bytes.
    """
    st = inventory.files.get(path)
    if st is None:
        return ()
    candidates = [
        (name, entry)
        for name in owners
        if (entry := _entry(inventory, name, path)) is not None and entry.sha256
    ]
    if st.kind == "file":
        candidates = [(n, e) for n, e in candidates if e.size is None or e.size == st.size]
    if not candidates:
        return ()
    digest = (hasher or HashCache(inventory.prefix))(path)
    return tuple(sorted(n for n, e in candidates if digest is not None and e.sha256 == digest))


def _entry(inventory: Inventory, name: DistName, path: EnvPath) -> RecordEntry | None:
    dist = inventory.distributions.get(name)
    return None if dist is None else dist.record_by_path.get(path)


def _ownership(dists: Iterable[Distribution]) -> dict[EnvPath, tuple[DistName, ...]]:
    index: dict[EnvPath, tuple[DistName, ...]] = {}
    for dist in dists:
        name = dist.name
        alone = (name,)  # one tuple per distribution, not one per RECORD row
        for path in dist.paths:
            have = index.get(path)
            if have is None:
                index[path] = alone
            elif name not in have:  # rare: only shared paths sort their owners
                index[path] = tuple(sorted((*have, name)))
    return index  # in RECORD order: who needs path order sorts the few paths it keeps


def _missing(
    owners: Mapping[EnvPath, tuple[DistName, ...]], absent: Iterable[EnvPath]
) -> dict[DistName, tuple[EnvPath, ...]]:
    """RECORD paths absent from disk (``absent``, in path order), by distribution
    (``owners``: the ownership index). Each path's string is the index's own, not one more
    per distribution.

    Bytecode is derived data, not missing files: pip lists the ``.pyc`` it compiled, uv's
    uninstall of a co-owner deletes them, and Python writes them again on import.
    """
    out: dict[DistName, list[EnvPath]] = {}
    for path in absent:
        if path.endswith(".pyc") or ("__pycache__" in path and is_bytecode(path)):
            continue  # is_bytecode, its cheap tests first: this runs once per missing path
        for name in owners[path]:
            out.setdefault(name, []).append(path)
    return {name: tuple(paths) for name, paths in out.items()}


def _shared_paths(
    inv: Inventory, paths: Iterable[EnvPath], hasher: Hasher
) -> tuple[CoOwnedPath, ...]:
    """What each of ``paths`` (those several distributions claim, in order) holds."""
    out: list[CoOwnedPath] = []
    for path in paths:
        owners = inv.owners[path]
        missing = path not in inv.files
        matching = holder_of(inv, path, owners, hasher)
        out.append(CoOwnedPath(path, owners, matching[0] if matching else None, missing, matching))
    return tuple(out)
