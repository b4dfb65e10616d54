"""Tiny real wheels and real venvs for the transaction tests (no scenario builder needed)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import uv
import wheelhelp

from cudafix.model.plan import Options, Plan, Precondition, Reinstall, RemovedDistribution, Target

UV = uv.find_uv_bin()


def make_wheel(
    wheelhouse: Path, name: str, version: str, files: Mapping[str, bytes], *, scripts: bool = False
) -> Path:
    """A valid pure wheel; ``scripts`` adds a console script (``<name>-cli``)."""
    dist = name.replace("-", "_")
    entry = f"[console_scripts]\n{dist}-cli = {dist}_mod:main\n".encode()
    return wheelhelp.make_wheel(
        wheelhouse, name, version, files, dist_info={"entry_points.txt": entry} if scripts else None
    )


def uv_env() -> dict[str, str]:
    """Environment for uv in tests: offline, private cache next to nothing shared."""
    env = dict(os.environ)
    env.pop("VIRTUAL_ENV", None)
    env["UV_NO_CONFIG"] = "1"
    return env


def make_venv(prefix: Path, wheelhouse: Path, names: Sequence[str]) -> Path:
    """A real venv (``uv venv``) with ``names`` installed offline from ``wheelhouse``."""
    subprocess.run([UV, "venv", "-q", str(prefix)], check=True, env=uv_env())
    if names:
        install(prefix, wheelhouse, names)
    return prefix


def install(prefix: Path, wheelhouse: Path, names: Sequence[str]) -> None:
    """``uv pip install --offline --no-index --no-deps`` into the venv at ``prefix``."""
    python = str(prefix / "bin" / "python")
    offline = ["--offline", "--no-index", "--find-links", str(wheelhouse), "--no-deps"]
    subprocess.run(
        [UV, "pip", "install", "-q", "--python", python, *offline, *names],
        check=True,
        env=uv_env(),
    )


def site_packages(prefix: Path) -> str:
    """The EnvPath of the venv's site-packages directory."""
    libs = sorted((prefix / "lib").glob("python3.*/site-packages"))
    return str(libs[0].relative_to(prefix))


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
    sp = site_packages(prefix)

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
        reinstall=[Reinstall(name=n, version=v, reason="test") for n, v in reinstall],
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
    prefix = make_venv(tmp / "venv", wheelhouse, ["pa==1.0"])
    install(prefix, wheelhouse, ["pb==1.0"])
    return prefix, wheelhouse


def remove_pa_plan(prefix: Path, wheelhouse: Path, **kw: object) -> Plan:
    """Remove pa and reinstall pb (so the shared path ends with pb's own bytes)."""
    sp = site_packages(prefix)
    deleted = [p[len(sp) + 1 :] for p in installed_paths(prefix, f"{sp}/pa-1.0.dist-info")]
    args: dict[str, object] = {"remove": [("pa", "1.0")], "reinstall": [("pb", "1.0")]}
    args.update(kw)
    return make_plan(prefix, wheelhouse, deleted=deleted, **args)  # type: ignore[arg-type]
