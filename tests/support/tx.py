"""The transaction tests' venv (two distributions sharing a path) and Plan values by hand."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from cudafix.env.statedir import TxDir
from cudafix.model.plan import Options, Plan, Precondition, Reinstall, RemovedDistribution, Target
from cudafix.model.reasons import MissingFiles
from cudafix.tx.manifest import Entry, stored
from tests.support.venvs import install, new_venv, site_rel
from tests.support.wheels import make_wheel


def make_plan(
    prefix: Path,
    wheelhouse: Path,
    *,
    remove: Sequence[tuple[str, str]] = (),
    reinstall: Sequence[tuple[str, str]] = (),
    deleted: Sequence[str] = (),
    kept: Sequence[str] = (),
    verdict: str = "pass",
    backend: str = "uv",
) -> Plan:
    """A Plan value built directly (no planner), paths relative to site-packages unless absolute."""
    sp = site_rel(prefix)

    def ep(p: str) -> str:
        return p if p.startswith(("/", "../", "bin/")) else f"{sp}/{p}"

    removed = [
        RemovedDistribution(
            name=n,
            version=v,
            dist_info=f"{sp}/{n.replace('-', '_')}-{v}.dist-info",
            files=0,
            bytes=0,
        )
        for n, v in remove
    ]
    fields: dict[str, object] = dict(
        target=Target(
            prefix=str(prefix), python=str(prefix / "bin" / "python"), site_packages=[sp]
        ),
        selectors=[n for n, _ in remove],
        options=Options(
            offline=True,
            find_links=[str(wheelhouse)],
            backend=backend,  # type: ignore[arg-type]
            keep_shared=bool(kept),
        ),
        remove=removed,
        reinstall=[
            Reinstall(name=n, version=v, reason=MissingFiles(subject=n, count=1))
            for n, v in reinstall
        ],
        deleted_paths=[ep(p) for p in deleted],
        kept_paths=[ep(p) for p in kept],
        rewritten_paths=[p for n, v in reinstall for p in _rewritten(prefix, sp, n, v)],
        warnings=[],
        shared_paths=[],
        lost=[],
        switches=[],
        requirement_breaks=[],
        refused_paths=[],
        self_dependencies=[],
        verdict=verdict,
        reasons=[],
        alternatives=[],
        preconditions=Precondition(distributions={}, path_hashes={}),
    )
    return Plan.model_validate(_with_new_lists(fields))


def _with_new_lists(fields: dict[str, object]) -> dict[str, object]:
    """Fill list fields the lead adds to Plan later (probe_modules, ...) with []."""
    for name, info in Plan.model_fields.items():
        if name not in fields and info.is_required() and "list[" in str(info.annotation):
            fields[name] = []
    return fields


def _rewritten(prefix: Path, sp: str, name: str, version: str) -> list[str]:
    info = f"{sp}/{name.replace('-', '_')}-{version}.dist-info"
    return installed_paths(prefix, info)[1:] if (prefix / info).is_dir() else []


def installed_paths(prefix: Path, dist_info: str) -> list[str]:
    """The dist-info dir plus its RECORD paths, as EnvPaths (what an uninstall deletes)."""
    sp = dist_info.rsplit("/", 1)[0]
    lines = (prefix / dist_info / "RECORD").read_text().splitlines()
    paths = {os.path.normpath(f"{sp}/{ln.split(',')[0]}") for ln in lines if ln}
    return [dist_info, *sorted(paths)]


A_BYTES = b"\x7fELF-from-pa" * 50
B_BYTES = b"\x7fELF-from-pb" * 50


def shared_pair(tmp: Path) -> tuple[Path, Path]:
    """A venv holding pa and pb, which both install ``shared/lib.so`` (different bytes)."""
    wheelhouse = tmp / "wheels"
    make_wheel(wheelhouse, "pa", "1.0", {"shared/lib.so": A_BYTES, "pa_mod.py": b"A = 1\n"})
    make_wheel(wheelhouse, "pb", "1.0", {"shared/lib.so": B_BYTES, "pb_mod.py": b"B = 1\n"})
    prefix = new_venv(tmp / "venv")
    install(prefix, wheelhouse, "pa==1.0", deps=False)
    install(prefix, wheelhouse, "pb==1.0", deps=False)
    return prefix, wheelhouse


def remove_pa_plan(prefix: Path, wheelhouse: Path, **kw: object) -> Plan:
    """Remove pa and reinstall pb (so the shared path ends with pb's own bytes)."""
    sp = site_rel(prefix)
    deleted = [p[len(sp) + 1 :] for p in installed_paths(prefix, f"{sp}/pa-1.0.dist-info")]
    args: dict[str, object] = {"remove": [("pa", "1.0")], "reinstall": [("pb", "1.0")]}
    args.update(kw)
    return make_plan(prefix, wheelhouse, deleted=deleted, **args)  # type: ignore[arg-type]


def mirror_store(tx: TxDir) -> None:
    """Put a transaction's store and manifest in the form cudafix wrote before its store was
    flat: each file at its own path, below directories mirroring the environment's, its
    symlinks as symlinks, and manifest rows without a slot."""
    data = json.loads(tx.manifest.read_text())
    fields = list(data["fields"])
    at = fields.index("slot")
    slotted = {p for p in tx.snapshot.iterdir() if p.name.isdigit()}
    entries = [Entry(**dict(zip(fields, row, strict=True))) for row in data["rows"]]
    for e in sorted(entries, key=lambda e: e.path):
        mirrored = tx.snapshot / e.path
        if e.kind == "dir":
            mirrored.mkdir(parents=True, exist_ok=True)
        elif e.kind == "symlink":
            mirrored.parent.mkdir(parents=True, exist_ok=True)
            mirrored.symlink_to(str(e.target))
        elif e.kind == "file":
            mirrored.parent.mkdir(parents=True, exist_ok=True)
            (tx.snapshot / stored(e)).rename(mirrored)
    for emptied in slotted:
        emptied.rmdir()
    rows = [row[:at] + row[at + 1 :] for row in data["rows"]]
    fields.remove("slot")
    tx.manifest.write_text(json.dumps({**data, "fields": fields, "rows": rows}))
