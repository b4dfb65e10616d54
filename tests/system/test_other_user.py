"""Another user who can read an environment root changed: read-only commands work for
them, mutating ones refuse with the documented exit code and one line.

Runs the real CLI as a real unprivileged user (``useradd``, then ``runuser``), with an
interpreter and cudafix's dependencies that user can read; skipped where that is not
possible (not root, no ``runuser``, no readable interpreter of this Python version).
"""

from __future__ import annotations

import os
import pwd
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

import cudafix as cudafix_package
from cudafix.env.memo.index import FactIndex
from cudafix.env.statedir import StateDir
from tests.support.cli import cudafix
from tests.support.venvs import UV, install, settle, uv_env
from tests.support.wheels import make_wheel

pytestmark = pytest.mark.slow
"""Runs the CLI on real venvs: left out of ``make test-fast``."""

USER = "cudafix-reader"
ROOT = Path(cudafix_package.__file__).resolve().parent.parent
SITE = next(p for p in map(Path, sys.path) if p.name == "site-packages" and (p / "click").is_dir())


def _readable_python() -> str | None:
    """An interpreter of this Python version that any user can run (not one under /root)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (f"/usr/bin/{version}", f"/usr/local/bin/{version}", sys.executable):
        path = Path(candidate)
        if path.is_file() and all(os.stat(p).st_mode & 0o005 for p in [path, *path.parents]):
            return str(path)
    return None


@pytest.fixture(scope="module")
def reader() -> str:
    if os.geteuid() != 0 or shutil.which("runuser") is None or shutil.which("useradd") is None:
        pytest.skip("needs root, runuser and useradd to act as another user")
    python = _readable_python()
    if python is None:
        pytest.skip("no interpreter of this Python version that another user can run")
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "-M", "-s", "/bin/sh", USER], check=True)
    return python


@pytest.fixture
def shared_venv(reader: str) -> Iterator[Path]:
    """A venv in a directory every user can read, owned by root, after a root transaction."""
    top = Path(tempfile.mkdtemp(prefix="cudafix-shared-", dir="/tmp"))
    top.chmod(0o755)
    try:
        wheels = top / "wheels"
        make_wheel(wheels, "pa", "1.0", {"pa_mod.py": b"A = 1\n"})
        venv = top / "venv"
        subprocess.run([UV, "venv", "-q", "--python", reader, str(venv)], check=True, env=uv_env())
        install(venv, wheels, "pa==1.0", deps=False)
        done = cudafix("run", "--venv", venv, "--", "sh", "-c", 'echo x > "$VIRTUAL_ENV/mark"')
        assert done.returncode == 0, done.stderr
        yield venv
    finally:
        shutil.rmtree(top, ignore_errors=True)


def _as_reader(python: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return _py_as_reader(
        python, "sys.argv[0] = 'cudafix'; from cudafix.cli.main import main; main()", *args
    )


def _py_as_reader(python: str, code: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    boot = f"import sys; sys.path[:0] = [{str(ROOT)!r}, {str(SITE)!r}]; {code}"
    return subprocess.run(
        ["runuser", "-u", USER, "--", python, "-c", boot, *map(str, args)],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        cwd="/",
        env={"PATH": os.environ.get("PATH", ""), "HOME": "/tmp"},
        timeout=300,
    )


def test_read_only_commands_work_for_another_user(reader: str, shared_venv: Path) -> None:
    txid = cudafix("history", "--venv", shared_venv, "--json").stdout.split('"txid": "')[1][:32]
    for args, code in [
        (["doctor"], 0),
        (["history"], 0),
        (["recover", "--dry-run"], 0),
        (["remove", "pa", "--dry-run", "--no-fetch"], 0),
        (["show", txid], 0),
        (["undo", txid, "--dry-run"], 0),
    ]:
        done = _as_reader(reader, *args, "--venv", shared_venv)
        said = done.stdout + done.stderr
        assert done.returncode == code, (args, said)
        assert "Permission denied" not in said and "Traceback" not in said, (args, said)
    listed = _as_reader(reader, "history", "--venv", shared_venv)
    assert txid[-6:] in listed.stdout
    looked = _as_reader(reader, "undo", txid, "--dry-run", "--venv", shared_venv)
    assert "not checked" in looked.stdout and "user who can write" in looked.stdout


def test_mutating_commands_refuse_another_user_in_one_line(reader: str, shared_venv: Path) -> None:
    txid = cudafix("history", "--venv", shared_venv, "--json").stdout.split('"txid": "')[1][:32]
    for args in (["run", "--", "true"], ["undo", txid, "--yes"], ["remove", "pa", "--yes"]):
        done = _as_reader(reader, *args[:1], "--venv", shared_venv, *args[1:])
        errors = [ln for ln in done.stderr.splitlines() if ln.startswith("error: ")]
        assert done.returncode == 2, (args, done.stderr)
        assert len(errors) == 1 and "Traceback" not in done.stderr, (args, done.stderr)
        assert "as a user who can write" in done.stderr, (args, done.stderr)


def test_another_users_index_is_never_read(reader: str, shared_venv: Path) -> None:
    """root's index of facts is not read by another user (who keeps nothing), and an index
    another user owns is not read by root: it is built again, root's own."""
    settle()  # facts of files written within the racy window are not kept
    assert cudafix("doctor", "--venv", shared_venv).returncode in (0, 1)
    db = StateDir(shared_venv).index
    with FactIndex.open(shared_venv) as index:
        assert index.kept and index.elf_rows()
    probe = (
        "from pathlib import Path; from cudafix.env.memo.index import FactIndex; "
        "index = FactIndex.open(Path(sys.argv[1])); print(index.kept, len(index.elf_rows()))"
    )
    done = _py_as_reader(reader, probe, shared_venv)
    assert done.stdout.split() == ["False", "0"], done.stdout + done.stderr
    assert db.stat().st_uid == os.geteuid()
    with closing(sqlite3.connect(db)) as conn, conn:  # planted: every file "not ELF"
        conn.execute("UPDATE files SET elf_kind = 'plain', elf_body = NULL")
    uid = pwd.getpwnam(USER).pw_uid
    os.chown(db, uid, -1)
    with FactIndex.open(shared_venv) as index:
        assert index.kept and index.elf_rows() == {}
    assert db.stat().st_uid == os.geteuid()
