"""The resolver against the real loader: every case is built with gcc and checked with ldd."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from cudafix.linker.hostview import HostView
from cudafix.linker.loader import DlopenTable, Lookup, SearchConfig, expand_entry, resolve
from cudafix.linker.runtime import BoundLoads, RuntimeTable, bind
from cudafix.model.names import DistName, EnvPath, Soname
from scenarios.cc import CompileError, SharedObject, compile_shared
from tests.support.loadertree import cudafix_tree, ldd, lib, loaded_maps, parse_ldd, real, view_of


@dataclass(frozen=True)
class Case:
    root: Path
    llp: tuple[str, ...] = ()
    expect: dict[str, str] | None = None
    """need -> "how" cudafix must report (besides agreeing with ldd)."""


def _origin_rpath(tmp: Path) -> Case:
    a = lib(tmp / "a" / "liba.so.1")
    return Case(
        lib(tmp / "root.so", needed=[a], rpath=["$ORIGIN/a"]), expect={"liba.so.1": "rpath"}
    )


def _braced_runpath(tmp: Path) -> Case:
    b = lib(tmp / "b" / "libb.so.1")
    root = lib(tmp / "root.so", needed=[b], rpath=["${ORIGIN}/b"], runpath=True)
    return Case(root, expect={"libb.so.1": "runpath"})


def _inherited_rpath(tmp: Path) -> Case:
    leaf = lib(tmp / "deps" / "libleaf.so.1")
    mid = lib(tmp / "deps" / "libmid.so.1", needed=[leaf])  # no rpath of its own
    root = lib(tmp / "root.so", needed=[mid], rpath=["$ORIGIN/deps"])
    return Case(root, expect={"libmid.so.1": "rpath", "libleaf.so.1": "rpath"})


def _runpath_not_inherited(tmp: Path) -> Case:
    leaf = lib(tmp / "deps" / "libleaf.so.1")
    mid = lib(tmp / "deps" / "libmid.so.1", needed=[leaf])
    root = lib(tmp / "root.so", needed=[mid], rpath=["$ORIGIN/deps"], runpath=True)
    return Case(root, expect={"libmid.so.1": "runpath", "libleaf.so.1": "not-found"})


def _rpath_chain_skipped_under_runpath(tmp: Path) -> Case:
    leaf = lib(tmp / "deps" / "libleaf.so.1")
    mid = lib(tmp / "deps" / "libmid.so.1", needed=[leaf], rpath=["/nonexistent"], runpath=True)
    root = lib(tmp / "root.so", needed=[mid], rpath=["$ORIGIN/deps"])
    return Case(root, expect={"libmid.so.1": "rpath", "libleaf.so.1": "not-found"})


def _shadowing(tmp: Path) -> Case:
    first = lib(tmp / "first" / "libx.so.1")
    lib(tmp / "second" / "libx.so.1")
    root = lib(tmp / "root.so", needed=[first], rpath=["$ORIGIN/second", "$ORIGIN/first"])
    return Case(root, expect={"libx.so.1": "rpath"})


def _already_loaded(tmp: Path) -> Case:
    a = lib(tmp / "a" / "liba.so.1")
    lib(tmp / "c" / "liba.so.1")
    b = lib(tmp / "b" / "libb.so.1", needed=[a], rpath=["$ORIGIN/../c"], runpath=True)
    root = lib(tmp / "root.so", needed=[a, b], rpath=["$ORIGIN/a:$ORIGIN/b"])
    return Case(root, expect={"libb.so.1": "rpath"})


def _triple(tmp: Path) -> Path:
    for d in ("r", "l", "u"):
        lib(tmp / d / "libx.so.1")
    return tmp / "r" / "libx.so.1"


def _rpath_beats_llp(tmp: Path) -> Case:
    x = _triple(tmp)
    root = lib(tmp / "root.so", needed=[x], rpath=["$ORIGIN/r"])
    return Case(root, llp=(str(tmp / "l"),), expect={"libx.so.1": "rpath"})


def _llp_beats_runpath(tmp: Path) -> Case:
    x = _triple(tmp)
    root = lib(tmp / "root.so", needed=[x], rpath=["$ORIGIN/u"], runpath=True)
    return Case(root, llp=(str(tmp / "l"),), expect={"libx.so.1": "ld_library_path"})


def _runpath_without_llp(tmp: Path) -> Case:
    x = _triple(tmp)
    root = lib(tmp / "root.so", needed=[x], rpath=["$ORIGIN/u"], runpath=True)
    return Case(root, expect={"libx.so.1": "runpath"})


def _wrong_class_skipped(tmp: Path) -> Case:
    good = lib(tmp / "b" / "libx.so.1")
    src = tmp / "x32.c"
    src.write_text("int f(void) { return 1; }\n")
    (tmp / "a").mkdir()
    obj = SharedObject(
        tmp / "a" / "libx.so.1",
        soname="libx.so.1",
        extra_flags=["-m32", "-nostdlib"],
    )
    try:
        compile_shared(obj)
    except CompileError:
        _patched_machine(good, tmp / "a" / "libx.so.1")
    root = lib(tmp / "root.so", needed=[good], rpath=["$ORIGIN/a:$ORIGIN/b"])
    return Case(root, expect={"libx.so.1": "rpath"})


def _patched_machine(good: Path, out: Path) -> None:
    data = bytearray(good.read_bytes())
    data[18:20] = (183).to_bytes(2, "little")  # EM_AARCH64
    out.write_bytes(bytes(data))


def _wrong_machine_skipped(tmp: Path) -> Case:
    good = lib(tmp / "b" / "libx.so.1")
    (tmp / "a").mkdir()
    _patched_machine(good, tmp / "a" / "libx.so.1")
    root = lib(tmp / "root.so", needed=[good], rpath=["$ORIGIN/a", "$ORIGIN/b"])
    return Case(root, expect={"libx.so.1": "rpath"})


def _missing(tmp: Path) -> Case:
    gone = lib(tmp / "a" / "libgone.so.1")
    root = lib(tmp / "root.so", needed=[gone], rpath=["$ORIGIN/a"])
    gone.unlink()
    return Case(root, expect={"libgone.so.1": "not-found"})


def _system_via_cache(tmp: Path) -> Case:
    root = lib(tmp / "root.so", needed=["m"])
    return Case(root, expect={"libm.so.6": "ld.so.cache", "libc.so.6": "ld.so.cache"})


def _symlinked_soname(tmp: Path) -> Case:
    real_file = lib(tmp / "a" / "libv.so.1.2.3", soname="libv.so.1")
    (tmp / "a" / "libv.so.1").symlink_to("libv.so.1.2.3")
    root = lib(tmp / "root.so", needed=[real_file], rpath=["$ORIGIN/a"])
    return Case(root, expect={"libv.so.1": "rpath"})


CASES: dict[str, Callable[[Path], Case]] = {
    "origin-rpath": _origin_rpath,
    "braced-origin-runpath": _braced_runpath,
    "inherited-rpath": _inherited_rpath,
    "runpath-not-inherited": _runpath_not_inherited,
    "rpath-chain-skipped-under-runpath": _rpath_chain_skipped_under_runpath,
    "shadowing-by-order": _shadowing,
    "already-loaded": _already_loaded,
    "rpath-beats-ld-library-path": _rpath_beats_llp,
    "ld-library-path-beats-runpath": _llp_beats_runpath,
    "runpath-without-llp": _runpath_without_llp,
    "wrong-class-skipped": _wrong_class_skipped,
    "wrong-machine-skipped": _wrong_machine_skipped,
    "missing": _missing,
    "system-via-cache": _system_via_cache,
    "symlinked-soname": _symlinked_soname,
}


@pytest.mark.parametrize("name", list(CASES))
def test_resolver_agrees_with_ldd(name: str, tmp_path: Path) -> None:
    case = CASES[name](tmp_path)
    proc = ldd(case.root, case.llp)
    assert proc.returncode == 0, proc.stderr
    oracle = parse_ldd(proc.stdout)
    tree = cudafix_tree(case.root, case.llp)
    ours: dict[str, Lookup] = {}
    for step in tree.steps:
        ours.setdefault(step.need, step)  # ldd names an object by its first need
    for need, where in oracle.items():
        if need.startswith("/"):
            continue
        assert need in ours, f"ldd loaded {need}, cudafix never needed it"
        assert real(ours[need].provider) == real(where), (need, ours[need])
    resolved = {real(s.provider) for s in tree.steps if s.provider}
    assert resolved >= {real(p) for p in oracle.values() if p}
    for need, how in (case.expect or {}).items():
        assert ours[need].how == how, ours[need]


def _bad_first_candidate(tmp: Path, content: bytes) -> Path:
    good = lib(tmp / "b" / "libx.so.1")
    (tmp / "a").mkdir()
    (tmp / "a" / "libx.so.1").write_bytes(content)
    return lib(tmp / "root.so", needed=[good], rpath=["$ORIGIN/a:$ORIGIN/b"])


SCRIPT = (
    b"/* GNU ld script */\nOUTPUT_FORMAT(elf64-x86-64)\nGROUP ( /lib/x86_64-linux-gnu/libx.so.1 )\n"
)


@pytest.mark.parametrize("kind", ["linker-script", "truncated"])
def test_unusable_candidate_stops_the_search_like_ld_so(kind: str, tmp_path: Path) -> None:
    helper = lib(tmp_path / "helper.so")
    content = SCRIPT if kind == "linker-script" else helper.read_bytes()[:3000]
    root = _bad_first_candidate(tmp_path, content)
    proc = ldd(root)
    assert proc.returncode != 0  # ld.so refuses rather than trying ../b
    step = next(s for s in cudafix_tree(root).steps if s.need == "libx.so.1")
    assert (step.provider, step.how) == (None, "invalid")
    assert step.error is not None and str(tmp_path / "a" / "libx.so.1") in step.error
    if kind == "linker-script":
        said = proc.stdout + proc.stderr
        assert "invalid ELF header" in said and "a/libx.so.1" in said


def test_dlopen_table_edges_match_a_real_load(tmp_path: Path) -> None:
    part = lib(tmp_path / "lib" / "libfoo_part.so.1")
    dep = lib(tmp_path / "lib" / "libfoo_dep.so.1")
    part = lib(tmp_path / "lib" / "libfoo_part.so.1", needed=[dep], rpath=["$ORIGIN"])
    root = lib(tmp_path / "libfoo.so.1", rpath=["$ORIGIN/lib"], dlopen=["libfoo_part.so.1"])
    tree = cudafix_tree(root, table={"libfoo.so.1": ["libfoo_part.so.1"]})
    step = next(s for s in tree.steps if s.need == "libfoo_part.so.1")
    assert (step.how, step.provider) == ("dlopen", str(part))
    in_tmp = {p for p in tree.objects if p.startswith(str(tmp_path))}
    assert in_tmp == loaded_maps(root) == {str(root), str(part), str(dep)}
    without = cudafix_tree(root)
    assert all(s.need != "libfoo_part.so.1" for s in without.steps)


def test_removed_and_escaping_symlinks_are_absent(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    target = lib(outside / "liby.so.1")
    env = tmp_path / "env"
    x = lib(env / "a" / "libx.so.1")
    (env / "a" / "liby.so.1").symlink_to(target)
    root = lib(env / "root.so", needed=[x, target], rpath=["$ORIGIN/a"])
    config = SearchConfig.for_host(HostView())
    view = view_of(env)
    steps = {s.need: s for s in resolve(str(root), view, config, DlopenTable()).steps}
    assert steps["libx.so.1"].provider == str(x)
    assert steps["liby.so.1"].provider is None  # the link leaves the env: not followed
    after = view.without(frozenset({EnvPath("a/libx.so.1")}))
    steps = {s.need: s for s in resolve(str(root), after, config, DlopenTable()).steps}
    assert steps["libx.so.1"].provider is None
    assert str(env / "a") in steps["libx.so.1"].searched


def test_default_table_names_cudnn_parts() -> None:
    table = DlopenTable.default()
    assert "libcudnn_graph.so.9" in table.edges["libcudnn.so.9"]
    merged = table.merged(DlopenTable.from_mapping({"libcudnn.so.9": ["libextra.so.1"]}))
    assert merged.edges["libcudnn.so.9"][-1] == "libextra.so.1"


@pytest.mark.parametrize(
    ("entry", "expanded"),
    [
        ("$ORIGIN/../lib", "/o/lib"),
        ("${ORIGIN}/x", "/o/d/x"),
        ("$ORIGINAL/x", "/cwd/$ORIGINAL/x"),
        ("/p/$LIB", "/p/lib/x86_64-linux-gnu"),
        ("/p/${PLATFORM}/q", "/p/haswell/q"),
        ("rel", "/cwd/rel"),
    ],
)
def test_dst_expansion(entry: str, expanded: str) -> None:
    config = SearchConfig(platform="haswell", cwd="/cwd")
    assert expand_entry(entry, "/o/d", config) == expanded


def test_unknown_platform_drops_the_element() -> None:
    assert expand_entry("/p/$PLATFORM", "/o", SearchConfig(platform=None)) is None


def test_ldd_is_available() -> None:
    assert shutil.which("ldd") is not None and shutil.which("gcc") is not None


def test_run_time_edges_by_object_path_match_a_real_load(tmp_path: Path) -> None:
    """A framework object's run-time dlopen (keyed by its path, not its soname) searches its
    own RUNPATH, as the real dlopen from inside it does."""
    cudnn = lib(tmp_path / "nvidia" / "cudnn" / "lib" / "libcudnn.so.9")
    plugin = tmp_path / "_versions.so"
    lib(plugin, rpath=["$ORIGIN/nvidia/cudnn/lib"], runpath=True, dlopen=["libcudnn.so.9"])
    table = DlopenTable(by_object={str(plugin): (Soname("libcudnn.so.9"),)})
    tree = resolve(str(plugin), view_of(tmp_path), SearchConfig.for_host(HostView()), table)
    step = next(s for s in tree.steps if s.need == "libcudnn.so.9")
    assert (step.requester, step.how, step.provider) == (str(plugin), "dlopen", str(cudnn))
    assert {p for p in tree.objects if p.startswith(str(tmp_path))} == loaded_maps(plugin)


def test_a_by_path_preload_meets_the_roots_needs_first(tmp_path: Path) -> None:
    """cupy loads the wheel's libcurand by full path before the module whose DT_NEEDED names
    it: the need is met by the loaded soname, with no search (the module has no RPATH)."""
    curand = lib(tmp_path / "nvidia" / "curand" / "lib" / "libcurand.so.10")
    module = lib(tmp_path / "cupy" / "curand.so", needed=[curand])
    preloaded = DlopenTable(preload={str(module): (Soname(str(curand)),)})
    steps = resolve(
        str(module), view_of(tmp_path), SearchConfig.for_host(HostView()), preloaded
    ).steps
    assert [(s.need, s.how, s.provider) for s in steps if "curand" in s.need] == [
        (str(curand), "dlopen", str(curand)),
        ("libcurand.so.10", "loaded", str(curand)),
    ]
    alone = resolve(
        str(module), view_of(tmp_path), SearchConfig.for_host(HostView()), DlopenTable()
    )
    assert [s.provider for s in alone.steps if s.need == "libcurand.so.10"] == [None]


def test_every_shipped_run_time_row_says_where_it_was_read() -> None:
    rows = RuntimeTable.default().rows
    assert {r.framework for r in rows} >= {"jax-cuda12-plugin", "tensorflow", "cupy-cuda12x"}
    assert {r.framework for r in rows} >= {"jax-cuda13-plugin", "jax-cuda13-pjrt", "cupy-cuda13x"}
    for row in rows:
        assert row.objects and (row.sonames or row.paths or row.optional), row
        assert len(row.source) > 40, row  # names the loader code or the trace it was read from


def test_run_time_rows_bind_to_the_objects_they_name() -> None:
    table = RuntimeTable.from_data(
        {
            "version": 1,
            "load": [
                {
                    "framework": "cupy-cuda12x",
                    "requested": "cuda-toolkit[curand]",
                    "objects": ["cupy_backends/cuda/libs/curand*.so"],
                    "paths": ["nvidia/curand/lib/libcurand.so.10"],
                }
            ],
        }
    )
    site = "lib/python3.11/site-packages"
    ext = EnvPath(f"{site}/cupy_backends/cuda/libs/curand.cpython-311-x86_64-linux-gnu.so")
    bound = bind(table, "/v", [EnvPath(site)], [ext, EnvPath(f"{site}/other.so")], {})
    lib_path = f"/v/{site}/nvidia/curand/lib/libcurand.so.10"
    assert bound.paths == {f"/v/{ext}": (lib_path,)} and not bound.sonames
    row = bound.row(f"/v/{ext}", lib_path)
    assert row is not None and row.requested_as == "cuda-toolkit[curand]"
    # the same object name shipped by another framework (cupy-cuda13x) is not bound
    owned = {ext: (DistName("cupy-cuda13x"),)}
    assert bind(table, "/v", [EnvPath(site)], [ext], owned) == BoundLoads()
    mine = {ext: (DistName("cupy-cuda12x"),)}
    assert bind(table, "/v", [EnvPath(site)], [ext], mine).paths == bound.paths
    with pytest.raises(ValueError, match="inside site-packages"):
        RuntimeTable.from_data(
            {"load": [{"framework": "x", "objects": ["a.so"], "paths": ["../x"]}]}
        )
