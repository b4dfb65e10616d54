"""Repeated dry runs and applies of one plan add nothing to uv's cache; one fetch per wheel.

uv keeps one unpacked copy of every wheel it fetched from an index under ``archive-v0``;
``--reinstall`` implies ``--refresh``, so a staging that passed it unpacked the wheel anew on
every dry run (a GB per run for cuDNN). The wheel here comes from a real index served over
HTTP on localhost, as a registry serves it: a ``--find-links`` file is never re-unpacked,
so only an index shows the growth.
"""

from __future__ import annotations

import functools
import http.server
import os
import subprocess
import threading
from collections.abc import Iterator
from hashlib import sha256
from pathlib import Path

import pytest

from tests.support.cli import cudafix
from tests.support.venvs import UV, new_venv, site_dir
from tests.support.wheels import make_wheel

pytestmark = pytest.mark.slow
"""Runs repair dry runs on real venvs: left out of ``make test-fast``."""


WHEEL_GETS: list[str] = []
"""Request paths of wheel files the index served (one list per test: cleared by ``index``)."""


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        if self.command == "GET" and self.path.endswith(".whl"):
            WHEEL_GETS.append(self.path)


@pytest.fixture
def index(tmp_path: Path) -> Iterator[str]:
    """A PEP 503 simple index on 127.0.0.1 holding one wheel, ``leafpkg 1.0``; every GET of
    the wheel file is counted in :data:`WHEEL_GETS`."""
    WHEEL_GETS.clear()
    root = tmp_path / "index"
    wheel = make_wheel(root / "files", "leafpkg", "1.0", {"leafpkg/__init__.py": b"x = 1\n"})
    digest = sha256(wheel.read_bytes()).hexdigest()
    page = root / "simple" / "leafpkg" / "index.html"
    page.parent.mkdir(parents=True)
    page.write_text(f'<a href="../../files/{wheel.name}#sha256={digest}">{wheel.name}</a>\n')
    handler = functools.partial(_Handler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    finally:
        server.shutdown()
        server.server_close()


def _unpacked(cache: Path) -> int:
    root = cache / "archive-v0"
    return sum(1 for _ in root.iterdir()) if root.is_dir() else 0


def _leafpkg_venv(tmp_path: Path, index: str, cache: Path) -> Path:
    """A venv holding ``leafpkg==1.0`` from the index, installed by uv with ``cache``."""
    venv = new_venv(tmp_path / "venv", cache=cache)
    argv = [UV, "pip", "install", "--python", venv / "bin" / "python", "--index-url", index]
    subprocess.run(
        [*argv, "leafpkg==1.0"],
        check=True,
        capture_output=True,
        env={**os.environ, "UV_CACHE_DIR": str(cache)},
    )
    return venv


def test_repeated_repair_dry_runs_unpack_each_wheel_once(tmp_path: Path, index: str) -> None:
    cache = tmp_path / "uv-cache"
    venv = _leafpkg_venv(tmp_path, index, cache)
    (site_dir(venv) / "leafpkg" / "__init__.py").unlink()
    env = {"UV_CACHE_DIR": str(cache), "UV_DEFAULT_INDEX": index}
    counts = []
    for _ in range(3):
        proc = cudafix("repair", "--dry-run", "--venv", venv, env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "leafpkg" in proc.stdout
        counts.append(_unpacked(cache))
    assert counts == [1, 1, 1]


def test_repairs_fetch_the_wheel_once_and_unpack_it_once(tmp_path: Path, index: str) -> None:
    """A repair stages the wheel (one fetch, one unpacked copy) and its reinstall takes that
    copy from uv's cache: ``--reinstall`` online would fetch and unpack it again each time."""
    venv = _leafpkg_venv(tmp_path, index, tmp_path / "setup-cache")
    WHEEL_GETS.clear()
    cache = tmp_path / "uv-cache"
    env = {"UV_CACHE_DIR": str(cache), "UV_DEFAULT_INDEX": index}
    source = site_dir(venv) / "leafpkg" / "__init__.py"
    gets, counts = [], []
    for _ in range(3):
        source.unlink()
        proc = cudafix("repair", "--yes", "--no-probe", "--venv", venv, env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert source.read_bytes() == b"x = 1\n"
        gets.append(len(WHEEL_GETS))
        counts.append(_unpacked(cache))
    assert gets == [1, 1, 1]  # in all: the first repair fetched it, the others not at all
    assert counts == [1, 1, 1]


def test_a_saved_plan_whose_wheel_left_the_cache_fetches_it(tmp_path: Path, index: str) -> None:
    """The cache-first reinstall falls back to the index when uv's cache no longer holds the
    wheel (a plan saved on one node, applied with another cache)."""
    venv = _leafpkg_venv(tmp_path, index, tmp_path / "setup-cache")
    source = site_dir(venv) / "leafpkg" / "__init__.py"
    source.unlink()
    plan = tmp_path / "plan.json"
    planned = {"UV_CACHE_DIR": str(tmp_path / "plan-cache"), "UV_DEFAULT_INDEX": index}
    proc = cudafix("repair", "--dry-run", "--out", plan, "--venv", venv, env=planned)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    WHEEL_GETS.clear()
    applied = {"UV_CACHE_DIR": str(tmp_path / "empty-cache"), "UV_DEFAULT_INDEX": index}
    proc = cudafix("apply", plan, "--yes", "--no-probe", env=applied)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert source.read_bytes() == b"x = 1\n"
    assert len(WHEEL_GETS) == 1
