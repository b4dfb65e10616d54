"""A wheel rebuilt under the same name and version is judged, and installed, by its own bytes.

uv keeps what it unpacked from a ``--find-links`` file under the file's name and version,
and serves that again after the file changed (``pip wheel .`` after an edit): a dry run
staged through uv's cache judged the earlier build. The venv here holds ``owner`` (it claims
``shared/data.txt``) and ``plugins``, a symlink to a directory outside the venv; ``newpkg``
is installed from a ``--find-links`` directory, and rebuilt between runs with one cache.
When the wheel cannot be checked first (an index serving another file under the version),
the rollback names every path it never held instead of calling the environment restored.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from scenarios.fingerprint import diff_fingerprints, fingerprint
from tests.support.cli import cudafix
from tests.support.venvs import site_dir, venv_with
from tests.support.wheels import make_wheel, record_hash

pytestmark = pytest.mark.slow
"""Installs into real venvs through the CLI: left out of ``make test-fast``."""

GOOD = {"newpkg/__init__.py": b"x = 1\n"}
CLOBBERS = {"newpkg/__init__.py": b"x = 2\n", "shared/data.txt": b"newpkg's\n"}
THROUGH_LINK = {"newpkg/__init__.py": b"x = 2\n", "plugins/evil.py": b"import os\n"}


def _venv(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """(venv, its outside directory, the environment with one uv cache for every run)."""
    cache = tmp_path / "uv-cache"
    house = tmp_path / "house"
    make_wheel(house, "owner", "1.0", {"owner/__init__.py": b"", "shared/data.txt": b"owner\n"})
    venv = venv_with(tmp_path / "venv", house, "owner", cache=cache)
    outside = tmp_path / "outside"
    outside.mkdir()
    (site_dir(venv) / "plugins").symlink_to(outside, target_is_directory=True)
    return venv, outside, {"UV_CACHE_DIR": str(cache)}


def _build(links: Path, files: dict[str, bytes]) -> Path:
    """``newpkg 1.0`` with ``files``, replacing any earlier build of that file name."""
    for old in links.glob("newpkg-*.whl"):
        old.unlink()
    return make_wheel(links, "newpkg", "1.0", files)


def _install(venv: Path, links: Path | str, env: dict[str, str], *args: str | Path) -> str:
    proc = cudafix(
        "install", "newpkg", "--venv", venv, "--offline", "--find-links", links, *args, env=env
    )
    return f"{proc.returncode}\n{proc.stdout}{proc.stderr}"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize(
    ("rebuilt", "url"), [("clobbers", False), ("clobbers", True), ("through-link", False)]
)
def test_a_rebuilt_wheel_is_judged_by_its_own_bytes(
    tmp_path: Path, rebuilt: str, url: bool
) -> None:
    """``url``: the directory given as a ``file://`` URL, which uv caches the same way."""
    venv, outside, env = _venv(tmp_path)
    links = tmp_path / "links"
    link = links.as_uri() if url else links
    _build(links, GOOD)
    assert _install(venv, link, env, "--dry-run").startswith("0\n")  # uv caches this build
    _build(links, CLOBBERS if rebuilt == "clobbers" else THROUGH_LINK)
    before = fingerprint(venv)
    for mode in ("--dry-run", "--yes"):
        said = _install(venv, link, env, mode, "--no-probe")
        assert said.startswith("3\n"), said
        assert "Verdict: REFUSED" in said
        if rebuilt == "clobbers":
            assert "newpkg would overwrite 1 path(s) that owner claims" in said
        else:
            assert "go through the symlinked directory" in said
            assert "plugins/evil.py" in said
    assert diff_fingerprints(before, fingerprint(venv)) == []
    assert (site_dir(venv) / "shared" / "data.txt").read_bytes() == b"owner\n"
    assert list(outside.iterdir()) == []


def test_yes_installs_the_bytes_the_plan_judged(tmp_path: Path) -> None:
    venv, _outside, env = _venv(tmp_path)
    links = tmp_path / "links"
    _build(links, GOOD)
    assert _install(venv, links, env, "--dry-run").startswith("0\n")
    wheel = _build(links, {"newpkg/__init__.py": b"x = 2\n"})
    plan = tmp_path / "plan.json"
    said = _install(venv, links, env, "--dry-run", "--out", plan)
    assert said.startswith("0\n"), said
    (pinned,) = json.loads(plan.read_text())["install"]
    assert pinned["wheel"] == str(wheel)
    assert pinned["wheel_sha256"] == _sha256(wheel)
    assert pinned["sha256"][f"{site_dir(venv).relative_to(venv)}/newpkg/__init__.py"] == (
        record_hash(b"x = 2\n").removeprefix("sha256=")
    )
    said = _install(venv, links, env, "--yes", "--no-probe")
    assert said.startswith("0\n"), said
    assert (site_dir(venv) / "newpkg" / "__init__.py").read_bytes() == b"x = 2\n"


def test_a_wheel_changed_after_it_was_judged_is_refused(tmp_path: Path) -> None:
    venv, _outside, env = _venv(tmp_path)
    links = tmp_path / "links"
    _build(links, GOOD)
    assert _install(venv, links, env, "--dry-run").startswith("0\n")
    _build(links, {"newpkg/__init__.py": b"x = 2\n"})
    plan = tmp_path / "plan.json"
    assert _install(venv, links, env, "--dry-run", "--out", plan).startswith("0\n")
    _build(links, {"newpkg/__init__.py": b"x = 3\n"})
    before = fingerprint(venv)
    proc = cudafix("apply", plan, "--yes", "--no-probe", env=env)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "changed since the plan was made" in proc.stderr
    assert diff_fingerprints(before, fingerprint(venv)) == []


@pytest.fixture
def index(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A PEP 503 simple index on 127.0.0.1 for ``newpkg``: (its URL, its files directory);
    :func:`_publish` puts a build there."""
    root = tmp_path / "index"
    (root / "simple" / "newpkg").mkdir(parents=True)
    handler = functools.partial(_Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple", root
    finally:
        server.shutdown()
        server.server_close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def _publish(root: Path, files: dict[str, bytes]) -> None:
    wheel = _build(root / "files", files)
    page = root / "simple" / "newpkg" / "index.html"
    link = f"../../files/{wheel.name}#sha256={_sha256(wheel)}"
    page.write_text(f'<a href="{link}">{wheel.name}</a>\n')


def test_a_rollback_names_every_path_it_never_held(tmp_path: Path, index: tuple[str, Path]) -> None:
    """A saved plan applied with another uv cache, after the index's file changed: the
    install writes over owner's file and through the symlink; the rollback undoes what it
    holds and names the rest (exit 4), never "verified" over them."""
    url, root = index
    venv, outside, _env = _venv(tmp_path)
    _publish(root, GOOD)
    plan = tmp_path / "plan.json"
    planned = {"UV_CACHE_DIR": str(tmp_path / "plan-cache"), "UV_DEFAULT_INDEX": url}
    proc = cudafix("install", "newpkg", "--venv", venv, "--dry-run", "--out", plan, env=planned)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _publish(root, {**CLOBBERS, **THROUGH_LINK})
    applied = {"UV_CACHE_DIR": str(tmp_path / "apply-cache"), "UV_DEFAULT_INDEX": url}
    proc = cudafix("apply", plan, "--yes", "--no-probe", env=applied)
    said = proc.stdout + proc.stderr
    assert proc.returncode == 4, said
    assert "verified" not in said
    assert "shared/data.txt" in said
    assert "plugins/evil.py" in said
    assert "2 path(s) written were never snapshotted" in said
    # what it held is back: newpkg is gone; what it never held is named, not hidden
    assert not (site_dir(venv) / "newpkg").exists()
    assert (site_dir(venv) / "shared" / "data.txt").read_bytes() == b"newpkg's\n"
    assert [p.name for p in outside.iterdir()] == ["evil.py"]


def test_a_checked_wheel_never_writes_through_a_symlink(tmp_path: Path) -> None:
    """The checked copy's own RECORD decides what the install writes, whatever the plan
    lists: a path through a symlinked directory (made after planning, and left out of an
    edited plan) is refused before anything changes."""
    venv, outside, env = _venv(tmp_path)
    link = site_dir(venv) / "plugins"
    link.unlink()
    links = tmp_path / "links"
    _build(links, THROUGH_LINK)
    plan = tmp_path / "plan.json"
    assert _install(venv, links, env, "--dry-run", "--out", plan).startswith("0\n")
    data = json.loads(plan.read_text())
    (pinned,) = data["install"]
    pinned["paths"] = [p for p in pinned["paths"] if "/plugins/" not in p]
    pinned["sha256"] = {p: h for p, h in pinned["sha256"].items() if "/plugins/" not in p}
    plan.write_text(json.dumps(data))
    link.symlink_to(outside, target_is_directory=True)
    before = fingerprint(venv)
    proc = cudafix("apply", plan, "--yes", "--no-probe", env=env)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "goes through the symlink" in proc.stderr
    assert "plugins/evil.py" in proc.stderr
    assert list(outside.iterdir()) == []
    assert diff_fingerprints(before, fingerprint(venv)) == []


def test_a_repair_judges_the_rebuilt_wheel_it_would_reinstall(tmp_path: Path) -> None:
    """The reinstall side: owner 1.0, installed from a wheelhouse through uv's cache, is
    damaged, and the wheelhouse's owner 1.0 rebuilt with other bytes: the repair is refused
    as another build, not passed on the build uv cached."""
    venv, _outside, env = _venv(tmp_path)
    house = tmp_path / "house"
    for old in house.glob("owner-*.whl"):
        old.unlink()
    make_wheel(house, "owner", "1.0", {"owner/__init__.py": b"", "shared/data.txt": b"other\n"})
    (site_dir(venv) / "owner" / "__init__.py").unlink()
    before = fingerprint(venv)
    for mode in ("--dry-run", "--yes"):
        proc = cudafix(
            "repair",
            "--venv",
            venv,
            "--offline",
            "--find-links",
            house,
            mode,
            "--no-probe",
            env=env,
        )
        assert proc.returncode == 3, proc.stdout + proc.stderr
        assert "Verdict: REFUSED" in proc.stdout
        assert "shared/data.txt" in proc.stdout
    assert diff_fingerprints(before, fingerprint(venv)) == []
