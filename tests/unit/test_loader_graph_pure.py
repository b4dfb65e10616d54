"""The loader graph's pure parts over values: by-path edges, the partly-provided rule, the
memory of the last reading and the libraries gone since. No venv, no gcc."""

from __future__ import annotations

from dataclasses import replace

from cudafix.env.lastseen import Seen, update
from cudafix.linker.bypath import BY_PATH, by_path, partly_provided
from cudafix.linker.edge import Edge
from cudafix.linker.elf import ElfInfo
from cudafix.model.names import DistName, EnvPath, Soname
from cudafix.plan.gone import gone_libraries, returning_installs
from tests.support.facts import PREFIX, Dist, Lib, env, facts

P = str(PREFIX)
PLUG, LIBA, LIBB = f"{P}/plug/libplug.so", f"{P}/a/libA.so.1", f"{P}/b/libB.so.1"


def _info(soname: str) -> ElfInfo:
    return ElfInfo(64, "EM_X86_64", Soname(soname), (), (), ())


def _edge(requester: str, need: str, provider: str | None = None, chains: int = 0) -> Edge:
    return Edge(requester, Soname(need), provider, "not-found", (), chains)


def test_a_need_no_chain_loads_binds_to_the_file_answering_to_its_soname() -> None:
    edges = {
        (PLUG, Soname("libA.so.1")): _edge(PLUG, "libA.so.1"),
        (PLUG, Soname("libZ.so.1")): _edge(PLUG, "libZ.so.1"),
        (f"{P}/ext.so", Soname("libA.so.1")): _edge(f"{P}/ext.so", "libA.so.1", chains=1),
    }
    bound = by_path(edges, {LIBA: _info("libA.so.1")})
    assert (
        bound[(PLUG, Soname("libA.so.1"))].provider,
        bound[(PLUG, Soname("libA.so.1"))].how,
    ) == (
        LIBA,
        BY_PATH,
    )
    assert bound[(PLUG, Soname("libZ.so.1"))].provider is None  # nowhere in the venv
    assert bound[(f"{P}/ext.so", Soname("libA.so.1"))].provider is None  # a chain judges it


def test_partly_provided_is_broken_none_provided_is_optional_own_files_do_not_count() -> None:
    owner = {PLUG: "plug", LIBA: "pa", f"{P}/plug/libown.so": "plug"}.get
    half = [_edge(PLUG, "libA.so.1", LIBA), _edge(PLUG, "libB.so.1")]
    assert partly_provided(half, P, owner) == {PLUG}
    none = [_edge(PLUG, "libB.so.1"), _edge(PLUG, "libc.so.6", "/lib/libc.so.6")]
    assert partly_provided(none, P, owner) == frozenset()
    own = [_edge(PLUG, "libown.so", f"{P}/plug/libown.so"), _edge(PLUG, "libB.so.1")]
    assert partly_provided(own, P, owner) == frozenset()


def test_the_memory_keeps_a_still_needed_missing_library_and_forgets_the_rest() -> None:
    b = (Seen(EnvPath("b/libB.so.1"), DistName("pb"), "1.0"),)
    c = (Seen(EnvPath("c/libC.so.1"), DistName("pc"), "2.0"),)
    old = {Soname("libB.so.1"): b, Soname("libC.so.1"): c}
    new = update(old, {}, [Soname("libB.so.1")])
    assert new == {Soname("libB.so.1"): b}  # libC: nothing needs it any more


def test_a_library_gone_since_the_last_reading_is_reinstalled_at_its_version() -> None:
    plug = Dist("plug", "1.0", {"plug/libplug.so": "p"})
    f = facts([plug], {"plug/libplug.so": Lib("libplug.so", ("libB.so.1",))})
    seen = Seen(env("nvidia/b/lib/libB.so.1"), DistName("pb"), "1.0")
    f = replace(f, last_seen={Soname("libB.so.1"): (seen,)})
    assert gone_libraries(f) == {"libB.so.1": seen}
    assert list(returning_installs(f)) == ["pb==1.0"]
