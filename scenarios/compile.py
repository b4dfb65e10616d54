"""Turn a scenario's distributions into wheels: compile their ELF objects, pack each tree.

Every library embeds its distribution's name, version and path as a string, so two
variants shipping the same path (cudnn-cu12 and cudnn-cu13) have different bytes, as the
real wheels do. A DT_NEEDED reference is linked against the first library in the scenario
that carries that soname; only the soname ends up in the object, so the choice is moot.
"""

from __future__ import annotations

import os
import shutil
import sysconfig
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from packaging.tags import sys_tags

from cudafix.model.errors import InputError
from scenarios.cc import SharedObject, compile_shared
from scenarios.spec import Dist, Extension, Lib, Scenario
from scenarios.wheel import WheelMeta, pack_wheel

_E_MACHINE_OFFSET = 18


@dataclass(frozen=True)
class _Job:
    """One ELF object to compile, and the sonames it must be linked after."""

    obj: SharedObject
    needs: tuple[str, ...]
    provides: str | None


def wheel_tag() -> str:
    """The most specific tag of this interpreter (``cp311-cp311-linux_x86_64``)."""
    return str(next(iter(sys_tags())))


def ext_suffix() -> str:
    """``.cpython-311-x86_64-linux-gnu.so`` for the running interpreter."""
    return str(sysconfig.get_config_var("EXT_SUFFIX"))


def tree_of(dist: Dist, work: Path) -> Path:
    """The staging directory of ``dist``'s wheel contents."""
    return work / f"{dist.name}-{dist.version}"


def _providers(spec: Scenario, work: Path) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for dist in spec.dist:
        for lib in dist.lib:
            soname = lib.effective_soname
            if soname and soname not in found:
                found[soname] = tree_of(dist, work) / lib.path
    return found


def _marker(dist: Dist, path: str) -> str:
    text = f"{dist.name} {dist.version} {path}".replace('"', "")
    return f'__attribute__((used)) static const char cudafix_origin[] = "{text}";'


def _literals(names: Iterable[str]) -> str:
    """The names as strings the object keeps in ``.rodata`` (nothing for none)."""
    quoted = ", ".join(f'"{n}"' for n in names if '"' not in n and "\\" not in n)
    if not quoted:
        return ""
    return f"\n__attribute__((used)) static const char *const cudafix_literals[] = {{{quoted}}};"


_LOADER = """
int cudafix_dlopen(const char *name) {
    if (dlopen(name, RTLD_NOW | RTLD_GLOBAL)) return 1;
    fprintf(stderr, "%s\\n", dlerror());
    return 0;
}
"""


def _lib_job(dist: Dist, lib: Lib, work: Path, providers: Mapping[str, Path]) -> _Job:
    obj = SharedObject(
        output=tree_of(dist, work) / lib.path,
        soname=lib.effective_soname,
        needed=tuple(providers[n] for n in lib.needed),
        rpath=lib.runpath or lib.rpath,
        runpath=bool(lib.runpath),
        source=_marker(dist, lib.path) + _literals(lib.literals) + (_LOADER if lib.loader else ""),
        dlopen=lib.dlopen,
        extra_flags=("-ldl",) if lib.loader else (),
    )
    return _Job(obj, lib.needed, lib.effective_soname)


def _ext_job(dist: Dist, ext: Extension, work: Path, providers: Mapping[str, Path]) -> _Job:
    obj = SharedObject(
        output=tree_of(dist, work) / (ext.path + (ext.suffix or ext_suffix())),
        needed=tuple(providers[n] for n in ext.needed),
        rpath=ext.runpath or ext.rpath,
        runpath=bool(ext.runpath),
        source=_marker(dist, ext.path) + _literals(ext.literals),
        python_module=ext.module,
    )
    return _Job(obj, ext.needed, None)


def _needs(dist: Dist) -> set[str]:
    return {n for lib in dist.lib for n in lib.needed} | {n for e in dist.ext for n in e.needed}


def _jobs(spec: Scenario, work: Path) -> list[_Job]:
    providers = _providers(spec, work)
    wanted = {n for d in spec.dist for n in _needs(d)}
    unknown = sorted(wanted - set(providers))
    if unknown:
        raise InputError(f"scenario {spec.name!r} needs sonames no library provides: {unknown}")
    jobs = [_lib_job(d, lib, work, providers) for d in spec.dist for lib in d.lib]
    return jobs + [_ext_job(d, e, work, providers) for d in spec.dist for e in d.ext]


def _compile_all(jobs: Iterable[_Job]) -> None:
    """Compile in waves: each wave holds the jobs whose needs are all built."""
    pending, built = list(jobs), set[str]()
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        while pending:
            wave = [j for j in pending if set(j.needs) <= built]
            if not wave:
                cycle = sorted({n for j in pending for n in j.needs} - built)
                raise InputError(f"DT_NEEDED cycle or missing provider among: {cycle}")
            list(pool.map(lambda j: compile_shared(j.obj), wave))
            built |= {j.provides for j in wave if j.provides}
            pending = [j for j in pending if j not in wave]


def _damage(dist: Dist, work: Path) -> None:
    """Apply ``truncate`` / ``machine`` after linking, so nothing links the damaged copy."""
    for lib in dist.lib:
        path = tree_of(dist, work) / lib.path
        if lib.machine is not None:
            with path.open("r+b") as fh:
                fh.seek(_E_MACHINE_OFFSET)
                fh.write(lib.machine.to_bytes(2, "little"))
        if lib.truncate is not None:
            os.truncate(path, lib.truncate)


def _write_files(dist: Dist, work: Path) -> None:
    root = tree_of(dist, work)
    for rel, text in dist.files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")


def build_wheelhouse(spec: Scenario, out: Path) -> None:
    """Compile ``spec``'s objects (in a scratch dir) and write its wheels to ``out/wheelhouse``."""
    work = out / "work"
    for dist in spec.dist:
        _write_files(dist, work)
        tree_of(dist, work).mkdir(parents=True, exist_ok=True)
    _compile_all(_jobs(spec, work))
    tag = wheel_tag()
    for dist in spec.dist:
        _damage(dist, work)
        meta = WheelMeta(dist.name, dist.version, dist.requires, tag)
        pack_wheel(meta, tree_of(dist, work), out / "wheelhouse")
    shutil.rmtree(work)
    (out / "scenario.json").write_text(spec.model_dump_json(indent=1), encoding="utf-8")
