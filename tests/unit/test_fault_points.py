"""docs/safety.md names every fault point the code has, and no other."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_CALLS = {
    "fail": re.compile(r"""fail_point\(\s*"([a-z-]+)\""""),
    "crash": re.compile(r"""(?:crash_point\(\s*|crash == )"([a-z-]+)\""""),
}
_LISTS = {
    "fail": re.compile(r"^- `CUDAFIX_TEST_FAIL` operations \(`fail_point`\): (.*)$", re.M),
    "crash": re.compile(r"^- `CUDAFIX_TEST_CRASH_AFTER` points .*?\(`crash_point`\): (.*)$", re.M),
}


def _in_code(kind: str) -> set[str]:
    found: set[str] = set()
    for path in (ROOT / "cudafix").rglob("*.py"):
        found.update(_CALLS[kind].findall(path.read_text(encoding="utf-8")))
    return found


def _in_docs(kind: str) -> set[str]:
    text = (ROOT / "docs" / "safety.md").read_text(encoding="utf-8")
    (line,) = _LISTS[kind].findall(text)
    return set(re.findall(r"`([a-z-]+)`", line))


def test_every_fail_point_is_listed_in_safety_md() -> None:
    assert _in_code("fail") == _in_docs("fail")
    assert {"trash", "write", "journal"} <= _in_code("fail")


def test_every_named_crash_point_is_listed_in_safety_md() -> None:
    assert _in_code("crash") == _in_docs("crash")
    assert {"trash-moved", "trash-unlink", "write-half"} <= _in_code("crash")
