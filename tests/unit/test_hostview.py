"""The host as facts carry it: doctor and the planner look outside the environment only
through ``Facts.host``, so a test hands in a real view over a directory of its own."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from cudafix.linker.hostcache import last_consulted
from cudafix.linker.hostview import HostView
from cudafix.linker.loader import SearchConfig
from cudafix.model.names import DistName
from cudafix.model.plan import Options
from cudafix.plan.doctor import diagnose
from cudafix.plan.facts import Facts
from cudafix.plan.planner import Request, build_plan
from tests.support.facts import Dist, Lib, env, facts
from tests.support.loadertree import lib

EXT = "app/_ext.so"
NEED = "libsys.so.1"
TOOL_LIB = "tool/libtool.so"


def _facts(host_dir: Path, view: HostView, *, tool_lib: bool = False) -> Facts:
    """An extension module needing ``libsys.so.1``, which no wheel ships: the loader looks
    for it in ``host_dir/lib`` only, through ``view``. ``tool_lib``: the distribution
    ``tool`` ships a library too (removing it then changes what the loader sees)."""
    tool = {"tool/x.py": "x", **({TOOL_LIB: "lib"} if tool_lib else {})}
    made = facts(
        [Dist("app", "1.0", {EXT: "ext"}), Dist("tool", "1.0", tool)],
        {EXT: Lib(needed=(NEED,)), TOOL_LIB: Lib("libtool.so")},
    )
    search = SearchConfig(default_dirs=(str(host_dir / "lib"),), lib="lib")
    return dataclasses.replace(made, search=search, host=view)


def test_doctor_finds_a_system_library_in_the_host_view_it_is_given(tmp_path: Path) -> None:
    system = lib(tmp_path / "lib" / NEED)
    view = HostView(tmp_path / "host-cache.json")
    report = diagnose(_facts(tmp_path, view))
    assert [f for f in report.findings if f.need == NEED] == []
    assert str(system) in view.consulted()


def test_a_host_view_without_the_library_leaves_the_need_unresolved(tmp_path: Path) -> None:
    (tmp_path / "lib").mkdir()
    report = diagnose(_facts(tmp_path, HostView()))
    assert [(f.kind, f.consumer, f.need) for f in report.findings] == [
        ("unresolved", env(EXT), NEED)
    ]


def test_the_planner_resolves_through_the_view_and_the_view_saves_what_it_consulted(
    tmp_path: Path,
) -> None:
    lib(tmp_path / "lib" / NEED)
    cache = tmp_path / ".cudafix" / "cache" / "host-cache.json"
    cache.parent.mkdir(parents=True)
    view = HostView(cache)
    names = (DistName("tool"),)
    made = _facts(tmp_path, view, tool_lib=True)  # a library removed: the loader resolves
    plan = build_plan(made, Request(names, names, Options()))
    assert plan.verdict == "pass"
    consulted = view.consulted()
    assert str(tmp_path / "lib") in consulted
    assert view.save()
    assert last_consulted(cache) == sorted(set(consulted))
