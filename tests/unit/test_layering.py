"""The house's shape, checked from the code's own imports: floors, no circle, small rooms.

A module imports only from its own room or a lower floor, and no group of modules imports
itself round in a loop: a reader can then learn the code bottom up, and a change to a low
floor cannot need a change to a higher one. Imports under ``TYPE_CHECKING`` and inside
functions count too: a loop that only type hints close is still a loop to read.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "cudafix"

FLOORS: dict[str, int] = {
    "cudafix": 0,
    "process": 0,
    "faults": 0,
    "model": 1,
    "env": 2,
    "linker": 3,
    "fetch": 4,
    "plan": 5,
    "gather": 6,
    "tx": 6,
    "flows": 7,
    "app": 8,
    "cli": 9,
    "__main__": 10,
}
"""Each room of ``cudafix/`` (a sub-package or a top-level module) and its floor, lowest first.
Rooms on one floor do not import each other."""

MAX_LINES = 600


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(module: str, path: Path, known: set[str]) -> Iterator[str]:
    """The cudafix modules ``module`` imports (``from cudafix.x import y`` counts ``cudafix.x.y``
    when that is a module, else ``cudafix.x``)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            if base not in known:
                continue
            subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known]
            yield from subs or [base]


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {m: set(_imports(m, p, known)) - {m} for m, p in modules.items()}


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def test_every_room_has_a_floor() -> None:
    rooms = {_room(m) for m in _modules()}
    assert rooms <= set(FLOORS), f"rooms without a floor: {sorted(rooms - set(FLOORS))}"


def test_no_import_runs_up_or_sideways() -> None:
    wrong = sorted(
        f"{a} (floor {FLOORS[_room(a)]}) imports {b} (floor {FLOORS[_room(b)]})"
        for a, targets in _graph().items()
        for b in targets
        if _room(a) != _room(b) and FLOORS[_room(b)] >= FLOORS[_room(a)]
    )
    assert not wrong, "\n".join(wrong)


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_circle_of_imports() -> None:
    assert _circles(_graph()) == []


def test_the_circle_check_sees_a_circle() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("module", sorted(_modules()))
def test_no_module_is_over_the_line_limit(module: str) -> None:
    lines = len(_modules()[module].read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{module}: {lines} lines"
