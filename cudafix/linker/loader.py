"""Resolve an object's dependency tree exactly as glibc's ld.so (2.36) would.

The search order is ld.so(8)'s (``_dl_map_object`` in ``elf/dl-load.c``), not auditwheel's:

1. DT_RPATH of the requesting object, then of the object that loaded it, up to the root;
   skipped entirely when the requester has DT_RUNPATH, and an object's own DT_RPATH is
   void when it has DT_RUNPATH (``ElfInfo.effective_rpath``);
2. LD_LIBRARY_PATH;
3. DT_RUNPATH of the requester only (never inherited);
4. ``/etc/ld.so.cache``, 5. the default dirs - both skipped under DF_1_NODEFLIB.

Every search directory is tried with the host's hwcaps subdirectories first
(``glibc-hwcaps/x86-64-v3``, legacy ``tls/haswell/...``), as ld.so does. A soname already
loaded anywhere in the tree (breadth-first load order, one namespace) satisfies a later
need with no search. Candidates of the wrong class/machine are skipped and the search
goes on; an existing candidate that is not a loadable ELF (a linker script, a truncated
file) stops the search with an error, as ld.so's ``open_verify`` does.

Known simplifications: paths are normalised lexically (ld.so lets the kernel resolve
``..`` after a symlinked directory); the Python executable that dlopens an extension
module is not modelled as the main map (the root is); torch's Python-side preloading of
``nvidia/*/lib`` is not modelled; LD_PRELOAD is ignored. A framework's load by full path
(``DlopenTable.preload``) that finds no file falls back to the file's name, searched as
above from the loading object, as the frameworks' own loaders do.
"""

from __future__ import annotations

import functools
import posixpath
import re
import sys
import weakref
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Protocol, runtime_checkable

from cudafix.linker.elf import ElfInfo, ElfProblem
from cudafix.linker.elfindex import EnvironmentView
from cudafix.linker.hostview import HostView
from cudafix.linker.ldcache import CacheEntry, entries_for, hwcap_subdirs
from cudafix.model.errors import InputError
from cudafix.model.names import Soname

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

__all__ = [
    "DlopenTable",
    "EnvironmentView",
    "LibraryView",
    "LoadTree",
    "Lookup",
    "SearchConfig",
    "resolve",
]

CACHE_MARK = "(ld.so.cache)"
"""Stands for the cache in ``Lookup.searched``."""


class LibraryView(Protocol):
    """Where the resolver looks files up: a real or simulated filesystem."""

    def elf(self, path: str) -> ElfInfo | None:
        """Absolute, lexically normalised path; None = absent or not a loadable ELF."""


@runtime_checkable
class DiagnosingView(Protocol):
    """Optional extras a view may offer: why a file is unusable, and file identity."""

    def problem(self, path: str) -> ElfProblem | None:
        """Why an existing file at ``path`` is not a loadable ELF; None if absent or fine."""

    def canonical(self, path: str) -> str:
        """The path with symlinks resolved, so one file loaded twice is recognised."""

    def dir_exists(self, path: str) -> bool:
        """Whether a directory is there: lets the search skip absent hwcaps subdirectories."""


@dataclass(frozen=True)
class DlopenTable:
    """Hidden dependencies: sonames an object dlopen()s, invisible in DT_NEEDED."""

    edges: Mapping[str, tuple[Soname, ...]] = field(default_factory=dict)
    """Keyed by the loading object's soname (or file name)."""
    by_object: Mapping[str, tuple[Soname, ...]] = field(default_factory=dict)
    """Keyed by the loading object's absolute path: a framework object's run-time dlopens
    (:mod:`cudafix.linker.runtime`), searched through that object's RPATH/RUNPATH."""
    preload: Mapping[str, tuple[Soname, ...]] = field(default_factory=dict)
    """Root object -> absolute paths loaded before it in its process (a framework loading a
    library by full path just before importing the module that needs it)."""

    @classmethod
    def from_mapping(cls, edges: Mapping[str, Sequence[str]]) -> DlopenTable:
        return cls({k: tuple(Soname(v) for v in vals) for k, vals in edges.items()})

    @classmethod
    def load(cls, path: Path) -> DlopenTable:
        """Read ``[dlopen]`` ``"loader.so" = ["part.so", ...]`` from a TOML file.

        Raises :class:`InputError` (exit 2) naming the file when it is not such a table.
        """
        try:
            with path.open("rb") as fh:
                data = tomllib.load(fh)
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise InputError(f"--dlopen-table {path}: not a readable TOML file: {exc}") from exc
        edges = data.get("dlopen", {})
        if not isinstance(edges, dict) or not all(
            isinstance(v, list) and all(isinstance(p, str) for p in v) for v in edges.values()
        ):
            raise InputError(
                f'--dlopen-table {path}: expected [dlopen] "libx.so.1" = ["libpart.so.1", ...]'
            )
        return cls.from_mapping(edges)

    @classmethod
    def default(cls) -> DlopenTable:
        """The table shipped in ``cudafix/data/dlopen.toml`` (read once per process)."""
        return _default_table()

    def merged(self, other: DlopenTable) -> DlopenTable:
        """Union of both tables; for a key in both, ``self``'s parts come first."""
        return DlopenTable(
            _union(self.edges, other.edges),
            _union(self.by_object, other.by_object),
            _union(self.preload, other.preload),
        )


def _union(
    first: Mapping[str, tuple[Soname, ...]], second: Mapping[str, tuple[Soname, ...]]
) -> dict[str, tuple[Soname, ...]]:
    out = dict(first)
    for key, parts in second.items():
        out[key] = out.get(key, ()) + tuple(p for p in parts if p not in out.get(key, ()))
    return out


@functools.lru_cache(maxsize=1)
def _default_table() -> DlopenTable:
    text = resources.files("cudafix").joinpath("data/dlopen.toml").read_text()
    return DlopenTable.from_mapping(tomllib.loads(text).get("dlopen", {}))


@dataclass(frozen=True, eq=False)
class SearchConfig:
    """The process-wide inputs of ld.so's search (environment and host facts).

    Compared by identity: resolution results are memoised per (view, config) object.
    """

    ld_library_path: tuple[str, ...] = ()
    ld_cache: tuple[CacheEntry, ...] = ()
    default_dirs: tuple[str, ...] = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu")
    lib: str = "lib/x86_64-linux-gnu"
    """``$LIB``: Debian's multiarch dir (check with ``LD_DEBUG=libs``)."""
    platform: str | None = None
    """``$PLATFORM`` (``haswell`` on AVX2 x86-64); None drops elements that use it."""
    subdirs: tuple[str, ...] = ("",)
    """Subdirectories tried in every search dir, in order; ``""`` is the dir itself."""
    preloaded: tuple[tuple[Soname, str], ...] = ()
    """Objects in the namespace before the root (ld.so itself): soname, path."""
    cwd: str = "/"
    """Relative search entries (and empty ones) are relative to this."""

    @classmethod
    def for_host(
        cls, host_view: HostView, ld_library_path: Sequence[str] | None = None
    ) -> SearchConfig:
        """This host's loader, as ``host_view`` reads it: its ld.so.cache, default dirs,
        hwcaps and ``$PLATFORM``."""
        interp = host_view.interpreter()
        host = host_view.loader(interp)
        return cls(
            ld_library_path=tuple(ld_library_path or ()),
            ld_cache=host_view.ld_cache(),
            default_dirs=host.default_dirs,
            lib=host.default_dirs[0].lstrip("/"),
            platform=host.platform,
            subdirs=hwcap_subdirs(host),
            preloaded=((Soname(posixpath.basename(interp)), interp),),
            cwd=str(Path.cwd()),
        )

    @cached_property
    def _cache_index(self) -> dict[tuple[int, str], dict[str, str]]:
        return {}

    def cache_lookup(self, name: str, elf_class: int, machine: str) -> str | None:
        """The path ld.so's cache gives ``name``: the first ordinary entry with our flags.

        glibc-hwcaps and legacy-hwcap cache entries are ignored (ldconfig writes none here).
        """
        index = self._cache_index.get((elf_class, machine))
        if index is None:
            index = {}
            for entry in entries_for(self.ld_cache, elf_class, machine):
                if entry.hwcaps_subdir is None and entry.hwcap == 0:
                    index.setdefault(entry.key, entry.path)
            self._cache_index[(elf_class, machine)] = index
        return index.get(name)


def split_ld_library_path(value: str) -> tuple[str, ...]:
    """ld.so splits LD_LIBRARY_PATH on ``:`` and ``;``; an empty element is the cwd."""
    return tuple(re.split("[:;]", value)) if value else ()


@dataclass(frozen=True)
class Lookup:
    """One need (DT_NEEDED or table dlopen edge) and where ld.so finds it: one step of a
    :class:`LoadTree`."""

    requester: str
    need: Soname
    provider: str | None
    """Absolute normalised path; None when unresolved."""
    how: str
    """``rpath``, ``ld_library_path``, ``runpath``, ``ld.so.cache``, ``default``, ``loaded``,
    ``path``, ``dlopen`` (table edges); ``not-found`` or ``invalid`` when unresolved."""
    searched: tuple[str, ...]
    """Directories tried, in order (``(ld.so.cache)`` marks the cache)."""
    error: str | None = None
    """Why the search stopped on an unusable file (``how == "invalid"``)."""


@dataclass(frozen=True)
class LoadTree:
    """Everything loading ``root`` pulls in, in ld.so's order."""

    root: str
    steps: tuple[Lookup, ...]
    objects: tuple[str, ...] = ()
    """Loaded objects in load order, the root first."""
    problem: str | None = None
    """Set when the root itself is absent or not a loadable ELF."""

    @property
    def unresolved(self) -> tuple[Lookup, ...]:
        return tuple(s for s in self.steps if s.provider is None)


_DST = re.compile(r"\$(?:\{(ORIGIN|LIB|PLATFORM)\}|(ORIGIN|LIB|PLATFORM)(?![A-Za-z0-9_]))")


def expand_entry(entry: str, origin: str, config: SearchConfig) -> str | None:
    """Substitute ``$ORIGIN``/``${ORIGIN}``, ``$LIB``, ``$PLATFORM``; None drops the element."""
    values = {"ORIGIN": origin, "LIB": config.lib, "PLATFORM": config.platform}
    missing = False

    def sub(match: re.Match[str]) -> str:
        nonlocal missing
        value = values[match.group(1) or match.group(2)]
        if value is None:
            missing = True
            return ""
        return value

    expanded = _DST.sub(sub, entry)
    if missing:
        return None
    return normalise(posixpath.join(config.cwd, expanded))


def normalise(path: str) -> str:
    """Lexical normalisation that also folds POSIX's special leading ``//``."""
    norm = posixpath.normpath(path)
    return "/" + norm.lstrip("/") if norm.startswith("//") else norm


def resolve(
    root: str, view: LibraryView, config: SearchConfig, dlopen: DlopenTable | None = None
) -> LoadTree:
    """Load ``root`` as ld.so would (``dlopen=None`` uses the shipped table)."""
    table = DlopenTable.default() if dlopen is None else dlopen
    return _Walk(normalise(root), view, config, table).run()


@dataclass
class _Obj:
    path: str
    info: ElfInfo | None
    loader: int | None


@dataclass(frozen=True)
class _Found:
    provider: str | None
    how: str
    searched: tuple[str, ...]
    error: str | None = None


_Memo = dict[int, tuple[SearchConfig, dict[object, object]]]
_MEMOS: weakref.WeakKeyDictionary[object, _Memo] = weakref.WeakKeyDictionary()


def _memo_for(view: LibraryView, config: SearchConfig) -> dict[object, object]:
    """Search results per (view, config), shared by every root resolved against them.

    The config is kept alive next to its memo, so its ``id`` cannot be reused.
    """
    try:
        per_view = _MEMOS.setdefault(view, {})
    except TypeError:
        return {}
    return per_view.setdefault(id(config), (config, {}))[1]


class _Walk:
    """One breadth-first load of a tree (``_dl_map_object_deps``)."""

    def __init__(
        self, root: str, view: LibraryView, config: SearchConfig, table: DlopenTable
    ) -> None:
        self.root = root
        self.view = view
        self.diag = view if isinstance(view, DiagnosingView) else None
        self.config = config
        self.table = table
        self.memo = _memo_for(view, config)
        self.objects: list[_Obj] = []
        self.names: dict[str, int] = {}
        self.identity: dict[str, int] = {}
        self.steps: list[Lookup] = []
        self.arch: tuple[int, str] = (0, "")

    def run(self) -> LoadTree:
        info = self.view.elf(self.root)
        if info is None and not self._python_loader():
            problem = self.diag.problem(self.root) if self.diag else None
            detail = problem.detail if problem else f"{self.root}: not found"
            return LoadTree(self.root, (), (self.root,), detail)
        self.arch = (info.elf_class, info.machine) if info else self._interpreter_arch()
        for soname, path in self.config.preloaded:
            self._add(path, None, None, soname)
        root = self._add(self.root, info, None, self.root)
        for path in self.table.preload.get(self.root, ()):
            new = self._need(root, path, dlopen=True, preload=True)
            if new is not None:
                self._bfs(new)
        self._bfs(root)
        self._dlopen_phase()
        paths = tuple(o.path for o in self.objects if o.info is not None)
        return LoadTree(self.root, tuple(self.steps), paths)

    def _python_loader(self) -> bool:
        """A Python module the table says loads libraries (``ctypes.CDLL``): a root that is
        no ELF object, whose loads are the interpreter's own ``dlopen()``s."""
        return self.root.endswith(".py") and (
            self.root in self.table.by_object or self.root in self.table.preload
        )

    def _interpreter_arch(self) -> tuple[int, str]:
        """(class, machine) of the ld.so that runs the interpreter: what a Python module's
        loads must match."""
        for _soname, path in self.config.preloaded:
            info = self.view.elf(path)
            if info is not None:
                return info.elf_class, info.machine
        return 64, "EM_X86_64"

    def _add(self, path: str, info: ElfInfo | None, loader: int | None, name: str) -> int:
        index = len(self.objects)
        self.objects.append(_Obj(path, info, loader))
        self.names.setdefault(name, index)
        self.names.setdefault(path, index)
        if info is not None and info.soname:
            self.names.setdefault(info.soname, index)
        self.identity.setdefault(self._canonical(path), index)
        return index

    def _bfs(self, start: int) -> None:
        queue = deque([start])
        while queue:
            index = queue.popleft()
            info = self.objects[index].info
            for need in info.needed if info else ():
                new = self._need(index, need, dlopen=False)
                if new is not None:
                    queue.append(new)

    def _dlopen_phase(self) -> None:
        position = 0
        while position < len(self.objects):
            obj = self.objects[position]
            key = obj.info.soname or posixpath.basename(obj.path) if obj.info else None
            parts = self.table.edges.get(key, ()) if key else ()
            for part in (*parts, *self.table.by_object.get(obj.path, ())):
                new = self._need(position, part, dlopen=True)
                if new is not None:
                    self._bfs(new)
            position += 1

    def _need(self, index: int, need: Soname, *, dlopen: bool, preload: bool = False) -> int | None:
        """Record one step; return the index of a newly loaded object, if any.

        ``preload``: a framework's load by full path, which falls back to the file's name
        through the loading object's search path where that file is gone
        (:meth:`_preload_fallback`)."""
        requester = self.objects[index].path
        loaded = self.names.get(need)
        if loaded is not None:
            how = "dlopen" if dlopen else "loaded"
            self.steps.append(Lookup(requester, need, self.objects[loaded].path, how, ()))
            return None
        found = self._find(index, need)
        if preload and found.provider is None and found.how == "not-found":
            found = self._preload_fallback(index, need, found)
        how = "dlopen" if dlopen and found.provider else found.how
        if found.provider is None:
            self.steps.append(Lookup(requester, need, None, how, found.searched, found.error))
            return None
        same = self.identity.get(self._canonical(found.provider))
        provider = self.objects[same].path if same is not None else found.provider
        self.steps.append(Lookup(requester, need, provider, how, found.searched))
        if same is not None:
            self.names.setdefault(need, same)
            return None
        return self._add(found.provider, self.view.elf(found.provider), index, need)

    def _preload_fallback(self, index: int, path: Soname, missed: _Found) -> _Found:
        """Where a framework's load by full path finds no file, the library's name as the
        loading object would find it: JAX's ``_load`` swallows the error and XLA then
        dlopen()s the soname; cuda-pathfinder searches the system by name next; onnxruntime's
        provider names it in DT_NEEDED. A copy the host has (``/usr/local/cuda``, the
        ld.so cache) then serves, as it does on a GPU host whose wheel was uninstalled."""
        name = Soname(posixpath.basename(path))
        if name in self.names:
            return _Found(self.objects[self.names[name]].path, "loaded", missed.searched)
        found = self._find(index, name)
        if found.provider is None:
            return _Found(None, found.how, missed.searched + found.searched, found.error)
        return _Found(found.provider, found.how, missed.searched + found.searched)

    def _find(self, index: int, need: Soname) -> _Found:
        if "/" in need:
            path = normalise(posixpath.join(self.config.cwd, need))
            kind, error = self._probe(path)
            provider = path if kind == "ok" else None
            how = "path" if provider else ("invalid" if kind == "invalid" else "not-found")
            return _Found(provider, how, (posixpath.dirname(path),), error)
        info = self.objects[index].info
        tiers = self._tiers(index, info)
        nodeflib = info.nodeflib if info is not None else False
        key = (need, tiers, nodeflib, self.arch)
        cached = self.memo.get(key)
        if isinstance(cached, _Found):
            return cached
        found = self._search(need, tiers, nodeflib)
        self.memo[key] = found
        return found

    def _tiers(self, index: int, info: ElfInfo | None) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """The directories searched for a need of ``info`` (None: a Python module's
        ``dlopen()``, which sees only the interpreter's paths)."""
        rpath: list[str] = []
        if info is not None and not info.runpath:
            chain: int | None = index
            while chain is not None:
                obj = self.objects[chain]
                rpath += self._expand(obj.info.effective_rpath if obj.info else (), obj.path)
                chain = obj.loader
        llp = self._expand(self.config.ld_library_path, self.root)
        runpath = self._expand(info.runpath if info else (), self.objects[index].path)
        return (("rpath", tuple(rpath)), ("ld_library_path", llp), ("runpath", runpath))

    def _expand(self, entries: tuple[str, ...], owner: str) -> tuple[str, ...]:
        """Expanded search dirs of one object's list, memoised (the same libs recur)."""
        if not entries:
            return ()
        key = ("expand", owner, entries)
        cached = self.memo.get(key)
        if isinstance(cached, tuple):
            return cached
        origin = posixpath.dirname(owner)
        expanded = (expand_entry(entry, origin, self.config) for entry in entries)
        dirs = tuple(d for d in expanded if d is not None)
        self.memo[key] = dirs
        return dirs

    def _search(
        self, need: Soname, tiers: tuple[tuple[str, tuple[str, ...]], ...], nodeflib: bool
    ) -> _Found:
        searched: list[str] = []
        for how, dirs in tiers:
            for directory in dirs:
                searched.append(directory)
                found = self._in_dir(need, directory, how, searched)
                if found is not None:
                    return found
        if nodeflib:
            return _Found(None, "not-found", self._shared(tuple(searched)))
        searched.append(CACHE_MARK)
        cached = self.config.cache_lookup(need, *self.arch)
        if cached and self._probe(normalise(cached))[0] == "ok":
            return _Found(normalise(cached), "ld.so.cache", tuple(searched))
        for directory in self.config.default_dirs:
            searched.append(directory)
            found = self._in_dir(need, directory, "default", searched)
            if found is not None:
                return found
        return _Found(None, "not-found", self._shared(tuple(searched)))

    def _shared(self, searched: tuple[str, ...]) -> tuple[str, ...]:
        """One tuple per distinct search list: every need an object's search misses was
        looked for in the same directories, and keeping a copy per need made memory grow
        as objects x needs x directories."""
        return self.memo.setdefault(("searched", searched), searched)  # type: ignore[return-value]

    def _in_dir(self, need: str, directory: str, how: str, searched: list[str]) -> _Found | None:
        for sub in self._subdirs(directory):
            path = normalise(posixpath.join(directory, sub, need))
            kind, error = self._probe(path)
            if kind == "ok":
                return _Found(path, how, tuple(searched))
            if kind == "invalid":
                return _Found(None, "invalid", tuple(searched), error)
        return None

    def _subdirs(self, directory: str) -> tuple[str, ...]:
        """The configured subdirectories (``glibc-hwcaps/x86-64-v3``, ...) that exist here.

        ld.so tries every one; skipping absent ones up front changes no answer and saves
        ~19 lookups per directory per need.
        """
        if self.diag is None:
            return self.config.subdirs
        key = ("subdirs", directory)
        cached = self.memo.get(key)
        if isinstance(cached, tuple):
            return cached
        subs = tuple(
            sub
            for sub in self.config.subdirs
            if self.diag.dir_exists(normalise(posixpath.join(directory, sub)))
        )
        self.memo[key] = subs
        return subs

    def _probe(self, path: str) -> tuple[str, str | None]:
        """``ok``, ``absent``, ``skip`` (other class/machine, unreadable) or ``invalid``."""
        info = self.view.elf(path)
        if info is not None:
            return ("ok", None) if (info.elf_class, info.machine) == self.arch else ("skip", None)
        problem = self.diag.problem(path) if self.diag else None
        if problem is None:
            return "absent", None
        if problem.reason == "unreadable":
            return "skip", problem.detail
        return "invalid", problem.detail

    def _canonical(self, path: str) -> str:
        return self.diag.canonical(path) if self.diag else path
