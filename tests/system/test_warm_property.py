"""What cudafix remembers never changes an answer: for random sequences of uv installs and
uninstalls and in-place edits of a real scenario venv, every ``doctor`` and dry run,
answered through the index, the tree and host caches and the remembered answers (warm),
equals the same question asked with no ``.cudafix/cache/`` at all (cold), at every step.

The questions alternate (doctor, a dry run, doctor again) and some steps wait out the
racy window, so answers are both computed and given again from memory.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from cudafix.env.statedir import StateDir
from scenarios import BuiltScenario
from tests.support.cli import cudafix, offline
from tests.support.venvs import install, settle, site_dir, uninstall

pytestmark = pytest.mark.slow
"""Builds a real venv and runs the CLI many times: left out of ``make test-fast``."""

STEPS = 8


def _installed(built: BuiltScenario) -> dict[str, Path]:
    """Each installed distribution's name (as its METADATA says) -> its dist-info."""
    out = {}
    for info in site_dir(built.venv).glob("*.dist-info"):
        for line in (info / "METADATA").read_text().splitlines():
            if line.startswith("Name: "):
                out[line[6:].strip()] = info
                break
    return out


def _wheels(built: BuiltScenario) -> list[str]:
    """``name==version`` of every wheel the scenario's wheelhouse holds."""
    out = []
    for wheel in sorted(built.wheelhouse.glob("*.whl")):
        name, version = wheel.name.split("-")[:2]
        out.append(f"{name.replace('_', '-')}=={version}")
    return out


def _owned_files(built: BuiltScenario) -> list[Path]:
    site = site_dir(built.venv)
    return sorted(p for p in site.rglob("*") if p.is_file() and ".dist-info" not in p.as_posix())


def _uninstall_one(built: BuiltScenario, rng: random.Random) -> str:
    names = sorted(n for n in _installed(built) if n != "pip")
    name = rng.choice(names)
    uninstall(built.venv, name)
    return f"uv uninstall {name}"


def _install_one(built: BuiltScenario, rng: random.Random) -> str:
    wanted = rng.choice(_wheels(built))
    install(built.venv, built.wheelhouse, "--reinstall", wanted, deps=False)
    return f"uv install {wanted}"


def _rewrite_in_place(built: BuiltScenario, rng: random.Random) -> str:
    """The bytes of another file of the same tree, written into one library in place, its
    mtime put back: only its size and ctime say it changed."""
    files = _owned_files(built)
    libs = [p for p in files if ".so" in p.name]
    victim, donor = rng.choice(libs), rng.choice(files)
    before = victim.stat()
    data = donor.read_bytes()
    with victim.open("r+b") as fh:
        fh.write(data)
        fh.truncate(len(data))
    os.utime(victim, ns=(before.st_atime_ns, before.st_mtime_ns))
    return f"rewrote {victim.name} with {donor.name}"


def _delete_owned(built: BuiltScenario, rng: random.Random) -> str:
    victim = rng.choice(_owned_files(built))
    victim.unlink()
    return f"deleted {victim.name}"


def _edit_metadata(built: BuiltScenario, rng: random.Random) -> str:
    name, info = rng.choice(sorted(_installed(built).items()))
    required = rng.choice(_wheels(built)).split("==")[0]
    meta = info / "METADATA"
    first, rest = meta.read_text().split("\n", 1)
    with meta.open("r+") as fh:  # in place: the same inode, a header more
        fh.write(f"{first}\nRequires-Dist: {required}\n{rest}")
    return f"{name} now requires {required}"


CHANGES: tuple[Callable[[BuiltScenario, random.Random], str], ...] = (
    _uninstall_one,
    _install_one,
    _install_one,
    _rewrite_in_place,
    _delete_owned,
    _edit_metadata,
)


def _questions(built: BuiltScenario, rng: random.Random) -> list[list[str]]:
    venv = ["--venv", str(built.venv)]
    name = rng.choice(sorted(n for n in _installed(built) if n != "pip"))
    doctor = ["doctor", "--json", *venv]
    dry_run = ["remove", name, "--dry-run", "--json", *offline(built.wheelhouse), *venv]
    return [doctor, dry_run, doctor]


def _ask(argv: list[str]) -> tuple[int, str]:
    proc = cudafix(*argv)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, proc.stdout


def _cold(built: BuiltScenario, argv: list[str]) -> tuple[int, str]:
    """The answer with nothing remembered: the cache set aside while it is asked."""
    cache = StateDir(built.venv).cache
    aside = cache.with_name("cache.aside")
    if cache.exists():
        cache.rename(aside)
    try:
        return _ask(argv)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
        if aside.exists():
            aside.rename(cache)


@pytest.mark.parametrize("seed", [1, 2])
def test_warm_answers_equal_cold_ones_at_every_step(
    scenario: Callable[..., BuiltScenario], seed: int
) -> None:
    rng = random.Random(seed)
    built = scenario("incident")
    _ask(["doctor", "--venv", str(built.venv)])  # the first reading, remembered from now on
    settle()
    done = []
    for _ in range(STEPS):
        done.append(rng.choice(CHANGES)(built, rng))
        if rng.random() < 0.5:
            settle()  # past the racy window: the answers below are remembered, then given
        for argv in _questions(built, rng):
            warm = _ask(argv)
            assert warm == _cold(built, argv), f"after {done}: {argv[0]} differs from a cold one"
            assert _ask(argv) == warm, f"after {done}: {argv[0]} given again differs"


def test_a_step_is_seen_by_the_warm_answer(scenario: Callable[..., BuiltScenario]) -> None:
    """The comparison above can fail: a change the memory missed would show."""
    built = scenario("incident")
    first = _ask(["doctor", "--json", "--venv", str(built.venv)])
    settle()
    assert _ask(["doctor", "--json", "--venv", str(built.venv)]) == first
    subprocess.run(built.break_command(), check=True, capture_output=True)
    assert _ask(["doctor", "--json", "--venv", str(built.venv)]) != first
