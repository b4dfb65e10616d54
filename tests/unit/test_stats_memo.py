"""Within one reading a path is statted once; outside one, every stat is taken afresh."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cudafix.env.memo import stats


def test_one_reading_gives_the_first_stat_again(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"a")
    with stats.one_reading():
        first = stats.lstat(str(path))
        path.write_bytes(b"longer")
        assert stats.lstat(str(path)) == first  # taken before what it vouches for was read
        assert stats.stat(str(path)).st_size == 6  # followed and not: two questions
    assert stats.lstat(str(path)).st_size == 6


def test_a_missing_path_raises_each_time_as_os_would(tmp_path: Path) -> None:
    gone = str(tmp_path / "gone")
    with stats.one_reading():
        for _ in range(2):
            with pytest.raises(FileNotFoundError) as raised:
                stats.lstat(gone)
            assert raised.value.filename == gone
        (tmp_path / "gone").write_bytes(b"")
        with pytest.raises(FileNotFoundError):
            stats.lstat(gone)
    assert stats.lstat(gone).st_size == 0


def test_a_symlink_is_lstatted_and_statted_apart(tmp_path: Path) -> None:
    (tmp_path / "target").write_bytes(b"xyz")
    os.symlink("target", tmp_path / "link")
    with stats.one_reading():
        assert stats.lstat(str(tmp_path / "link")).st_size == len("target")
        assert stats.stat(str(tmp_path / "link")).st_size == 3


def test_a_scanned_entry_is_its_paths_lstat_for_the_rest_of_the_reading(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"a")
    path = str(tmp_path / "f")
    with stats.one_reading():
        (entry,) = os.scandir(tmp_path)
        scanned = stats.entry_lstat(entry)
        (tmp_path / "f").write_bytes(b"longer")
        assert stats.lstat(path) == scanned  # the stamp after asks what the scan saw
        assert stats.lstats([path]) == [scanned]
    with stats.one_reading():
        first = stats.lstat(path)
        (tmp_path / "f").write_bytes(b"")
        (entry,) = os.scandir(tmp_path)
        assert stats.entry_lstat(entry) == first  # the first answer of a reading holds
    (entry,) = os.scandir(tmp_path)
    assert stats.entry_lstat(entry).st_size == 0  # outside a reading: taken afresh
