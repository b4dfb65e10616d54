"""Run-time loads inferred from soname literals, for frameworks no table row describes.

An object whose read-only data spells ``"libcudnn.so.9"``, or a Python module with the string
``"libcurand.so.10"``, probably loads that library at run time. Such a name becomes an edge
(a :class:`~cudafix.linker.runtime.BoundLoads`, as the run-time table's rows do) only where
it is evidence, not noise:

- a system library (glibc, the NVIDIA driver, an optional system stack, anything the host's
  ``ld.so.cache`` has and no file of the environment provides) is never a wheel edge;
- a library the literal's own distribution ships is its own business (its RECORD says so);
- a library the environment provides counts when the file lies on the object's own search
  path (its RPATH/RUNPATH names the wheel's directory), or when the literal's distribution
  brings its distribution: through its Requires-Dist, base or an extra that is installed
  (some requirement of it met), transitively, or through those of a distribution that
  requires it. Found on the search path, it is loaded by soname; else by full path, as
  cuda-pathfinder and JAX's ``_load_nvidia_libraries`` do;
- a library nothing provides counts when such a requirement is unmet and is named after
  it (``nvidia-cudnn-cu12`` for ``libcudnn.so.9``): a plain uninstall took it;
- names differing only in the version (``libcufft.so.12`` or ``libcufft.so.11``, tried in
  turn) are alternatives: one provided satisfies the load.

A Python module's load is given to the objects of its distribution whose DT_NEEDED names
the library (loaded by path first, then imported: CuPy's pattern), else to the module itself.

A name whose version is built at run time (``f"libcufft.so.{v}"``, read as ``libcufft.so.*``)
stands for every version of that library the environment provides, or provided at the last
reading (:mod:`cudafix.env.lastseen`).

A directory on an object's RPATH/RUNPATH that no name it links (DT_NEEDED) or spells
resolves into, nor one its siblings (its directory's objects of its distribution) do, is
where it dlopen()s libraries by a name it builds (TensorFlow's ``"lib" +
name + ".so." + version``): each library there from a distribution its own requirements
bring is a load of it; one that was there at the last reading, whose distribution such a
requirement still names and is gone, is a load nothing provides now (a plain uninstall
took it). Its own directory (``$ORIGIN``, where its siblings are) is no such evidence.
"""

from __future__ import annotations

import functools
import posixpath
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping

from packaging.requirements import Requirement

from cudafix.env.inventory import Inventory
from cudafix.env.lastseen import Memory, Seen
from cudafix.env.pysources import ANY_VERSION, Literals
from cudafix.linker.elf import ElfInfo
from cudafix.linker.elfindex import ElfIndex
from cudafix.linker.loader import SearchConfig, expand_entry
from cudafix.linker.runtime import BoundLoads, RuntimeLoad
from cudafix.model.names import DistName, EnvPath, Soname, normalize_name, site_relative
from cudafix.plan.wants import Brings, Wants

GLIBC = frozenset(
    {
        "libc.so.6",
        "libm.so.6",
        "libdl.so.2",
        "libpthread.so.0",
        "librt.so.1",
        "libutil.so.1",
        "libresolv.so.2",
        "libnsl.so.1",
        "libanl.so.1",
        "ld-linux-x86-64.so.2",
    }
)
"""The C library's own names: always the system's."""
_STEM = re.compile(r"^(?P<stem>.+?\.so)(?:\.[0-9.]+|\.\*)?$")
_NOISE_TOKENS = re.compile(r"^(nvidia|cu[0-9]+x?)$")


def stem(soname: str) -> str:
    """``libcufft.so`` of ``libcufft.so.11`` (or of ``libcufft.so.*``): what alternatives share."""
    match = _STEM.match(soname)
    return match.group("stem") if match else soname


_GLIBC_STEMS = frozenset(stem(g) for g in GLIBC)
"""The C library's names without their versions: ``"libc.so"`` (the development link, a
linker script) or ``"libm.so"`` spelled in a source is the C library, never a wheel's."""


@functools.lru_cache(maxsize=16384)
def named_after(dist: str, soname: str) -> bool:
    """Whether a distribution's name names the library (``nvidia-cuda-runtime-cu12`` and
    ``libcudart.so.12``; ``nvidia-cublas`` and ``libcublasLt.so.13``): a word of the name
    (``nvidia`` and ``cuNN`` aside, four letters or more, or all of it) begins the library's,
    and when another word follows, the library's name goes on with that word's first letter
    (``cuda`` then ``r`` of ``runtime``; not ``nvidia-cuda-nvrtc`` for ``libcudart``, nor
    ``nvidia-cuda-runtime`` for the driver's ``libcuda``). A short word that is not all of
    the name names nothing: ``libarchive-c`` does not name ``libc.so``."""
    base, words = _library_base(soname), _name_words(dist)
    return any(
        (len(w) >= 4 or len(words) == 1)
        and (base == w or base.startswith(w))
        and (i + 1 == len(words) or words[i + 1][:1] == base[len(w) : len(w) + 1])
        for i, w in enumerate(words)
    )


@functools.lru_cache(maxsize=4096)
def _library_base(soname: str) -> str:
    """``cudart`` of ``libcudart.so.12``: what :func:`named_after` compares with."""
    return stem(soname).removesuffix(".so").removeprefix("lib").lower()


@functools.lru_cache(maxsize=4096)
def _name_words(dist: str) -> tuple[str, ...]:
    """The words of a distribution's name that may name a library (``nvidia`` and ``cuNN``
    aside): ``("cuda", "runtime")`` of ``nvidia-cuda-runtime-cu12``."""
    return tuple(w for w in re.split(r"[-_.]+", normalize_name(dist)) if not _NOISE_TOKENS.match(w))


class UnmetIndex:
    """Unmet requirements (``Brings.unmet``), indexed for :meth:`first`: the words of their
    names that may begin a library's, and the first of each name."""

    def __init__(self, unmet: Iterable[tuple[DistName, str, Requirement]]) -> None:
        self.unmet = tuple(unmet)
        self._by_word: dict[str, list[int]] = defaultdict(list)
        self._by_name: dict[DistName, int] = {}
        for i, (_, _, req) in enumerate(self.unmet):
            words = _name_words(req.name)
            for w in dict.fromkeys(words):
                if len(w) >= 4 or len(words) == 1:
                    self._by_word[w].append(i)
            self._by_name.setdefault(normalize_name(req.name), i)

    def first(
        self, soname: str, went: Iterable[DistName]
    ) -> tuple[DistName, str, Requirement] | None:
        """The first unmet requirement named after ``soname`` (:func:`named_after`) or
        naming one of the distributions in ``went``, as a walk through them in order finds
        it; only those with a word that begins the library's name are asked."""
        base = _library_base(soname)
        named = sorted({i for k in range(len(base) + 1) for i in self._by_word.get(base[:k], ())})
        hits = [i for i in named if named_after(self.unmet[i][2].name, soname)][:1]
        hits += [self._by_name[d] for d in went if d in self._by_name]
        return self.unmet[min(hits)] if hits else None


def dir_named_after(dist: str, directory: str) -> bool:
    """Whether a distribution's name names a wheel's library directory, as the nvidia wheels
    lay them out (``nvidia-cuda-runtime-cu12`` and ``nvidia/cuda_runtime/lib``; not the
    shared ``nvidia/cu13/lib``, which names no one wheel)."""
    parts = directory.rstrip("/").split("/")
    if len(parts) < 3 or parts[-1] != "lib" or parts[-3] != "nvidia":
        return False
    name = parts[-2]
    if _NOISE_TOKENS.match(name):
        return False
    words = [w for w in re.split(r"[-_.]+", normalize_name(dist)) if not _NOISE_TOKENS.match(w)]
    return bool(words) and words == re.split(r"[-_.]+", name.lower())


def bind_literals(
    inventory: Inventory,
    elf: ElfIndex,
    python: Literals,
    marker_env: Mapping[str, str],
    config: SearchConfig,
    *,
    system: Iterable[str] = (),
    skip: Iterable[DistName] = (),
    dlopen_edges: Mapping[str, tuple[Soname, ...]] | None = None,
    remembered: Memory | None = None,
) -> BoundLoads:
    """The literals of the environment's objects and Python sources as run-time loads (pure).

    ``system``: sonames the host provides (``cudafix/data/system.toml``); ``skip``: the
    distributions a run-time table row describes (the row is the truth for them);
    ``dlopen_edges``: the soname-keyed dlopen table, whose edges are not inferred again (nor
    an object's own DT_NEEDED: already an edge); ``remembered``: what provided each library
    at the last reading, for names built at run time and libraries gone since.
    """
    binder = _Binder(
        inventory, elf, marker_env, config, frozenset(system), frozenset(skip), remembered or {}
    )
    edges = dlopen_edges or {}
    for rel, info in sorted(elf.objects.items()):
        if rel in elf.foreign:
            continue
        if info.literals:
            known = edges.get(info.soname or posixpath.basename(rel), ())
            names = [n for n in info.literals if n not in known and n not in info.needed]
            binder.object_literals(rel, info, names)
        if info.rpath or info.runpath:
            binder.search_dirs(rel, info)
    for rel, spelled in sorted(python.items()):
        binder.module_literals(rel, spelled)
    return binder.result()


class _Binder:
    def __init__(
        self,
        inventory: Inventory,
        elf: ElfIndex,
        marker_env: Mapping[str, str],
        config: SearchConfig,
        system: frozenset[str],
        skip: frozenset[DistName],
        remembered: Memory,
    ) -> None:
        self.inv, self.elf, self.env, self.config = inventory, elf, marker_env, config
        self.system, self.skip, self.remembered = system, skip, remembered
        self.prefix = str(inventory.prefix)
        self.providers: dict[str, list[EnvPath]] = defaultdict(list)
        for rel, info in sorted(elf.objects.items()):
            if rel in elf.foreign:
                continue
            self.providers[posixpath.basename(rel)].append(rel)
            if info.soname and info.soname != posixpath.basename(rel):
                self.providers[info.soname].append(rel)
        self.versions: dict[str, list[Soname]] = defaultdict(list)
        for name in sorted({*self.providers, *remembered}):
            self.versions[stem(name)].append(Soname(name))
        self.in_dir: dict[str, list[tuple[Soname, EnvPath]]] = defaultdict(list)
        for name, files in sorted(self.providers.items()):
            for rel in files:
                self.in_dir[posixpath.dirname(rel)].append((Soname(name), rel))
        self.needed_by: dict[tuple[DistName, str], list[EnvPath]] = defaultdict(list)
        for rel, info in sorted(elf.objects.items()):
            for owner in inventory.owners.get(rel, ()):
                for need in info.needed:
                    self.needed_by[(owner, need)].append(rel)
        self._siblings: dict[tuple[DistName, str], list[EnvPath]] = defaultdict(list)
        for rel in sorted(elf.objects):
            for owner in inventory.owners.get(rel, ())[:1]:
                self._siblings[(owner, posixpath.dirname(rel))].append(rel)
        self._reached_in: dict[tuple[DistName, str], frozenset[str]] = {}
        self._named_in: dict[tuple[DistName, str], frozenset[Soname]] = {}
        self.wants = Wants(inventory, marker_env)
        self._shipped: dict[DistName, frozenset[str]] = {}
        self._unmet_of: dict[DistName, UnmetIndex] = {}
        self.sonames: dict[str, list[Soname]] = defaultdict(list)
        self.paths: dict[str, list[Soname]] = defaultdict(list)
        self.rows: dict[tuple[str, str], RuntimeLoad] = {}
        self.alternatives: dict[tuple[str, str], tuple[str, ...]] = {}

    # --- requesters ---------------------------------------------------------------------

    def object_literals(self, rel: EnvPath, info: ElfInfo, names: Iterable[Soname]) -> None:
        owner = self._owner(rel)
        if owner is None:
            return
        own_dirs = self._own_dirs(rel, info)
        for group in self._groups(owner, names):
            bound: list[tuple[str, str, RuntimeLoad]] = []
            for name, path, row, brought in self._choose(
                owner, group, f"the read-only data of {rel}"
            ):
                if path is None or posixpath.dirname(path) in own_dirs:
                    bound.append((rel, name, row))
                elif brought:
                    bound.append((rel, f"{self.prefix}/{path}", row))
            self._add(bound)

    def module_literals(self, rel: EnvPath, names: Iterable[Soname]) -> None:
        owner = self._owner(rel)
        if owner is None:
            return
        for group in self._groups(owner, names):
            bound: list[tuple[str, str, RuntimeLoad]] = []
            for name, path, row, brought in self._choose(owner, group, rel):
                if not brought:
                    continue  # no requirement brings it: a name in Python code is no proof
                need = name if path is None else f"{self.prefix}/{path}"
                loaders = self.needed_by.get((owner, name)) or [rel]
                bound += [(obj, need, row) for obj in loaders]
            self._add(bound)

    def search_dirs(self, rel: EnvPath, info: ElfInfo) -> None:
        """Loads by a built name through the directories of ``rel``'s search path that no
        name it links or spells resolves into, its own aside (``$ORIGIN``: where its siblings are):
        their libraries its own requirements bring, and those the last reading saw there
        whose distribution such a requirement names and is gone; where no reading saw the
        wheel's directory, the directory itself, when an unmet requirement names it."""
        owner = self._owner(rel)
        if owner is None:
            return
        here = posixpath.dirname(rel)
        dirs = sorted(self._own_dirs(rel, info) - self._reached(owner, here) - {here})
        if not dirs:
            return
        brings = self.wants.own(owner)
        where = f"the search path of {site_relative(rel, self.inv.site_packages)}"
        for d in dirs:
            for name, path in self.in_dir.get(d, ()):
                if name in info.needed or self._ships(owner, name):
                    continue
                by = self._bringer(brings, path)
                if by is not None:
                    self._add([(rel, name, self._dir_row(owner, by, d, where))])
            gone = list(self._gone_from(d))
            for name, seen in gone:
                for dist, extra, req in brings.unmet:
                    if normalize_name(req.name) == seen.distribution:
                        self._add([(rel, name, self._dir_row(owner, (dist, extra), d, where))])
                        break
            if gone or d in self.in_dir or not self._wheel_dir(d):
                continue
            for dist, extra, req in self._taken(brings):  # no reading saw it: the directory itself
                spelled = any(named_after(req.name, n) for n in self._named(owner, here))
                if (
                    dir_named_after(req.name, d) and not spelled
                ):  # (a name it or a sibling links or spells says more)
                    need = f"{self.prefix}/{d}"
                    self._add([(rel, need, self._dir_row(owner, (dist, extra), d, where))])
                    break

    def _reached(self, owner: DistName, where: str) -> frozenset[str]:
        """The directories that the names linked or spelled by ``owner``'s objects in
        ``where`` resolve into, or resolved into at the last reading (a plain uninstall
        took the file, not the link). One build gives its objects one search path: torch's
        ``libtorch_cuda.so`` links into each nvidia wheel's directory its siblings
        (``libc10.so``, ``libgomp.so.1``) also list, and those siblings load none of them."""
        key = (owner, where)
        if key not in self._reached_in:
            self._reached_in[key] = frozenset(
                posixpath.dirname(p)
                for n in self._named(owner, where)
                for p in (
                    *self.providers.get(n, ()),
                    *(s.path for s in self.remembered.get(n, ())),
                )
            )
        return self._reached_in[key]

    def _named(self, owner: DistName, where: str) -> frozenset[Soname]:
        """The names ``owner``'s objects in ``where`` link or spell."""
        key = (owner, where)
        if key not in self._named_in:
            self._named_in[key] = frozenset(
                n
                for rel in self._siblings.get(key, ())
                for n in (*self.elf.objects[rel].needed, *self.elf.objects[rel].literals)
            )
        return self._named_in[key]

    def _wheel_dir(self, d: str) -> bool:
        """``<site-packages>/nvidia/NAME/lib``: where an nvidia wheel puts its libraries."""
        return any(
            d.startswith(f"{site}/nvidia/") and d.count("/") == site.count("/") + 3
            for site in self.inv.site_packages
        ) and d.endswith("/lib")

    def _gone_from(self, d: str) -> Iterable[tuple[Soname, Seen]]:
        """Libraries the last reading saw in ``d`` that nothing provides now, from a
        distribution no longer installed."""
        for name, seen in sorted(self.remembered.items()):
            if name in self.providers:
                continue
            there = [s for s in seen if posixpath.dirname(s.path) == d]
            if there and there[0].distribution not in self.inv.distributions:
                yield name, there[0]

    def _dir_row(
        self, owner: DistName, by: tuple[DistName, str], d: str, where: str
    ) -> RuntimeLoad:
        return RuntimeLoad(
            framework=owner,
            provider=by[0],
            extra=by[1],
            objects=(),
            source=f"{where}, which names {site_relative(d, self.inv.site_packages)}",
        )

    # --- choosing -----------------------------------------------------------------------

    def _owner(self, rel: EnvPath) -> DistName | None:
        owners = self.inv.owners.get(rel, ())
        if not owners or any(o in self.skip for o in owners):
            return None
        return owners[0]

    def _groups(self, owner: DistName, names: Iterable[Soname]) -> list[list[Soname]]:
        """The names that may be wheel edges, alternatives grouped (first-seen order)."""
        groups: dict[str, list[Soname]] = {}
        for name in self._expanded(names):
            if self._system(name) or self._ships(owner, name):
                continue
            group = groups.setdefault(stem(name), [])
            if name not in group:
                group.append(name)
        return list(groups.values())

    def _expanded(self, names: Iterable[Soname]) -> Iterable[Soname]:
        """Each template (``libcufft.so.*``) as the versions the environment provides or
        provided at the last reading; as itself where it knows none."""
        for name in names:
            if not name.endswith(ANY_VERSION):
                yield name
                continue
            known = self.versions.get(stem(name), [])
            yield from known if known else (name,)

    def _system(self, name: str) -> bool:
        if name in GLIBC or stem(name) in _GLIBC_STEMS or name in self.system:
            return True
        expected = self.elf.expected
        return name not in self.providers and bool(self.config.cache_lookup(name, *expected))

    def _ships(self, owner: DistName, name: str) -> bool:
        """A library the distribution itself ships (in its RECORD, there or not)."""
        if owner not in self._shipped:
            files = self.inv.distributions[owner].files
            self._shipped[owner] = frozenset(e.path.rpartition("/")[2] for e in files)
        return name in self._shipped[owner] or any(
            owner in self.inv.owners.get(p, ()) for p in self.providers.get(name, ())
        )

    def _choose(
        self, owner: DistName, group: list[Soname], where: str
    ) -> list[tuple[Soname, EnvPath | None, RuntimeLoad, bool]]:
        """Per provided name of ``group``: the file, the row saying what brings it, and
        whether a requirement does; with none provided, the first name an unmet
        requirement is named after, or names the distribution that provided it at the last
        reading (no file)."""
        brings = self.wants.brings(owner)
        out: list[tuple[Soname, EnvPath | None, RuntimeLoad, bool]] = []
        for name in group:
            files = self.providers.get(name, [])
            if not files:
                continue
            path = min(files, key=lambda p: (self._bringer(brings, p) is None, p))
            by = self._bringer(brings, path)
            row = self._row(owner, by or (owner, ""), name, where)
            out.append((name, path, row, by is not None))
        if out:
            return out
        if owner not in self._unmet_of:
            self._unmet_of[owner] = UnmetIndex(self._taken(brings))
        unmet_ = self._unmet_of[owner]
        for name in group:
            went = {s.distribution for s in self.remembered.get(name, ())}
            found = unmet_.first(name, went)
            if found is not None:
                dist, extra, _ = found
                return [(name, None, self._row(owner, (dist, extra), name, where), True)]
        return []

    def _taken(self, brings: Brings) -> list[tuple[DistName, str, Requirement]]:
        """The unmet requirements whose distribution is not installed: what a plain uninstall
        took. One installed at another version (a docs extra's ``torch==2.3.1`` beside torch
        2.11) took no file, so no library named after it is missing for that reason."""
        dists = self.inv.distributions
        return [u for u in brings.unmet if normalize_name(u[2].name) not in dists]

    def _bringer(self, brings: Brings, path: EnvPath) -> tuple[DistName, str] | None:
        """What brings the file's distribution (its requirer and the extra), if anything."""
        owners = self.inv.owners.get(path, ())
        return next((brings.installed[o] for o in owners if o in brings.installed), None)

    def _row(self, owner: DistName, by: tuple[DistName, str], name: str, where: str) -> RuntimeLoad:
        return RuntimeLoad(
            framework=owner,
            provider=by[0],
            extra=by[1],
            objects=(),
            source=f'the soname literal "{name}" in {where}',
        )

    def _own_dirs(self, rel: EnvPath, info: ElfInfo) -> frozenset[str]:
        """The object's own RPATH and RUNPATH directories, as EnvPaths."""
        origin = posixpath.dirname(f"{self.prefix}/{rel}")
        dirs = (expand_entry(e, origin, self.config) for e in (*info.rpath, *info.runpath))
        base = self.prefix + "/"
        return frozenset(d[len(base) :] for d in dirs if d is not None and d.startswith(base))

    # --- result -------------------------------------------------------------------------

    def _add(self, bound: list[tuple[str, str, RuntimeLoad]]) -> None:
        """Record the edges of one group: alternatives of each other, per requester."""
        per: dict[str, list[str]] = defaultdict(list)
        for requester, need, row in bound:
            absolute = f"{self.prefix}/{requester}"
            kind = self.paths if need.startswith("/") else self.sonames
            if Soname(need) not in kind[absolute]:
                kind[absolute].append(Soname(need))
            self.rows.setdefault((absolute, need), row)
            per[absolute].append(need)
        for requester, needs in per.items():
            if len(needs) > 1:
                for need in needs:
                    self.alternatives[(requester, need)] = tuple(n for n in needs if n != need)

    def result(self) -> BoundLoads:
        return BoundLoads(
            {k: tuple(v) for k, v in self.sonames.items() if v},
            {k: tuple(v) for k, v in self.paths.items() if v},
            dict(self.rows),
            {},
            dict(self.alternatives),
            frozenset(o for o in self.sonames if o not in self.paths and not o.endswith(".py")),
            frozenset(self.sonames) | frozenset(self.paths),
        )
