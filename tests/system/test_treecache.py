"""The tree cache never changes an answer: after each way pip and uv (or a user) change a
real venv, a warm read equals a cold one, through the library and through the CLI."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import uv

from cudafix.env.memo.treecache import TreeCache
from cudafix.env.statedir import StateDir
from cudafix.env.target import locate_target
from cudafix.gather import gather
from cudafix.plan.facts import Facts
from scenarios import BuiltScenario
from tests.support.cli import cudafix, dlopen_table
from tests.support.venvs import settle, site_dir
from tests.support.wheels import make_wheel

pytestmark = pytest.mark.slow
"""Builds real venvs or runs the CLI through transactions: left out of ``make test-fast``."""

UV = uv.find_uv_bin()


def _facts(venv: Path) -> Facts:
    return gather(locate_target(None, str(venv), os.environ, Path.cwd()))


def _cold(venv: Path) -> Facts:
    shutil.rmtree(StateDir(venv).cache, ignore_errors=True)
    return _facts(venv)


def _same(warm: Facts, cold: Facts) -> None:
    assert warm.inventory == cold.inventory
    assert warm.elf == cold.elf
    assert warm.path_hashes == cold.path_hashes


def _uv(built: BuiltScenario, *args: str) -> None:
    argv = [UV, "pip", *args, "--python", str(built.python)]
    subprocess.run(argv, check=True, capture_output=True, env={**os.environ, "UV_OFFLINE": "1"})


def _overwrite_in_place(path: Path, data: bytes) -> None:
    """Same inode, same directory entry: the directory's mtime does not move."""
    with path.open("r+b") as fh:
        fh.truncate(0)
        fh.write(data)


def test_unchanged_warm_read_lists_no_directory(scenario: Callable[..., BuiltScenario]) -> None:
    built = scenario("incident")
    _facts(built.venv)  # creates .cudafix/, which changes the prefix directory itself
    settle()
    cold = _facts(built.venv)
    state = StateDir(built.venv)
    tree = TreeCache.load(state.tree_cache)
    files = tree.walk(built.venv)
    assert files == cold.inventory.files
    assert tree.scanned_dirs == 0 and tree.reused_dirs > 10
    bytecode = [p for p in files if p.endswith(".pyc") or "/__pycache__/" in f"/{p}"]
    assert tree.restatted == len(files) - len(bytecode)  # every file but bytecode
    _same(_facts(built.venv), cold)


def test_warm_equals_cold_after_each_change(
    scenario: Callable[..., BuiltScenario], tmp_path: Path
) -> None:
    built = scenario("incident")
    site = site_dir(built.venv)
    lib = site / "nvidia/cudnn/lib"
    settle()
    _cold(built.venv)

    def check(what: str) -> None:
        warm = _facts(built.venv)
        cold = _cold(built.venv)
        _same(warm, cold)
        assert what  # the label shows in the traceback of a failing step

    before = _facts(built.venv)
    # a user's `cp` over a shared library: new bytes, same inode, directory untouched
    _overwrite_in_place(lib / "libcudnn_graph.so.9", (lib / "libcudnn_adv.so.9").read_bytes())
    check("in-place overwrite of a shared ELF library")
    assert _facts(built.venv).inventory.shared != before.inventory.shared

    # the same for a shared non-ELF path (each cuDNN wheel ships nvidia/__init__.py)
    _overwrite_in_place(site / "nvidia/__init__.py", b"# edited\n")
    check("in-place overwrite of a shared plain file")

    # a RECORD edited in place (a row dropped): ownership must follow
    (record,) = site.glob("torch-*.dist-info/RECORD")
    text = record.read_text()
    _overwrite_in_place(
        record, "".join(ln for ln in text.splitlines(True) if "version.py" not in ln).encode()
    )
    check("RECORD edited in place")
    assert not any(p.endswith("torch/version.py") for p in _facts(built.venv).inventory.owners)

    # a RECORD only touched (mtime moves, bytes equal)
    os.utime(record)
    check("RECORD touched")

    _uv(built, "uninstall", "nvidia-cudnn-cu13")
    check("uv pip uninstall")
    assert "nvidia-cudnn-cu13" not in _facts(built.venv).inventory.distributions

    # uv writes over the paths the cu12 wheel still holds (rename into place)
    _uv(built, "install", "--no-deps", "--no-index", "--find-links", str(built.wheelhouse),
        "nvidia-cudnn-cu13==9.13.0.50")  # fmt: skip
    check("uv pip install over existing paths")

    wheel = make_wheel(tmp_path / "wh", "fresh-dist", "1.0", {"fresh/__init__.py": b"x = 1\n"})
    _uv(built, "install", "--no-deps", "--no-index", str(wheel))
    check("new dist-info")
    assert "fresh-dist" in _facts(built.venv).inventory.distributions

    # a directory changed right after it was listed: not trusted on the next run
    (site / "fresh" / "late.py").write_text("y = 2\n")
    _facts(built.venv)
    tree = TreeCache.load(StateDir(built.venv).tree_cache)
    tree.walk(built.venv)
    assert tree.scanned_dirs >= 1
    check("directory changed within the racy window")


def test_cli_warm_answers_equal_cold(
    scenario: Callable[..., BuiltScenario], tmp_path: Path
) -> None:
    built = scenario("incident")
    table = dlopen_table(built, tmp_path / "dlopen.toml")
    commands = [
        ["doctor", "--json", *table],
        ["remove", "nvidia-cudnn-cu13", "--dry-run", "--json", "--no-fetch", *table],
    ]
    settle()

    def answers() -> list[tuple[int, str]]:
        runs = [cudafix(*cmd, "--venv", built.venv) for cmd in commands]
        return [(r.returncode, r.stdout) for r in runs]

    cold = answers()
    assert cold == answers()  # warm, nothing changed
    assert (StateDir(built.venv).tree_cache).is_file()
    subprocess.run(built.break_command(), check=True, capture_output=True)
    warm = answers()
    shutil.rmtree(StateDir(built.venv).cache)
    assert warm == answers()
    assert warm != cold


@pytest.mark.parametrize("corrupt", [b"", b"{not json", b'{"format": "cudafix-tree-cache"}'])
def test_a_corrupt_cache_is_an_empty_one(
    scenario: Callable[..., BuiltScenario], corrupt: bytes
) -> None:
    built = scenario("clean")
    cold = _cold(built.venv)
    StateDir(built.venv).tree_cache.write_bytes(corrupt)
    _same(_facts(built.venv), cold)


def test_interpreter_answer_cached_equals_asked(scenario: Callable[..., BuiltScenario]) -> None:
    from cudafix.env.target import query_interpreter

    built = scenario("clean")
    target = locate_target(None, str(built.venv), os.environ, Path.cwd())
    settle()
    asked = query_interpreter(target)
    assert StateDir(built.venv).interpreter_cache.is_file()
    assert query_interpreter(target) == asked
    StateDir(built.venv).interpreter_cache.write_text('{"key": 1, "answer": []}')
    assert query_interpreter(target) == asked


def test_hard_links_to_the_files_leave_the_cache_unwritten(
    scenario: Callable[..., BuiltScenario], tmp_path: Path
) -> None:
    """A hard-link snapshot (``run --``) or ``cp -al`` moves every file's ctime and nothing
    else: the next read does not rewrite the whole cache, and answers as a cold one."""
    built = scenario("clean")
    _facts(built.venv)
    settle()
    _facts(built.venv)
    cache = StateDir(built.venv).tree_cache
    before = cache.stat()
    shutil.copytree(built.venv, tmp_path / "links", symlinks=True, copy_function=os.link)
    warm = _facts(built.venv)
    after = cache.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    _same(warm, _cold(built.venv))
