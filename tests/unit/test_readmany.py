"""Reading many files at once gives what reading them one by one gives, in the same order."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from cudafix.env.readmany import ALONE_BELOW, read_each


def _files(root: Path, count: int) -> list[str]:
    paths = []
    for i in range(count):
        path = root / f"d{i % 7}" / f"f{i}"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(f"{i}\n".encode() * (i % 5 + 1))
        paths.append(str(path))
    return paths


def test_many_files_are_read_by_several_threads_in_the_order_asked(tmp_path: Path) -> None:
    paths = _files(tmp_path, ALONE_BELOW * 9 + 5)  # not a multiple of any thread count
    readers: set[int] = set()

    def read(path: str) -> bytes:
        readers.add(threading.get_ident())
        return Path(path).read_bytes()

    assert read_each(read, paths) == [Path(p).read_bytes() for p in paths]
    assert len(readers) > 1 and threading.get_ident() not in readers


def test_a_few_files_are_read_in_the_callers_thread(tmp_path: Path) -> None:
    paths = _files(tmp_path, ALONE_BELOW - 1)
    readers: set[int] = set()

    def read(path: str) -> int:
        readers.add(threading.get_ident())
        return len(Path(path).read_bytes())

    assert read_each(read, paths) == [Path(p).stat().st_size for p in paths]
    assert readers == {threading.get_ident()}
    assert read_each(read, []) == []


def test_an_interrupted_reading_waits_only_for_the_tasks_running(tmp_path: Path) -> None:
    """What stops the reading (Ctrl-C, a fault) reaches the caller as it was raised, and the
    reads not begun are never made: it does not wait for the whole venv to be read."""
    paths = _files(tmp_path, ALONE_BELOW * 16)
    made: list[str] = []

    def read(path: str) -> bytes:
        if path == paths[0]:
            raise KeyboardInterrupt
        time.sleep(0.002)
        made.append(path)
        return b""

    with pytest.raises(KeyboardInterrupt):
        read_each(read, paths)
    assert len(made) < len(paths) // 2, len(made)


def test_where_no_thread_can_be_started_the_files_are_read_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A container's pid limit refuses new threads: the reading goes on in the caller's."""
    paths = _files(tmp_path, ALONE_BELOW * 4)

    def refused(_self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refused)
    assert read_each(lambda p: Path(p).read_bytes(), paths) == [Path(p).read_bytes() for p in paths]
