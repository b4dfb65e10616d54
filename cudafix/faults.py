"""Test fault hooks: a crash, an injected OSError or a full disk at a named point.

The transaction and staging call these at each point worth breaking; nothing fires unless a
test sets the variables (never set them outside tests). They sit on the lowest floor so that
every layer that has such a point can call them without importing the transaction.

* ``CUDAFIX_TEST_CRASH_AFTER=<step>[@<glob>][:SIGNAL]``: SIGKILL (or send ``SIGNAL``, e.g.
  ``SIGTERM``, ``SIGSTOP``) this process right after ``<step>`` is journaled (or reached, for
  points such as ``snapshot-file``, ``trash-moved`` or ``write-half``), only for a subject
  (a path) matching ``<glob>`` when one is given.
* ``CUDAFIX_TEST_FAIL=<op>[@<glob>]:<ERRNO>[,...]``: raise ``OSError(errno.<ERRNO>)`` at
  operation ``<op>`` (``snapshot``, ``restore``, ``keep``, ``journal``, ``commit``, ``trash``
  (moving a snapshot into the trash), ``write`` (half-way through a state or cache file's
  write)), only for paths or journal events matching ``<glob>`` when one is given, to
  simulate ENOSPC/EPERM.
* ``CUDAFIX_TEST_FILL_AT=<step>:<file>``: at ``<step>``, fill the file system holding
  ``<file>`` by writing it until ENOSPC (a real full disk from then on).
"""

from __future__ import annotations

import errno
import fnmatch
import os
import signal

CRASH_ENV = "CUDAFIX_TEST_CRASH_AFTER"
FAIL_ENV = "CUDAFIX_TEST_FAIL"
FILL_ENV = "CUDAFIX_TEST_FILL_AT"


def hooks_armed() -> bool:
    """Whether any test hook is set: a loop over every file of an environment asks once,
    not once per file."""
    return any(os.environ.get(name) for name in (CRASH_ENV, FAIL_ENV, FILL_ENV))


def crash_point(step: str, subject: str = "") -> None:
    """Test hook: SIGKILL ourselves at ``step`` (for ``subject`` matching the glob) when
    asked to (simulates a power cut)."""
    target, _, how = os.environ.get(CRASH_ENV, "").partition(":")
    want, _, glob = target.partition("@")
    if want == step and (not glob or fnmatch.fnmatchcase(subject, glob)):
        os.kill(os.getpid(), getattr(signal, how or "SIGKILL"))
    _fill_point(step)


def _fill_point(step: str) -> None:
    """Test hook: fill the file system at ``step`` (ENOSPC for every write from then on)."""
    where, _, filler = os.environ.get(FILL_ENV, "").partition(":")
    if where != step or not filler:
        return
    chunk = b"\0" * (1 << 20)
    with open(filler, "ab", buffering=0) as fh:
        for size in (1 << 20, 4096, 1):
            try:
                while True:
                    fh.write(chunk[:size])
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise


def fail_point(op: str, subject: str = "") -> None:
    """Test hook: raise the configured OSError at ``op`` (for ``subject`` matching the glob)."""
    for spec in filter(None, os.environ.get(FAIL_ENV, "").split(",")):
        target, _, code = spec.rpartition(":")
        name, _, glob = target.partition("@")
        if name == op and code and (not glob or fnmatch.fnmatchcase(subject, glob)):
            num = getattr(errno, code)
            raise OSError(num, f"{os.strerror(num)} (injected at {op})", subject or None)
