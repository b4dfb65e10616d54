"""Soname literals: read from gcc-built objects and Python sources, bound as run-time loads.

A framework with no row in ``cudafix/data/runtime.toml`` that loads its libraries by name
(``dlopen("libfoo.so.1")`` in its code, ``"libfoo.so.1"`` in its Python) is still protected:
the literal, where the environment provides that library or a requirement brings it, is an
edge the planner and doctor judge like a row's.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from cudafix.env.inventory import FileStat
from cudafix.env.memo.index import FactIndex
from cudafix.env.pysources import python_literals, source_literals
from cudafix.fetch.staged import Staging
from cudafix.linker.elf import ElfInfo, read_elf
from cudafix.linker.elfindex import index_environment
from cudafix.linker.hostdeps import provided_by_system
from cudafix.linker.hostview import HostView
from cudafix.linker.literals import soname_literals
from cudafix.linker.loader import DlopenTable
from cudafix.model.names import DistName, EnvPath, Soname
from cudafix.model.plan import Options
from cudafix.model.reasons import MissingFiles
from cudafix.plan.doctor import diagnose
from cudafix.plan.facts import Facts
from cudafix.plan.literals import bind_literals, named_after, stem
from cudafix.plan.planner import Request, build_plan
from scenarios.cc import SharedObject, compile_shared
from tests.support.facts import PREFIX, Dist, Lib, env, facts, wheel_of
from tests.support.loadertree import backdate

PLUGIN = "fw/_versions.so"
FOO = "nvidia/foo/lib/libfoo.so.1"
FOO2 = "nvidia/foo/lib/libfoo.so.2"
BAR = "nvidia/bar/lib/libbar.so.1"
GPU = ('nvidia-foo-cu12>=1; extra == "gpu"', 'nvidia-bar-cu12>=1; extra == "gpu"')


def _fw(*requires: str, literals: tuple[str, ...] = ("libfoo.so.1",)) -> tuple[Dist, Lib]:
    dist = Dist("fw", "1.0", {"fw/__init__.py": "fw", PLUGIN: "plugin"}, requires=requires)
    lib = Lib("_versions.so", runpath=("$ORIGIN/../nvidia/foo/lib",), literals=literals)
    return dist, lib


FOO_DIST = Dist("nvidia-foo-cu12", "1.0", {FOO: "foo"})
BAR_DIST = Dist("nvidia-bar-cu12", "1.0", {BAR: "bar"})


def _bound(f: Facts, python: Mapping[str, tuple[str, ...]] | None = None) -> Facts:
    """``f`` with its literals bound, as :func:`cudafix.gather.gather` binds them."""
    sources = {env(p): tuple(Soname(n) for n in v) for p, v in (python or {}).items()}
    loads = bind_literals(
        f.inventory, f.elf, sources, f.marker_env, f.search, system=provided_by_system()
    )
    table = DlopenTable(by_object=loads.sonames, preload=loads.paths)
    return replace(f, runtime=loads, dlopen=table)


def _remove(f: Facts, *names: str):  # type: ignore[no-untyped-def]
    return build_plan(f, Request(tuple(DistName(n) for n in names), names, Options()))


def _abs(path: str) -> str:
    return f"{PREFIX}/{env(path)}"


# --- reading ------------------------------------------------------------------------------


def test_a_gcc_built_objects_dlopen_names_are_its_literals(tmp_path: Path) -> None:
    source = (
        'void *load(void) { return dlopen("libfoo.so.1", RTLD_NOW); }\n'
        'const char *why(void) { return "cannot load libcufft.so.12 or libcufft.so.11"; }\n'
        'const char *not_names(void) { return "/usr/lib/libc.so.6 xlibz.so.1 libq.so.1x"; }\n'
    )
    built = compile_shared(SharedObject(output=tmp_path / "libloader.so", source=source))
    info = read_elf(built, literals=True)
    assert isinstance(info, ElfInfo)
    assert info.literals == ("libfoo.so.1", "libcufft.so.12", "libcufft.so.11")
    plain = read_elf(built)
    assert isinstance(plain, ElfInfo) and plain.literals == ()  # the host's objects: not read


def test_the_elf_index_caches_the_literals_with_the_rest(tmp_path: Path) -> None:
    prefix = tmp_path / "venv"
    source = 'void *load(void) { return dlopen("libfoo.so.1", RTLD_NOW); }\n'
    compile_shared(SharedObject(output=prefix / "lib/libloader.so", source=source))
    st = os.lstat(backdate(prefix / "lib") / "libloader.so")
    files = {
        EnvPath("lib/libloader.so"): FileStat(
            "file", st.st_size, st.st_mode, st.st_dev, st.st_ino, st.st_mtime_ns
        )
    }
    arch = HostView(None).arch()
    with FactIndex.open(prefix) as index:
        cold = index_environment(prefix, files, index, expected=arch)
    with FactIndex.open(prefix) as index:
        warm = index_environment(prefix, files, index, expected=arch)
    assert (cold.parsed, warm.parsed) == (1, 0)
    assert warm.objects[EnvPath("lib/libloader.so")].literals == ("libfoo.so.1",)


def test_soname_literals_are_whole_words() -> None:
    data = b"\0libcudnn.so.9\0Could not load libnvrtc.so.12: %s\0/opt/libx.so.1\0mylibz.so\0"
    assert soname_literals(data) == ["libcudnn.so.9", "libnvrtc.so.12"]


def test_python_sources_give_their_quoted_library_names() -> None:
    text = b"""
import ctypes
# loads libcomment.so.1 here
ctypes.CDLL(os.path.join(lib, "libcurand.so.10"))
_CANDIDATES = ('libcufft.so.12', 'libcufft.so.11')
name = f"libcublas.so.{major}"
msg = "cannot find libnvrtc.so.12 anywhere"
"""
    assert source_literals(text) == (
        "libcurand.so.10",
        "libcufft.so.12",
        "libcufft.so.11",
        "libcublas.so.*",
    )


def test_python_sources_are_read_once_per_content(tmp_path: Path) -> None:
    """The index answers by stat: same stat, the old answer; a new mtime, the file again
    (for a file that settled before it was read: one changed within the racy window is read
    again next time, as the first ``scan`` here would be)."""
    path = "pkg/__init__.py"
    real = tmp_path / env(path)
    real.parent.mkdir(parents=True)
    real.write_text('LIB = "libaaa.so.1"\n')
    backdate(real.parent)
    inv = facts([Dist("pkg", "1.0", {path: "x"})]).inventory

    def scan() -> tuple[Soname, ...]:
        st = os.lstat(real)
        stat = FileStat("file", st.st_size, st.st_mode, st.st_dev, st.st_ino, st.st_mtime_ns)
        with FactIndex.open(tmp_path) as index:
            found = python_literals(tmp_path, replace(inv, files={env(path): stat}), index)
        return found.get(env(path), ())

    assert scan() == ("libaaa.so.1",)
    mtime = os.lstat(real).st_mtime_ns
    real.write_text('LIB = "libbbb.so.1"\n')  # same size, same inode
    os.utime(real, ns=(mtime, mtime))
    assert scan() == ("libaaa.so.1",)  # unchanged stat: not opened again
    os.utime(real, ns=(mtime + 10**9, mtime + 10**9))
    assert scan() == ("libbbb.so.1",)
    real.write_text('LIB = "libccc.so.1"\n')  # just now: read, and not kept
    mtime = os.lstat(real).st_mtime_ns
    assert scan() == ("libccc.so.1",)
    real.write_text('LIB = "libddd.so.1"\n')  # the same tick, the same size
    os.utime(real, ns=(mtime, mtime))
    assert scan() == ("libddd.so.1",)


def test_names_that_name_a_library() -> None:
    assert stem("libcufft.so.11") == stem("libcufft.so.12") == "libcufft.so"
    assert named_after("nvidia-cudnn-cu12", "libcudnn.so.9")
    assert named_after("nvidia-cuda-runtime-cu12", "libcudart.so.12")
    assert named_after("nvidia-cublas", "libcublasLt.so.13")
    assert named_after("nvidia-nvshmem-cu13", "libnvshmem_host.so.3")
    assert not named_after("nvidia-cufft-cu12", "libcudnn.so.9")
    assert not named_after("nvidia-cuda-cupti-cu12", "libcudnn.so.9")
    assert not named_after("nvidia-cuda-nvrtc", "libcudart.so.12")  # "cuda" alone names none
    assert not named_after("cuda-toolkit", "libcudart.so.13")
    assert not named_after("nvidia-cuda-runtime-cu12", "libcuda.so")  # the driver's
    assert not named_after("libarchive-c", "libc.so")  # a one-letter word names nothing
    assert named_after("tbb", "libtbb.so.12")  # all of the name


# --- binding ------------------------------------------------------------------------------


def test_an_objects_literal_on_its_search_path_is_a_run_time_load() -> None:
    dist, lib = _fw(*GPU, literals=("libfoo.so.1", "libc.so.6", "libcuda.so.1", "libbar.so.1"))
    libs = {PLUGIN: lib, FOO: Lib("libfoo.so.1"), BAR: Lib("libbar.so.1")}
    f = _bound(facts([dist, FOO_DIST, BAR_DIST], libs))
    assert f.runtime.sonames == {_abs(PLUGIN): ("libfoo.so.1",)}
    # libbar is off the plugin's search path but its extra brings it: loaded by path
    assert f.runtime.paths == {_abs(PLUGIN): (_abs(BAR),)}
    row = f.runtime.row(_abs(PLUGIN), "libfoo.so.1")
    assert row is not None and row.requested_as == "fw[gpu]"


def test_a_file_that_is_no_elf_object_provides_nothing() -> None:
    """A path named like the library that the index holds no ELF object for (and no unmet
    requirement named after it): no edge."""
    dist, lib = _fw(*GPU, literals=("libbar.so.1",))
    f = _bound(facts([dist, FOO_DIST, BAR_DIST], {PLUGIN: lib}))
    assert f.runtime.objects == frozenset()


def test_removing_what_a_literal_names_is_refused_naming_the_object() -> None:
    dist, lib = _fw(*GPU)
    f = _bound(facts([dist, FOO_DIST, BAR_DIST], {PLUGIN: lib, FOO: Lib("libfoo.so.1")}))
    plan = _remove(f, "nvidia-foo-cu12")
    assert plan.verdict == "refused"
    assert [(x.consumer, x.need, x.run_time_load) for x in plan.lost] == [
        (env(PLUGIN), "libfoo.so.1", "fw[gpu]")
    ]


def test_a_plain_uninstall_is_an_error_and_repair_installs_the_extras_requirement() -> None:
    """Nothing provides libfoo.so.1 any more; the unmet requirement of an installed extra
    is named after it: the load is broken, and installing that requirement fixes it."""
    dist, lib = _fw(*GPU)
    f = _bound(facts([dist, BAR_DIST], {PLUGIN: lib}))
    report = diagnose(f)
    (finding,) = [x for x in report.findings if x.need == "libfoo.so.1"]
    assert (finding.severity, finding.consumer) == ("error", env(PLUGIN))
    assert finding.owners == ["fw"]
    assert list(report.install) == ["nvidia-foo-cu12>=1"]


def test_a_requirement_met_at_another_version_took_no_library() -> None:
    """The extra's ``nvidia-foo-cu12>=2`` is unmet, but nvidia-foo-cu12 1.0 is installed: no
    uninstall took a file, so ``libfoo.so.1``, which nothing provides, is no broken load."""
    dist, lib = _fw('nvidia-foo-cu12>=2; extra == "gpu"', 'nvidia-bar-cu12>=1; extra == "gpu"')
    old_foo = Dist("nvidia-foo-cu12", "1.0", {"nvidia/foo/README": "foo"})
    f = _bound(facts([dist, old_foo, BAR_DIST], {PLUGIN: lib}))
    assert f.runtime.objects == frozenset()
    assert not [x for x in diagnose(f).findings if x.need == "libfoo.so.1"]


def test_a_literal_nothing_provides_nor_brings_is_not_an_edge() -> None:
    """No requirement of an installed extra is named after it: a system CUDA, or noise."""
    dist, lib = _fw('nvidia-foo-cu12>=1; extra == "gpu"')  # the extra: none of it installed
    f = _bound(facts([dist], {PLUGIN: lib}))
    assert f.runtime.objects == frozenset()
    assert not [x for x in diagnose(f).findings if x.severity != "info"]


def test_the_c_library_and_one_letter_words_bind_to_no_requirement() -> None:
    """``"libc.so"`` (glibc's development link) in a source is the C library; an unmet
    requirement of an installed extra whose name ends in a one-letter word (``libarchive-c``)
    names no library: neither is a load nothing provides."""
    dist, lib = _fw(*GPU, 'libarchive-c; extra == "gpu"', literals=("libc.so", "libm.so"))
    f = _bound(facts([dist, FOO_DIST], {PLUGIN: lib, FOO: Lib("libfoo.so.1")}))
    assert f.runtime.sonames == {_abs(PLUGIN): ("libfoo.so.1",)}  # its RUNPATH's library
    assert not [x for x in diagnose(f).findings if x.severity != "info"]


def test_alternatives_one_provided_satisfies_the_load() -> None:
    dist, lib = _fw(
        'nvidia-foo-cu12>=1; extra == "gpu"',
        'nvidia-foo-cu13>=1; extra == "gpu13"',
        literals=("libfoo.so.2", "libfoo.so.1"),
    )
    foo13 = Dist("nvidia-foo-cu13", "1.0", {FOO2: "foo2"})
    libs = {PLUGIN: lib, FOO: Lib("libfoo.so.1"), FOO2: Lib("libfoo.so.2")}
    f = _bound(facts([dist, FOO_DIST, foo13], libs))
    assert f.runtime.sonames == {_abs(PLUGIN): ("libfoo.so.2", "libfoo.so.1")}
    one = _remove(f, "nvidia-foo-cu13")
    assert [x.need for x in one.lost] == []
    both = _remove(f, "nvidia-foo-cu13", "nvidia-foo-cu12")
    assert sorted(x.need for x in both.lost) == ["libfoo.so.1", "libfoo.so.2"]


def test_a_literal_the_object_links_is_no_run_time_load() -> None:
    """A name its DT_NEEDED holds too is an edge already, judged as a link, not a load."""
    dist, _ = _fw(*GPU)
    lib = Lib(
        None, ("libfoo.so.1",), runpath=("$ORIGIN/../nvidia/foo/lib",), literals=("libfoo.so.1",)
    )
    f = _bound(facts([dist, FOO_DIST, BAR_DIST], {PLUGIN: lib, FOO: Lib("libfoo.so.1")}))
    assert f.runtime.objects == frozenset()


def test_a_library_the_distribution_ships_itself_is_its_own_business() -> None:
    own = Dist("fw", "1.0", {PLUGIN: "plugin", FOO: "foo"})
    _, lib = _fw()
    f = _bound(facts([own], {PLUGIN: lib, FOO: Lib("libfoo.so.1")}))
    assert f.runtime.objects == frozenset()


PY = "cupyish/__init__.py"
EXT = "cupyish/_rand.so"
RAND = "nvidia/rand/lib/librand.so.10"
RAND_DIST = Dist("nvidia-rand-cu12", "10.0", {RAND: "rand"})


def test_a_python_literal_preloads_the_file_for_the_object_that_needs_it() -> None:
    """CuPy's pattern: the module loads the wheel's file by path, then imports the extension
    whose DT_NEEDED names it (no RPATH reaches it)."""
    cupyish = Dist(
        "cupyish",
        "1.0",
        {PY: "py", EXT: "ext"},
        requires=('nvidia-rand-cu12==10.0; extra == "ctk"',),
    )
    libs = {EXT: Lib(None, ("librand.so.10",)), RAND: Lib("librand.so.10")}
    f = _bound(facts([cupyish, RAND_DIST], libs), {PY: ("librand.so.10",)})
    assert f.runtime.paths == {_abs(EXT): (_abs(RAND),)}
    row = f.runtime.row(_abs(EXT), _abs(RAND))
    assert row is not None and row.requested_as == "cupyish[ctk]" and PY in row.source
    assert not [x for x in diagnose(f).findings if x.severity != "info"]
    plan = _remove(f, "nvidia-rand-cu12")
    assert (env(EXT), env(RAND)) in [(x.consumer, x.need) for x in plan.lost]


def test_a_python_module_that_loads_by_itself_is_the_loader() -> None:
    only_python = Dist(
        "mathlib", "1.0", {"mathlib/_loader.py": "py"}, requires=("nvidia-rand-cu12>=10",)
    )
    f = _bound(
        facts([only_python, RAND_DIST], {RAND: Lib("librand.so.10")}),
        {"mathlib/_loader.py": ("librand.so.10",)},
    )
    assert f.runtime.paths == {_abs("mathlib/_loader.py"): (_abs(RAND),)}
    assert not [x for x in diagnose(f).findings if x.severity != "info"]
    plan = _remove(f, "nvidia-rand-cu12")
    assert [(x.consumer, x.run_time_load) for x in plan.lost] == [
        (env("mathlib/_loader.py"), "mathlib")
    ]


def test_a_python_literal_no_requirement_brings_is_no_proof() -> None:
    """A name in Python code (a loader library's catalogue of every CUDA library) counts
    only where a requirement of its distribution brings the library."""
    catalogue = Dist("pathfinder", "1.0", {"pathfinder/catalog.py": "py"})
    f = _bound(
        facts([catalogue, RAND_DIST], {RAND: Lib("librand.so.10")}),
        {"pathfinder/catalog.py": ("librand.so.10",)},
    )
    assert f.runtime.objects == frozenset()
    assert _remove(f, "nvidia-rand-cu12").verdict == "pass"


def test_a_reinstall_under_a_python_loader_probes_its_loads_not_the_module() -> None:
    """A reinstall rewrites the file a Python module loads: the plan probes that run-time
    load (the file by path), and never hands the ``.py`` to ``dlopen``."""
    only_python = Dist(
        "mathlib", "1.0", {"mathlib/_loader.py": "py"}, requires=("nvidia-rand-cu12>=10",)
    )
    pin = (DistName("nvidia-rand-cu12"), "10.0")
    staged = Staging(fetched=True, wheels={pin: wheel_of(RAND_DIST)}, source="find-links W")
    f = _bound(
        facts([only_python, RAND_DIST], {RAND: Lib("librand.so.10")}, staging=staged),
        {"mathlib/_loader.py": ("librand.so.10",)},
    )
    why = MissingFiles(subject="nvidia-rand-cu12", count=1)
    plan = build_plan(f, Request((), (), Options(), reinstall={DistName("nvidia-rand-cu12"): why}))
    assert plan.verdict == "pass", plan.reasons
    assert not [p for p in plan.probe_libraries if p.endswith(".py")]
    assert [(p.object, p.need) for p in plan.probe_run_time] == [
        (env("mathlib/_loader.py"), env(RAND))
    ]


def test_an_extra_whose_met_wheels_a_requested_extra_explains_is_not_installed() -> None:
    """``cuda-toolkit[all]`` lists every wheel of ``[nvrtc]``: a venv that asked for
    ``[nvrtc]`` holds a met requirement of ``[all]``, which is no sign ``[all]`` was asked
    for, so the catalogue's names of ``[all]``'s other libraries are not loads (cuda-python's
    pristine install: cuda-pathfinder's catalogue spells every CUDA library)."""
    toolkit = Dist(
        "toolkit",
        "1.0",
        {"toolkit/__init__.py": "py"},
        requires=(
            'nvidia-rand-cu12>=10; extra == "rand"',
            'nvidia-rand-cu12>=10; extra == "all"',
            'nvidia-foo-cu12>=1; extra == "all"',
        ),
    )
    bindings = Dist("bindings", "1.0", {"bindings/_loader.py": "py"}, requires=("toolkit[rand]",))
    f = _bound(
        facts([toolkit, bindings, RAND_DIST], {RAND: Lib("librand.so.10")}),
        {"bindings/_loader.py": ("librand.so.10", "libfoo.so.1")},
    )
    assert not [x for x in diagnose(f).findings if x.severity != "info"]
    assert f.runtime.paths == {_abs("bindings/_loader.py"): (_abs(RAND),)}


def test_an_extra_partly_uninstalled_keeps_its_remaining_wheels_wanted() -> None:
    """The other side: once a wheel of ``[gpu]`` is gone, what is left of it (met by no base
    requirement nor requested extra) still says ``[gpu]`` was asked for."""
    dist, lib = _fw(*GPU)
    f = _bound(facts([dist, BAR_DIST], {PLUGIN: lib}))
    assert [x.need for x in diagnose(f).findings if x.severity == "error"] == ["libfoo.so.1"]


# --- on-demand providers: onnxruntime's shape --------------------------------------------

CUDA_EP, TRT_EP = "ort/capi/libprov_cuda.so", "ort/capi/libprov_trt.so"


def _ort(*dists: Dist) -> Facts:
    """``ort`` preloads what its extra brings by full path (a literal in its Python code
    names ``libbar.so.1``), then dlopen()s a provider with no search path of its own: the
    CUDA one needs ``libfoo``/``libbar``; the TensorRT one ``libfoo`` and ``libinfer``, a
    stack no requirement brings."""
    ort = Dist(
        "ort",
        "1.0",
        {"ort/__init__.py": "py", CUDA_EP: "cuda", TRT_EP: "trt"},
        requires=GPU,
    )
    libs = {
        CUDA_EP: Lib(needed=("libfoo.so.1", "libbar.so.1")),
        TRT_EP: Lib(needed=("libfoo.so.1", "libbar.so.1", "libinfer.so.10")),
        FOO: Lib("libfoo.so.1"),
        BAR: Lib("libbar.so.1"),
    }
    return _bound(facts([ort, *dists], libs), {"ort/__init__.py": ("libbar.so.1",)})


def test_a_provider_a_literal_preloads_for_is_judged_as_loaded_on_demand() -> None:
    """Its needs the venv meets by path are met (a literal makes it no chain's start), and
    a stack no requirement brings (TensorRT) is an optional feature: pristine is healthy."""
    f = _ort(FOO_DIST, BAR_DIST)
    assert _abs(CUDA_EP) in f.runtime.paths
    assert not [(x.consumer, x.need) for x in diagnose(f).findings if x.severity != "info"]
    plan = _remove(f, "nvidia-foo-cu12")
    assert plan.verdict == "refused"
    assert (env(CUDA_EP), "libfoo.so.1") in {(x.consumer, x.need) for x in plan.lost}


def test_a_providers_library_a_plain_uninstall_took_is_an_error_the_absent_stack_is_not() -> None:
    errors = {
        (x.consumer, x.need) for x in diagnose(_ort(BAR_DIST)).findings if x.severity == "error"
    }
    assert (env(CUDA_EP), "libfoo.so.1") in errors
    assert (env(TRT_EP), "libinfer.so.10") not in errors


def test_an_extension_module_with_no_search_path_meets_its_needs_by_path() -> None:
    """CuPy imports ``cupy.cuda.cufft`` (no RPATH, no RUNPATH) after loading the wheel's
    ``libcufft`` by full path, through a loader no literal shows: healthy, and removing the
    wheel is refused naming the extension module."""
    ext = "cp/cufft.so"
    cp = Dist("cp", "1.0", {ext: "ext"}, requires=('nvidia-foo-cu12>=1; extra == "ctk"',))
    f = facts([cp, FOO_DIST], {ext: Lib(needed=("libfoo.so.1",)), FOO: Lib("libfoo.so.1")})
    objects = dict(f.elf.objects)
    objects[env(ext)] = replace(objects[env(ext)], python_module="cufft")
    f = _bound(replace(f, elf=replace(f.elf, objects=objects)))
    assert not [x for x in diagnose(f).findings if x.severity != "info"]
    assert [x.consumer for x in _remove(f, "nvidia-foo-cu12").lost] == [env(ext)]


def test_a_repair_probes_what_a_by_name_loader_finds_not_what_cannot_load() -> None:
    """A plain uninstall took ``librand`` from a catalogue's loads; the repair installs it
    back where only an object loaded by path before it finds it (``libuser``'s RUNPATH).
    The probe loads that file by path (as cuda-pathfinder finds it), never the bare name a
    fresh interpreter cannot find; and not ``libmp``, a library the catalogue also loads
    whose own need (NCCL's, which no requirement brings) the state leaves unmet."""
    mp, user = "nvidia/foo/lib/libmp.so.2", "nvidia/rand/lib/libuser.so.1"
    loader = Dist(
        "mathlib",
        "1.0",
        {"mathlib/_loader.py": "py"},
        requires=("nvidia-rand-cu12>=10", "nvidia-foo-cu12"),
    )
    foo = Dist("nvidia-foo-cu12", "1.0", {mp: "mp", user: "user"})
    rand_elf = ElfInfo(64, "EM_X86_64", Soname("librand.so.10"), (), (), ())
    rand_wheel = replace(wheel_of(RAND_DIST), elf={env(RAND): rand_elf})
    staged = Staging(
        fetched=True,
        wheels={(DistName("nvidia-rand-cu12"), "10.0"): rand_wheel},
        source="find-links W",
    )
    libs = {
        user: Lib("libuser.so.1", needed=("librand.so.10",), runpath=("$ORIGIN",)),
        mp: Lib("libmp.so.2", needed=("libnccl.so.2",)),
    }
    f = _bound(
        facts([loader, foo], libs, staging=staged),
        {"mathlib/_loader.py": ("libuser.so.1", "librand.so.10", "libmp.so.2")},
    )
    pin = (DistName("nvidia-rand-cu12"), "10.0")
    plan = build_plan(f, Request((), (), Options(), installs=(pin,)))
    assert plan.verdict == "pass", plan.reasons
    assert sorted((p.object, p.need) for p in plan.probe_run_time) == [
        (env("mathlib/_loader.py"), env(RAND)),
        (env("mathlib/_loader.py"), env(user)),
    ]
