"""A ``cp -al`` copy of an environment shares every file with the original, cudafix's own
state included: reading the copy must write nothing the original holds."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from cudafix.env.statedir import StateDir
from tests.support.cli import cudafix
from tests.support.tx import shared_pair
from tests.support.venvs import settle

pytestmark = pytest.mark.slow


def _key(path: Path) -> tuple[int, int, int, bytes]:
    """Inode, size, mtime and bytes (not ctime: the copy's link leaving moves it)."""
    st = os.lstat(path)
    return (st.st_ino, st.st_size, st.st_mtime_ns, path.read_bytes())


def test_reading_a_hard_linked_copy_leaves_the_originals_index_alone(tmp_path: Path) -> None:
    original, _ = shared_pair(tmp_path)
    settle()
    first = cudafix("doctor", "--venv", original)
    assert first.returncode in (0, 1), first.stderr
    index = StateDir(original).index
    assert index.is_file()
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-al", str(original), str(copy)], check=True)
    assert os.lstat(index).st_nlink == 2  # shared, as cp -al leaves it
    before = _key(index)
    settle()

    again = cudafix("doctor", "--venv", copy)
    assert again.returncode == first.returncode, again.stderr
    assert again.stdout.replace(str(copy), str(original)) == first.stdout
    assert _key(index) == before  # the original's index: not one byte written
    assert os.lstat(StateDir(copy).index).st_nlink == 1  # the copy has its own now
    assert os.lstat(index).st_nlink == 1
