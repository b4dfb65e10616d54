"""Loads by a name built at run time, and parts for a stack that is not installed.

Three rules of the loader's graph, each over hand-made facts (no venv):

- a Python source's template (``f"libfoo.so.{v}"``, read as ``libfoo.so.*``) stands for
  every version of the library the environment provides, or provided at the last reading;
- a directory on an object's RUNPATH that none of its DT_NEEDED resolves into is where it
  loads by a built name: the libraries there its own requirements bring are its loads;
- an object none of whose needs another distribution here meets, whatever loads it, is a
  part for a stack that is not installed (information), unless a requirement its
  distribution should bring is named after what it lacks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from cudafix.env.lastseen import Seen
from cudafix.linker.hostdeps import provided_by_system
from cudafix.linker.loader import DlopenTable
from cudafix.model.names import DistName, Soname
from cudafix.model.plan import Options
from cudafix.plan.doctor import diagnose
from cudafix.plan.facts import Facts
from cudafix.plan.literals import bind_literals, dir_named_after
from cudafix.plan.planner import Request, build_plan
from tests.support.facts import PREFIX, Dist, Lib, env, facts

LOADER = "mathlib/_loader.py"
RAND = "nvidia/rand/lib/librand.so.10"
RAND_DIST = Dist("nvidia-rand-cu12", "10.0", {RAND: "rand"})
MATHLIB = Dist("mathlib", "1.0", {LOADER: "py"}, requires=("nvidia-rand-cu12>=10",))
SEEN = {Soname("librand.so.10"): (Seen(env(RAND), DistName("nvidia-rand-cu12"), "10.0"),)}

FW = "fw/libfw.so"
RT = "nvidia/rt/lib/libfwrt.so.12"
OLD = "nvidia/old/lib/libfwold.so.12"
RT_DIST = Dist("nvidia-rt-cu12", "1.0", {RT: "rt"})
OLD_DIST = Dist("nvidia-old-cu12", "1.0", {OLD: "old"})
FW_DIST = Dist(
    "fw",
    "1.0",
    {FW: "fw"},
    requires=('nvidia-rt-cu12>=1; extra == "gpu"', 'nvidia-blas-cu12>=1; extra == "gpu"'),
)
BLAS = "nvidia/blas/lib/libfwblas.so.12"
BLAS_DIST = Dist("nvidia-blas-cu12", "1.0", {BLAS: "blas"})
RUNPATH = ("$ORIGIN/../nvidia/rt/lib", "$ORIGIN/../nvidia/old/lib")


def _abs(path: str) -> str:
    return f"{PREFIX}/{env(path)}"


def _bound(f: Facts, python: Mapping[str, tuple[str, ...]] | None = None) -> Facts:
    """``f`` with its literals and search paths bound, as :func:`cudafix.gather.gather` does
    (with ``f.last_seen`` as the last reading)."""
    sources = {env(p): tuple(Soname(n) for n in v) for p, v in (python or {}).items()}
    loads = bind_literals(
        f.inventory,
        f.elf,
        sources,
        f.marker_env,
        f.search,
        system=provided_by_system(),
        remembered=f.last_seen,
    )
    table = DlopenTable(by_object=loads.sonames, preload=loads.paths)
    return replace(f, runtime=loads, dlopen=table)


def _remove(f: Facts, *names: str):  # type: ignore[no-untyped-def]
    return build_plan(f, Request(tuple(DistName(n) for n in names), names, Options()))


def _errors(f: Facts) -> list[tuple[str, str]]:
    """(consumer, need) of each need nothing provides that doctor calls an error."""
    return sorted(
        (x.consumer or "", x.need or "")
        for x in diagnose(f).findings
        if x.kind == "unresolved" and x.severity == "error"
    )


# --- a name whose version is built --------------------------------------------------------


def test_a_template_stands_for_the_version_the_environment_provides() -> None:
    f = _bound(
        facts([MATHLIB, RAND_DIST], {RAND: Lib("librand.so.10")}), {LOADER: ("librand.so.*",)}
    )
    assert f.runtime.paths == {_abs(LOADER): (_abs(RAND),)}
    assert _errors(f) == []
    plan = _remove(f, "nvidia-rand-cu12")
    assert plan.verdict == "refused"
    assert [(x.consumer, x.run_time_load) for x in plan.lost] == [(env(LOADER), "mathlib")]


def test_a_template_gone_since_the_last_reading_brings_back_the_version_that_went() -> None:
    """A plain uninstall took the library: the template names what the last reading saw,
    and repair installs that version, not the newest its range allows."""
    f = _bound(replace(facts([MATHLIB]), last_seen=SEEN), {LOADER: ("librand.so.*",)})
    assert _errors(f) == [(env(LOADER), "librand.so.10")]
    assert list(diagnose(f).install) == ["nvidia-rand-cu12==10.0"]


def test_a_template_nothing_provides_nor_brings_is_no_load() -> None:
    alone = Dist("mathlib", "1.0", {LOADER: "py"})
    f = _bound(facts([alone]), {LOADER: ("librand.so.*",)})
    assert f.runtime.objects == frozenset()


# --- a directory on the search path, with no DT_NEEDED into it ----------------------------


def _fw(*dists: Dist, needed: tuple[str, ...] = (), last_seen: bool = False) -> Facts:
    libs = {
        FW: Lib(None, needed, runpath=RUNPATH),
        RT: Lib("libfwrt.so.12"),
        OLD: Lib("libfwold.so.12"),
        BLAS: Lib("libfwblas.so.12"),
    }
    f = facts([FW_DIST, BLAS_DIST, *dists], libs)
    if last_seen:
        seen = (Seen(env(RT), DistName("nvidia-rt-cu12"), "1.0"),)
        f = replace(f, last_seen={Soname("libfwrt.so.12"): seen})
    return _bound(f)


def test_a_library_in_a_searched_directory_that_a_requirement_brings_is_a_load() -> None:
    f = _fw(RT_DIST, OLD_DIST)
    assert f.runtime.sonames == {_abs(FW): ("libfwrt.so.12",)}
    row = f.runtime.row(_abs(FW), "libfwrt.so.12")
    assert row is not None and row.requested_as == "fw[gpu]" and "nvidia/rt/lib" in row.source
    plan = _remove(f, "nvidia-rt-cu12")
    assert plan.verdict == "refused"
    assert [(x.consumer, x.need) for x in plan.lost] == [(env(FW), "libfwrt.so.12")]


def test_a_leftover_no_requirement_brings_is_no_load_though_searched() -> None:
    """``nvidia-old-cu12`` lies on fw's RUNPATH, and fw's requirements do not bring it (a
    cu12 leftover beside a cu13 stack): removing it passes."""
    f = _fw(RT_DIST, OLD_DIST)
    assert _remove(f, "nvidia-old-cu12").verdict == "pass"


def test_a_directory_the_objects_dt_needed_reaches_proves_no_other_load() -> None:
    """torch's shape: a DT_NEEDED resolves into the directory; its other files are not
    taken for loads of the object."""
    f = _fw(RT_DIST, OLD_DIST, needed=("libfwrt.so.12",))
    assert f.runtime.objects == frozenset()


def test_a_directory_a_sibling_links_into_proves_no_load_of_the_others() -> None:
    """torch's shape: every object of torch/lib carries the build's one RPATH, naming each
    nvidia wheel's directory; ``libtorch_cuda.so`` links into them, ``libc10.so`` does not.
    Seen on a GPU venv, where a dry run listed every cuDNN library as a load of each."""
    util = "fw/libfw_util.so"
    fw = Dist("fw", "1.0", {FW: "fw", util: "util"}, requires=FW_DIST.requires)
    libs = {
        FW: Lib(None, ("libfwrt.so.12",), runpath=RUNPATH),
        util: Lib(None, (), runpath=RUNPATH),
        RT: Lib("libfwrt.so.12"),
        OLD: Lib("libfwold.so.12"),
        BLAS: Lib("libfwblas.so.12"),
    }
    f = _bound(facts([fw, BLAS_DIST, RT_DIST, OLD_DIST], libs))
    assert f.runtime.objects == frozenset()
    alone = _bound(
        facts([fw, BLAS_DIST, RT_DIST, OLD_DIST], {**libs, FW: Lib(None, (), runpath=RUNPATH)})
    )
    assert alone.runtime.sonames == {_abs(FW): ("libfwrt.so.12",), _abs(util): ("libfwrt.so.12",)}


def test_a_sibling_of_an_object_whose_wheel_went_is_not_broken() -> None:
    """The wheel uninstalled by plain uv: with a reading of it, the object that links it is
    broken; without one, it is a part for a stack not installed (its requirement is what is
    broken). Its sibling that only shares the build's RPATH is neither."""
    rt = "nvidia/fwrt/lib/libfwrt.so.12"
    util = "fw/libfw_util.so"
    fw = Dist("fw", "1.0", {FW: "fw", util: "util"}, requires=("nvidia-fwrt-cu12>=1",))
    runpath = ("$ORIGIN/../nvidia/fwrt/lib",)
    libs = {
        FW: Lib(None, ("libfwrt.so.12",), runpath=runpath),
        util: Lib(None, (), runpath=runpath),
    }
    seen = {Soname("libfwrt.so.12"): (Seen(env(rt), DistName("nvidia-fwrt-cu12"), "1.0"),)}
    for last_seen in (seen, {}):
        f = _bound(replace(facts([fw], libs), last_seen=last_seen))
        assert _errors(f) == ([(env(FW), "libfwrt.so.12")] if last_seen else [])


def test_a_searched_library_gone_since_the_last_reading_is_an_error_repaired_exactly() -> None:
    f = _fw(OLD_DIST, last_seen=True)
    assert _errors(f) == [(env(FW), "libfwrt.so.12")]
    assert list(diagnose(f).install) == ["nvidia-rt-cu12==1.0"]


def test_a_searched_wheel_directory_gone_without_a_memory_is_named_as_the_directory() -> None:
    """No reading saw what was there: the object searches the wheel's directory that an
    unmet requirement of its extra names, so the directory itself is what it loads."""
    f = _fw(OLD_DIST)
    assert _errors(f) == [(env(FW), _abs("nvidia/rt/lib"))]
    assert list(diagnose(f).install) == ["nvidia-rt-cu12>=1"]


def test_a_directory_no_requirement_names_is_no_load() -> None:
    """The leftover's directory, or one the extra does not name: nothing to say."""
    f = _fw(RT_DIST)  # nvidia-old-cu12 is not installed, and no requirement brings it
    assert [n for n in f.runtime.sonames.get(_abs(FW), ())] == ["libfwrt.so.12"]
    assert f.runtime.paths.get(_abs(FW), ()) == ()
    assert not dir_named_after("nvidia-cublas", "lib/python3.12/site-packages/nvidia/cu13/lib")
    assert dir_named_after("nvidia-cuda-runtime-cu12", "x/nvidia/cuda_runtime/lib")
    assert not dir_named_after("nvidia-cuda-nvrtc-cu12", "x/nvidia/cuda_runtime/lib")


def test_the_objects_own_directory_is_not_evidence() -> None:
    """Every wheel puts ``$ORIGIN`` on its libraries' search path for their siblings
    (``nvidia/cu13/lib``): a sibling of another distribution there is no load."""
    lt, fft = "nvidia/cu13/lib/libblasLt.so.13", "nvidia/cu13/lib/libfft.so.12"
    blas = Dist("nvidia-blas", "13.0", {lt: "lt"}, requires=("nvidia-fft",))
    fft_dist = Dist("nvidia-fft", "12.0", {fft: "fft"})
    libs = {lt: Lib("libblasLt.so.13", runpath=("$ORIGIN",)), fft: Lib("libfft.so.12")}
    f = _bound(facts([blas, fft_dist], libs))
    assert f.runtime.objects == frozenset()


# --- a part for a stack that is not installed ----------------------------------------------

EXT = "cp/cutensor.so"


def _cupyish(*dists: Dist, needed: tuple[str, ...], requires: tuple[str, ...] = ()) -> Facts:
    cp = Dist("cp", "1.0", {EXT: "ext"}, requires=requires)
    f = facts([cp, *dists], {EXT: Lib(needed=needed), RAND: Lib("librand.so.10")})
    objects = dict(f.elf.objects)
    objects[env(EXT)] = replace(objects[env(EXT)], python_module="cutensor")
    return _bound(replace(f, elf=replace(f.elf, objects=objects)))


def test_an_imported_module_none_of_whose_needs_is_here_is_optional() -> None:
    """cupy's cuTENSOR module without cuTENSOR: loaded by import, optional all the same."""
    f = _cupyish(needed=("libcutensor.so.2",))
    (finding,) = [x for x in diagnose(f).findings if x.need == "libcutensor.so.2"]
    assert finding.severity == "info"


def test_an_imported_module_whose_requirement_names_what_it_lacks_is_broken() -> None:
    """Its extra is installed (``nvidia-old-cu12`` met) and names ``nvidia-rand-cu12``,
    which a plain uninstall took: the module fails on import."""
    gpu = ('nvidia-rand-cu12>=10; extra == "ctk"', 'nvidia-old-cu12>=1; extra == "ctk"')
    f = _cupyish(OLD_DIST, needed=("librand.so.10",), requires=gpu)
    assert _errors(f) == [(env(EXT), "librand.so.10")]


def test_an_imported_module_partly_provided_is_broken() -> None:
    f = _cupyish(RAND_DIST, needed=("librand.so.10", "libcutensor.so.2"))
    assert _errors(f) == [(env(EXT), "libcutensor.so.2")]
