"""Read many files at once: a first reading waits on the disk for each, one after another.

A first ``doctor`` on a GPU venv opens every ELF object (its headers and ``.rodata``: a few
hundred, GBs of libraries) and every Python source (thousands), most of them not yet in the
page cache after a boot or a fresh install. Read one at a time, each read waits for the
disk alone; handed to a few threads, their reads are in flight together (``os.pread``
releases the GIL) and the disk serves them in parallel. A warm reading reads nothing here:
the index of facts answers for every file whose stat key did not move.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")

ALONE_BELOW = 32
"""Fewer files than this are read in this thread: starting threads would cost more than
the reads (a reading after one wheel changed reads a handful)."""
TASK = 16
"""Paths read by one task: small enough that an interruption waits for few, large enough
that 5k small sources cost a few hundred tasks, not 5k."""
MAX_THREADS = 8
"""Reads in flight at most: enough to keep an SSD's queue busy, few enough that the
parsing between reads (which holds the GIL) does not thrash."""


def read_each(read: Callable[[str], T], paths: Sequence[str]) -> list[T]:
    """``[read(path) for path in paths]``, in that order, several at once where there are
    many. ``read`` must be safe to call from several threads (open, read, close: no state
    shared). The paths go out in tasks of :data:`TASK` (the big libraries of one wheel sit
    side by side: whichever thread is free takes the next task, so none waits on another's
    share), and an interruption (Ctrl-C) waits only for the tasks already running. Where no
    thread can be started, every path is read in this thread: slower, never an error."""
    if len(paths) < ALONE_BELOW:
        return [read(path) for path in paths]
    from concurrent.futures import ThreadPoolExecutor  # a cold reading's cost alone

    threads = max(1, min(MAX_THREADS, (os.cpu_count() or 1) * 2, len(paths) // ALONE_BELOW))
    tasks = [paths[at : at + TASK] for at in range(0, len(paths), TASK)]
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="cudafix-read")
    try:
        done = list(pool.map(lambda task: [read(path) for path in task], tasks))
    except RuntimeError:  # no thread to be had (a container's pid limit): read them here
        return [read(path) for path in paths]
    finally:
        pool.shutdown(cancel_futures=True)
    return [result for task in done for result in task]
