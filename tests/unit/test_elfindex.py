"""The ELF index: classification, the (dev, ino, size, mtime) cache, and the environment view."""

from __future__ import annotations

import json
import os
from pathlib import Path

from cudafix.linker.elf import ElfInfo, ElfProblem
from cudafix.linker.elfindex import (
    CACHE_VERSION,
    EnvironmentView,
    index_environment,
    read_elf_nofollow,
)
from cudafix.linker.hostview import HostView
from cudafix.model.names import EnvPath
from tests.support.loadertree import ARCH, lib, scan


class Counter:
    """A real reader that counts the files it had to open."""

    def __init__(self) -> None:
        self.paths: list[Path] = []

    def __call__(self, path: str) -> ElfInfo | ElfProblem:
        self.paths.append(Path(path))
        return read_elf_nofollow(path)


def _env(tmp: Path) -> Path:
    env = tmp / "env"
    dep = lib(env / "lib" / "libdep.so.1")
    lib(env / "lib" / "libtop.so.1", needed=[dep], rpath=["$ORIGIN"])
    (env / "lib" / "libc.so").write_text("/* GNU ld script */\nGROUP ( libc.so.6 )\n")
    (env / "mod.py").write_text("x = 1\n")
    (env / "lib" / "libdep.so").symlink_to("libdep.so.1")
    for c in env.rglob("*.c"):
        c.unlink()
    return env


def test_classifies_elf_linker_scripts_and_ignores_plain_files(tmp_path: Path) -> None:
    env = _env(tmp_path)
    index = index_environment(env, scan(env), None, expected=ARCH)
    assert set(index.objects) == {"lib/libdep.so.1", "lib/libtop.so.1"}
    assert index.objects[EnvPath("lib/libtop.so.1")].needed[0] == "libdep.so.1"
    assert {p: v.reason for p, v in index.problems.items()} == {"lib/libc.so": "linker-script"}
    assert index.foreign == frozenset()


def test_warm_scan_opens_nothing_and_changes_are_reparsed(tmp_path: Path) -> None:
    env = _env(tmp_path)
    cache = env / ".cudafix" / "elf-cache.json"
    cold = Counter()
    first = index_environment(env, scan(env), cache, read=cold, expected=ARCH)
    assert len(cold.paths) == 4 and first.parsed == 4  # 2 ELF, 1 script, 1 .py (symlink: never)
    warm = Counter()
    second = index_environment(env, scan(env), cache, read=warm, expected=ARCH)
    assert warm.paths == [] and second.parsed == 0
    assert second == first
    lib(env / "lib" / "libdep.so.1", soname="libdep.so.2")
    changed = Counter()
    third = index_environment(env, scan(env), cache, read=changed, expected=ARCH)
    assert changed.paths == [env / "lib" / "libdep.so.1"]
    assert third.objects[EnvPath("lib/libdep.so.1")].soname == "libdep.so.2"
    assert json.loads(cache.read_text())["version"] == CACHE_VERSION
    assert [p.name for p in cache.parent.iterdir()] == ["elf-cache.json"]  # no temp left


def test_corrupt_or_foreign_cache_is_ignored(tmp_path: Path) -> None:
    env = _env(tmp_path)
    cache = env / ".cudafix" / "elf-cache.json"
    cache.parent.mkdir()
    for junk in ("{not json", json.dumps({"format": "x", "version": 99}), "[]"):
        cache.write_text(junk)
        counter = Counter()
        index = index_environment(env, scan(env), cache, read=counter, expected=ARCH)
        assert len(counter.paths) == 4 and len(index.objects) == 2
    cache.write_text(json.dumps({"format": "cudafix-elf-cache", "version": 1, "entries": {"a": 1}}))
    assert len(index_environment(env, scan(env), cache, expected=ARCH).objects) == 2


def test_cache_written_only_inside_dot_cudafix(tmp_path: Path) -> None:
    env = _env(tmp_path)
    stray = tmp_path / "elsewhere" / "elf-cache.json"
    index_environment(env, scan(env), stray, expected=ARCH)
    assert not stray.exists()
    outside = tmp_path / "outside"
    outside.mkdir()
    (env / ".cudafix").symlink_to(outside)  # never written through a symlink
    index_environment(
        env,
        {k: v for k, v in scan(env).items() if "cudafix" not in k},
        env / ".cudafix" / "elf-cache.json",
        expected=ARCH,
    )
    assert list(outside.iterdir()) == []


def test_unwritable_cache_is_not_fatal(tmp_path: Path) -> None:
    env = _env(tmp_path)
    (env / ".cudafix").write_text("a file where the directory should be")
    files = {k: v for k, v in scan(env).items() if k != ".cudafix"}
    assert (
        len(
            index_environment(
                env, files, env / ".cudafix" / "elf-cache.json", expected=ARCH
            ).objects
        )
        == 2
    )


def test_foreign_arch_reported(tmp_path: Path) -> None:
    env = _env(tmp_path)
    good = (env / "lib" / "libdep.so.1").read_bytes()
    patched = bytearray(good)
    patched[18:20] = (183).to_bytes(2, "little")  # EM_AARCH64
    (env / "lib" / "libarm.so.1").write_bytes(bytes(patched))
    index = index_environment(env, scan(env), None, expected=ARCH)
    assert index.foreign == frozenset({"lib/libarm.so.1"})
    assert index.objects[EnvPath("lib/libarm.so.1")].machine == "EM_AARCH64"


def test_view_follows_links_within_env_only(tmp_path: Path) -> None:
    env = _env(tmp_path)
    (env / "lib64").symlink_to("lib")
    (env / "lib" / "libabs.so.1").symlink_to(env / "lib" / "libdep.so.1")
    (env / "lib" / "libout.so.1").symlink_to("/lib/x86_64-linux-gnu/libc.so.6")
    (env / "lib" / "libloop.so.1").symlink_to("libloop.so.1")
    files = scan(env)
    view = EnvironmentView(
        env, index_environment(env, files, None, expected=ARCH), files, system=HostView()
    )
    base = str(env)
    assert view.elf(f"{base}/lib64/libdep.so.1") == view.elf(f"{base}/lib/libdep.so.1")
    assert view.canonical(f"{base}/lib64/libdep.so") == f"{base}/lib/libdep.so.1"
    assert view.elf(f"{base}/lib/libabs.so.1") is not None
    assert view.elf(f"{base}/lib/libout.so.1") is None
    assert view.elf(f"{base}/lib/libloop.so.1") is None
    assert view.problem(f"{base}/lib/libc.so") is not None
    assert view.elf("/lib/x86_64-linux-gnu/libc.so.6") is not None  # system: from disk
    after = view.without(frozenset({EnvPath("lib/libdep.so.1")}))
    assert after.elf(f"{base}/lib64/libdep.so") is None
    assert view.elf(f"{base}/lib64/libdep.so") is not None


def test_many_files_warm_scan_parses_nothing(tmp_path: Path) -> None:
    env = tmp_path / "big"
    env.mkdir()
    for i in range(500):
        (env / f"m{i}.py").write_text("x\n")
    cache = env / ".cudafix" / "elf-cache.json"
    files = scan(env)
    index_environment(env, files, cache, expected=ARCH)
    os.utime(env / "m7.py", ns=(1, 1))
    counter = Counter()
    index_environment(env, scan(env), cache, read=counter, expected=ARCH)
    assert counter.paths == [env / "m7.py"]
