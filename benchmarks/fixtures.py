"""Scenario venvs for benchmarks: built once per shape (cached), measured on disposable copies."""

from __future__ import annotations

import hashlib
import json
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from scenarios import build_scenario, load_scenario
from scenarios.cache import cache_key

STATE_DIR = ".cudafix"


def pristine(root: Path, params: Mapping[str, int]) -> Path:
    """The ``large`` scenario built with ``params`` under ``root``; reused while unchanged.

    Nothing ever runs cudafix on it: every measurement works on a :func:`copy`.
    """
    spec = load_scenario("large", params)
    tag = hashlib.sha256(
        json.dumps([cache_key(spec), spec.model_dump(mode="json")], sort_keys=True).encode()
    ).hexdigest()[:12]
    shape = "-".join(f"{k}{v}" for k, v in sorted(params.items()))
    dest = root / f"large-{shape}-{tag}"
    stamp = dest / ".bench-ready"
    if stamp.exists():
        return dest
    if dest.exists():
        shutil.rmtree(dest)
    build_scenario("large", dest, params=dict(params))
    stamp.write_text("built\n")
    return dest


def remove_tree(dest: Path) -> None:
    """``rm -r dest``, where cudafix's background emptying of its trash may still be
    unlinking a dropped snapshot inside it: what vanished meanwhile is gone already."""

    def vanished(
        _func: object, _path: str, exc: tuple[type[BaseException], BaseException, object]
    ) -> None:
        if not isinstance(exc[1], FileNotFoundError):
            raise exc[1]

    shutil.rmtree(dest, onerror=vanished)


def copy(src: Path, dest: Path) -> Path:
    """``cp -a`` of ``src`` (holes kept: sparse libraries stay sparse), minus cudafix state."""
    if dest.exists():
        remove_tree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-a", "--sparse=always", str(src), str(dest)], check=True)
    forget_state(dest)
    return dest


def link_copy(src: Path, dest: Path) -> Path:
    """``cp -al``: the same tree with every file hard-linked, in seconds instead of minutes
    for a 5 GB venv. Safe for what is measured on it: uv and cudafix never write a file in
    place (they unlink, or rename a new file over), and cudafix's own state is dropped."""
    if dest.exists():
        remove_tree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-al", str(src), str(dest)], check=True)
    forget_state(dest)
    return dest


Copier = Callable[[Path, Path], Path]


@contextmanager
def scratch_copy(src: Path, dest: Path) -> Iterator[Path]:
    """A copy that is deleted afterwards."""
    try:
        yield copy(src, dest)
    finally:
        shutil.rmtree(dest, ignore_errors=True)


def forget_state(venv: Path) -> None:
    """Remove ``.cudafix/`` (caches, transactions): the next run is a first run."""
    shutil.rmtree(venv / STATE_DIR, ignore_errors=True)


def forget_answers(venv: Path) -> None:
    """Remove the remembered answers only: the next ``doctor`` or dry run computes its
    answer on warm caches (what a changed environment costs; a remembered answer is
    ``make bench-real``'s goal 2)."""
    (venv / STATE_DIR / "cache" / "answers.json").unlink(missing_ok=True)


def byte_compile(tree: Path) -> None:
    """Compile ``tree``'s cudafix to bytecode, as installing it leaves it (pip compiles at
    install, and a first import writes it): this machine sets PYTHONDONTWRITEBYTECODE=1,
    under which every timed run would compile cudafix's source again (0.1-0.15 s), which
    no user's run does."""
    argv = [sys.executable, "-m", "compileall", "-q", str(tree / "cudafix")]
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)


def drop_page_cache() -> bool:
    """``sync; echo 3 > /proc/sys/vm/drop_caches``; False when not permitted."""
    subprocess.run(["sync"], check=False)
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError:
        return False
    return True


def tree_fingerprint(venv: Path) -> str:
    """Path, mode, size and mtime of every non-directory outside ``.cudafix/``, path and mode
    of every directory (a rollback may leave a directory's mtime newer)."""
    digest = hashlib.sha256()
    for path in sorted(venv.rglob("*")):
        rel = path.relative_to(venv).as_posix()
        if rel == STATE_DIR or rel.startswith(STATE_DIR + "/"):
            continue
        st = path.lstat()
        identity = (
            (rel, st.st_mode)
            if stat.S_ISDIR(st.st_mode)
            else (rel, st.st_mode, st.st_size, st.st_mtime_ns)
        )
        digest.update(repr(identity).encode())
    return digest.hexdigest()
