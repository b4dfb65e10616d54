"""Which environment cudafix acts on, and what its interpreter says about itself.

Selection follows uv: ``--python PATH`` or ``--venv DIR``, else ``$VIRTUAL_ENV``, else
``./.venv``. The interpreter is asked once, isolated (``-I``), for its layout and marker
environment; a broken interpreter is exactly what cudafix may be repairing, so when it
cannot answer the layout on disk and ``pyvenv.cfg`` stand in.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import re
import shutil
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudafix.env.memo.stats import RACY_NS
from cudafix.env.statedir import StateDir, load_cache, save_cache
from cudafix.model.errors import TargetError, UsageError
from cudafix.model.names import EnvPath

_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")
HINT = "point cudafix at an environment with --venv DIR or --python PATH"
QUERY_TIMEOUT = 30.0
_CACHE_FORMAT = "cudafix-interpreter-cache"
_CACHE_VERSION = 1

_QUERY = """\
import importlib.machinery, json, os, platform, site, sys, sysconfig
# Run with -I -S: nothing from site-packages is imported and no .pth file runs. Without
# site, Python 3.10 leaves sys.prefix at the base install, so find the venv as site.venv does.
prefix = sys.prefix
exe_dir = os.path.dirname(os.path.abspath(sys.executable))
is_venv = any(
    os.path.isfile(os.path.join(d, "pyvenv.cfg")) for d in (exe_dir, os.path.dirname(exe_dir))
)
if is_venv:
    prefix = os.path.dirname(exe_dir)
# The scheme uv installs with: "venv" in a venv (Debian's default scheme, posix_local,
# would say /usr/local-style dist-packages, which no venv has), else posix_prefix over
# Debian's posix_local.
schemes = sysconfig.get_scheme_names()
scheme = getattr(sysconfig, "get_default_scheme", getattr(sysconfig, "_get_default_scheme", None))
scheme = scheme() if scheme else ("nt" if os.name == "nt" else "posix_prefix")
if is_venv and "venv" in schemes:
    scheme = "venv"
elif scheme == "posix_local":
    scheme = "posix_prefix"
impl = sys.implementation
v = impl.version
iver = "{0.major}.{0.minor}.{0.micro}".format(v)
if v.releaselevel != "final":
    iver += v.releaselevel[0] + str(v.serial)
paths = sysconfig.get_paths(scheme, vars={"base": prefix, "platbase": prefix})
print(json.dumps({
    "prefix": prefix,
    "purelib": paths["purelib"],
    "platlib": paths["platlib"],
    "version_info": list(sys.version_info[:3]),
    "ext_suffix": sysconfig.get_config_var("EXT_SUFFIX"),
    "extension_suffixes": importlib.machinery.EXTENSION_SUFFIXES,
    "sys_path": sys.path + [p for p in site.getsitepackages([prefix]) if os.path.isdir(p)],
    "markers": {
        "implementation_name": impl.name,
        "implementation_version": iver,
        "os_name": os.name,
        "platform_machine": platform.machine(),
        "platform_release": platform.release(),
        "platform_system": platform.system(),
        "platform_version": platform.version(),
        "python_full_version": platform.python_version(),
        "platform_python_implementation": platform.python_implementation(),
        "python_version": ".".join(platform.python_version_tuple()[:2]),
        "sys_platform": sys.platform,
    },
}))
"""


@dataclass(frozen=True)
class TargetEnv:
    """The environment to act on: its absolute prefix and, if it has one, its interpreter."""

    prefix: Path
    python: Path | None


@dataclass(frozen=True)
class InterpreterInfo:
    """The target interpreter's own account of its layout, or a stand-in read from disk."""

    prefix: Path
    site_packages: tuple[EnvPath, ...]
    """purelib then platlib (deduplicated), relative to the prefix."""
    marker_env: Mapping[str, str]
    version_info: tuple[int, int, int]
    ext_suffix: str | None
    sys_path: tuple[str, ...]
    """``sys.path`` plus the site-packages dirs ``site`` would add (``.pth`` additions not run)."""
    extension_suffixes: tuple[str, ...] = ()
    """``importlib.machinery.EXTENSION_SUFFIXES``: the file endings import loads extension
    modules from (``.cpython-311-x86_64-linux-gnu.so``, ``.abi3.so``, ``.so``)."""
    fallback_reason: str | None = None
    """Why the interpreter was not asked (or did not answer); None when it did."""


def locate_target(
    python: str | None, venv: str | None, environ: Mapping[str, str], cwd: Path
) -> TargetEnv:
    """Pick the target environment the way uv does; raise TargetError naming the path.

    ``--python`` (or ``$UV_PYTHON``) and ``--venv`` each take a venv directory or an
    interpreter in it; then ``$VIRTUAL_ENV``; then ``.venv`` in ``cwd`` or the nearest parent
    that has one.
    """
    if python is not None and venv is not None:
        raise UsageError("--python and --venv are mutually exclusive", hint=HINT)
    source = "--python"
    if python is None and venv is None and _names_interpreter(environ.get("UV_PYTHON"), environ):
        python, source = environ["UV_PYTHON"], "UV_PYTHON"
    if python is not None:
        return _dir_or_python(python, source, environ, cwd)
    if venv is not None:
        return _dir_or_python(venv, "--venv", environ, cwd)
    if environ.get("VIRTUAL_ENV"):
        return _from_dir(_absolute(cwd, environ["VIRTUAL_ENV"]), "VIRTUAL_ENV")
    for parent in (cwd, *cwd.parents):
        if (parent / ".venv").is_dir():
            return _from_dir(_absolute(parent, ".venv"), f"{parent / '.venv'}")
    raise TargetError(
        f"{cwd / '.venv'}: no environment (VIRTUAL_ENV is not set and no .venv in "
        "this directory or a parent)",
        hint=HINT,
    )


def _names_interpreter(value: str | None, environ: Mapping[str, str]) -> bool:
    """``UV_PYTHON`` as a path or a command on PATH; a version request (``3.11``) is uv's
    to resolve among interpreters and leaves the choice to ``$VIRTUAL_ENV`` and ``.venv``."""
    if not value:
        return False
    return os.sep in value or shutil.which(value, path=environ.get("PATH", "")) is not None


def _dir_or_python(given: str, source: str, environ: Mapping[str, str], cwd: Path) -> TargetEnv:
    """A directory is an environment; anything else an interpreter (a path or a name on PATH)."""
    path = _absolute(cwd, given)
    if path.is_dir():
        return _from_dir(path, source)
    if source == "--venv" and not os.path.lexists(path):
        raise TargetError(f"{path}: no such directory (from --venv)", hint=HINT)
    return _from_python(given, environ, cwd)


def _absolute(cwd: Path, p: str) -> Path:
    """Absolute and lexically normal, without resolving symlinks (``bin/python`` is one)."""
    return Path(os.path.normpath(cwd / Path(p).expanduser()))


def _from_dir(named: Path, source: str) -> TargetEnv:
    """The environment at ``named``, resolved once to its real path: every later step acts
    on that directory, even if a symlink on the way is swapped while cudafix runs."""
    prefix = Path(os.path.realpath(named))
    if not prefix.is_dir():
        raise TargetError(f"{prefix}: no such directory (from {source})", hint=HINT)
    if not is_environment(prefix):
        raise TargetError(
            f"{prefix}: not a Python environment (no pyvenv.cfg, no lib/python*/site-packages)",
            hint=HINT,
        )
    return TargetEnv(prefix, _interpreter_in(prefix))


def _from_python(python: str, environ: Mapping[str, str], cwd: Path) -> TargetEnv:
    found = _find_python(python, environ, cwd)
    exe = Path(os.path.realpath(found.parent)) / found.name  # bin/python itself is a link
    for candidate in (exe.parent, exe.parent.parent):
        if (candidate / "pyvenv.cfg").is_file():
            return TargetEnv(candidate, exe)
    prefix = exe.parent.parent
    if _layout_site_packages(prefix):
        return TargetEnv(prefix, exe)
    raise TargetError(
        f"{exe}: not inside a Python environment (no pyvenv.cfg next to it or above it)",
        hint=HINT,
    )


def _find_python(python: str, environ: Mapping[str, str], cwd: Path) -> Path:
    if os.sep not in python and not (cwd / python).exists():
        found = shutil.which(python, path=environ.get("PATH", ""))
        if found is None:
            raise TargetError(f"{python}: no such interpreter on PATH", hint=HINT)
        python = found
    exe = _absolute(cwd, python)
    if not os.path.lexists(exe):
        raise TargetError(f"{exe}: no such interpreter", hint=HINT)
    return exe


def interpreter(prefix: Path, known: Path | str | None = None) -> Path:
    """The interpreter that acts on the target: the one found for it (the inventory's, the
    plan's ``target.python``), else ``bin/python`` under the prefix. Backends, staging and
    probes all run it, so the fallback is one rule, not one per caller. Undo and guarded runs
    know only the prefix, and so always name ``bin/python``."""
    return Path(known) if known else prefix / "bin" / "python"


def _interpreter_in(prefix: Path) -> Path | None:
    for name in ("bin/python", "bin/python3", "Scripts/python.exe"):
        if os.path.lexists(prefix / name):
            return prefix / name
    return None


def is_environment(prefix: Path) -> bool:
    """A venv (``pyvenv.cfg``) or at least a prefix with a site-packages layout."""
    return (prefix / "pyvenv.cfg").is_file() or bool(_layout_site_packages(prefix))


def layout_site_packages(prefix: Path) -> tuple[EnvPath, ...]:
    """The site-packages directories laid out under ``prefix`` (without asking its Python)."""
    return _layout_site_packages(prefix)


def _layout_site_packages(prefix: Path) -> tuple[EnvPath, ...]:
    """``lib/python3.*/site-packages`` then ``lib64``, once each (``lib64`` is often ``-> lib``)."""
    found = sorted(prefix.glob("lib/python3.*/site-packages"))
    found += sorted(prefix.glob("lib64/python3.*/site-packages"))
    seen: set[str] = set()
    out: list[EnvPath] = []
    for p in found:
        real = os.path.realpath(p)
        if p.is_dir() and real not in seen:
            seen.add(real)
            out.append(EnvPath(p.relative_to(prefix).as_posix()))
    return tuple(out)


def query_interpreter(target: TargetEnv, *, timeout: float = QUERY_TIMEOUT) -> InterpreterInfo:
    """Ask the target interpreter (one isolated subprocess); fall back to the disk layout."""
    if target.python is None:
        return fallback_info(target.prefix, "the environment has no interpreter")
    cache_file = StateDir(target.prefix).interpreter_cache
    key = _answer_key(target)
    cached = _cached_answer(cache_file, key)
    if cached is not None:
        with contextlib.suppress(ValueError, KeyError, TypeError):
            return _parse_answer(target, cached)
    from cudafix.process import run  # a warm run asks nothing: no subprocess to import

    done = run([target.python, "-I", "-S", "-c", _QUERY], timeout=timeout)
    if done.timed_out:
        return fallback_info(target.prefix, f"{target.python} timed out after {timeout:g}s")
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return fallback_info(
            target.prefix, f"{target.python} exited {done.returncode}: {last[:200]}"
        )
    try:
        data = json.loads(done.stdout)
        info = _parse_answer(target, data)
    except (ValueError, KeyError, TypeError) as e:
        return fallback_info(target.prefix, f"{target.python} gave an unreadable answer ({e})")
    if key is not None:
        save_cache(cache_file, _CACHE_FORMAT, _CACHE_VERSION, {"key": key, "answer": data})
    return info


def _answer_key(target: TargetEnv) -> list[Any] | None:
    """What the interpreter's answer depends on: the interpreter (link and target), its
    ``pyvenv.cfg``, the kernel (``platform_release``) and the question itself.

    None when any of those files changed within the racy window (not cached then).
    """
    assert target.python is not None
    parts: list[Any] = [str(target.python), hashlib.sha256(_QUERY.encode()).hexdigest()]
    parts.append(list(os.uname()))
    now = time.time_ns()
    for path, follow in ((target.python, False), (target.python, True),
                         (target.prefix / "pyvenv.cfg", True)):  # fmt: skip
        try:
            st = path.stat() if follow else path.lstat()
        except OSError:
            parts.append(None)
            continue
        changed = max(st.st_mtime_ns, st.st_ctime_ns)
        if changed >= now - RACY_NS:
            return None
        parts.append([st.st_dev, st.st_ino, st.st_size, changed])
    return parts


def _cached_answer(cache_file: Path, key: list[Any] | None) -> Mapping[str, Any] | None:
    if key is None:
        return None
    data = load_cache(cache_file, _CACHE_FORMAT, _CACHE_VERSION)
    if data is None or data.get("key") != key:
        return None
    answer = data.get("answer")
    return answer if isinstance(answer, dict) else None


def _parse_answer(target: TargetEnv, data: Mapping[str, Any]) -> InterpreterInfo:
    from cudafix.env.record import env_path_of  # not on the warm path: it asks no interpreter

    reported = Path(str(data["prefix"]))
    if os.path.realpath(reported) != os.path.realpath(target.prefix):
        raise TargetError(
            f"{target.python}: its sys.prefix is {reported}, not {target.prefix}", hint=HINT
        )
    sites: list[EnvPath] = []
    for key in ("purelib", "platlib"):
        rel = env_path_of(reported, Path(os.path.normpath(str(data[key]))))
        if rel is not None and rel not in sites:
            sites.append(rel)
    major, minor, micro = (int(x) for x in data["version_info"])
    ext = data.get("ext_suffix")
    suffixes = data.get("extension_suffixes")
    if not isinstance(suffixes, list) or not all(isinstance(x, str) for x in suffixes):
        suffixes = guess_extension_suffixes((major, minor), ext if isinstance(ext, str) else None)
    return InterpreterInfo(
        prefix=target.prefix,
        site_packages=tuple(sites),
        marker_env={str(k): str(v) for k, v in dict(data["markers"]).items()},
        version_info=(major, minor, micro),
        ext_suffix=ext if isinstance(ext, str) else None,
        sys_path=tuple(str(p) for p in data["sys_path"]),
        extension_suffixes=tuple(suffixes),
    )


def guess_extension_suffixes(version: tuple[int, int], ext_suffix: str | None) -> tuple[str, ...]:
    """CPython's ``EXTENSION_SUFFIXES`` on Linux, for an interpreter that cannot be asked."""
    tagged = ext_suffix or f".cpython-{version[0]}{version[1]}-{platform.machine()}-linux-gnu.so"
    return (tagged, ".abi3.so", ".so")


def fallback_info(prefix: Path, reason: str) -> InterpreterInfo:
    """Layout and markers from disk: ``lib/python3.*/site-packages`` and ``pyvenv.cfg``."""
    cfg = read_pyvenv_cfg(prefix / "pyvenv.cfg")
    sites = _layout_site_packages(prefix)
    version = _version_from(cfg, sites)
    full = ".".join(map(str, version))
    impl = cfg.get("implementation", "CPython")
    markers = {
        "implementation_name": impl.lower(),
        "implementation_version": full,
        "os_name": os.name,
        "platform_machine": platform.machine(),
        "platform_release": platform.release(),
        "platform_system": platform.system(),
        "platform_version": platform.version(),
        "python_full_version": full,
        "platform_python_implementation": impl,
        "python_version": f"{version[0]}.{version[1]}",
        "sys_platform": sys.platform,
    }
    suffixes = guess_extension_suffixes(version[:2], None)
    return InterpreterInfo(
        prefix, sites, markers, version, None, (), suffixes, fallback_reason=reason
    )


def read_pyvenv_cfg(path: Path) -> dict[str, str]:
    """``key = value`` lines; a missing or unreadable file is an empty config."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip().lower()] = value.strip()
    return out


def _version_from(cfg: Mapping[str, str], sites: tuple[EnvPath, ...]) -> tuple[int, int, int]:
    for raw in (cfg.get("version_info"), cfg.get("version")):
        parsed = _parse_version(raw)
        if parsed is not None:
            return parsed
    for site in sites:
        parsed = _parse_version(site.split("/")[1].removeprefix("python"))
        if parsed is not None:
            return parsed
    return (sys.version_info.major, sys.version_info.minor, 0)


def _parse_version(raw: str | None) -> tuple[int, int, int] | None:
    m = _VERSION.match(raw or "")
    if m is None:
        return None
    return (int(m[1]), int(m[2]), int(m[3] or 0))
