"""A read-only command's last answers, given again while nothing they were read from changed.

A warm ``doctor`` or dry run of an unchanged environment prints what it printed last time.
Computing it again costs the imports, the walk and the resolution (0.7 s on a torch venv);
showing that nothing changed costs an ``lstat`` of what the answer was read from
(:class:`ReadSet`): every directory the walk listed (adding, removing or renaming a file
moves its directory's ctime), every file the tree cache watches (libraries, executables,
dist-info files, ELF objects: what an in-place write could change, see
:mod:`cudafix.env.memo.treecache`), and the host files and directories the loader consulted.
Each is compared on (inode, mode, size, mtime, ctime); no write from user space leaves
ctime alone.

``cudafix run --`` uses the same stamp to see whether the command changed anything the
diagnosis reads (:func:`settled_stamp` before it, :func:`stamp` after), and judges its
command against doctor's findings, remembered here beside doctor's answer, while nothing
they were read from changed but ctimes (``ctimes=False``; :func:`recall` gives what they
were read from too).

An answer is remembered only when none of those changed within ``RACY_NS`` before its
command started, so a change made while it ran can never hide behind the stamp taken
after. The file is plain JSON in ``.cudafix/cache/``; a missing, foreign or corrupt one is
a cold start, never an error.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
import time
from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from stat import S_ISDIR
from typing import Any

from cudafix import __version__
from cudafix.env.memo import stats
from cudafix.env.memo.stats import RACY_NS
from cudafix.env.statedir import (
    STATE_DIR_NAME,
    TOOLS_STATE,
    TRANSACTIONS,
    StateDir,
    load_cache,
    save_cache,
)

FORMAT = "cudafix-answers"
VERSION = 1
KEPT = 16
"""Answers kept per environment state (one per command line and output style)."""
MAX_KEPT_CHARS = 1 << 20
"""The longest answer kept. Every command that may be answered again reads the file of
answers whole, so one ``doctor --json`` naming 300k missing files (42 MB) would make each
later ``doctor -q`` parse it: 0.15 s and 100 MB more there, ten times that at 3M. Only the
one who asks that question again pays for an answer not kept: it is computed anew."""
ENVIRONMENT_VARIABLES = (
    "LD_LIBRARY_PATH",
    "PATH",
    "VIRTUAL_ENV",
    "UV_PYTHON",
    "UV_DEFAULT_INDEX",
    "UV_INDEX_URL",
    "UV_EXTRA_INDEX_URL",
    "NO_COLOR",
    "CUDAFIX_RUNTIME_TABLE",
)
"""What a read-only command reads of its environment variables (the target, the loader's
search, the index, colour); each is part of the question."""
_INODE_MASK = 2**63 - 1


@dataclass(frozen=True)
class Answer:
    """What the command printed on stdout, and its exit code."""

    out: str
    code: int


@dataclass(frozen=True)
class ReadSet:
    """What an answer was read from."""

    env: tuple[str, ...]
    """Paths relative to the prefix (directories and watched files), never followed."""
    host: tuple[str, ...]
    """Absolute paths outside it (system libraries, their directories, ``ld.so.cache``)."""


TICK_NS = 20_000_000
"""More than one tick of the clock file timestamps come from (the kernel's coarse clock)."""


@dataclass(frozen=True)
class Recalled:
    """A remembered answer, and what it was read from (still as it was)."""

    answer: Answer
    read: ReadSet


@dataclass(frozen=True)
class _Stamp:
    digest: str
    newest_ns: int
    """The latest ctime among the paths (the racy check): every change moves ctime to the
    kernel's clock, and no user-space call sets it (mtime can be set anywhere, even ahead)."""
    quiet: str
    """The digest less the ctimes of the environment's paths and less cudafix's own state
    (``.cudafix/``): what an answer that depends on no ctime is compared on."""
    quiet_newest_ns: int
    """The latest of what ``quiet`` holds: the environment's mtimes, the host's ctimes."""
    dirs: tuple[int, ...]
    """Where the read set's environment paths are directories."""
    dirs_digest: tuple[str, str]
    """The digest and its quiet form of those directories alone (:func:`_dirs_hold`)."""


def answer_key(command: Sequence[object], style: Mapping[str, object]) -> str:
    """The key of one answer: the command and its parsed options, how its output is styled,
    and everything outside the environment's files that it depends on (cudafix's own code
    and interpreter, the working directory, the kernel, :data:`ENVIRONMENT_VARIABLES`)."""
    parts = {
        "command": [repr(part) for part in command],
        "style": dict(sorted(style.items())),
        "cwd": str(Path.cwd()),
        "env": {k: os.environ.get(k) for k in ENVIRONMENT_VARIABLES},
        "cudafix": _code_stamp(),
        "python": [sys.executable, sys.prefix, sys.version],
        "host": list(os.uname()),
    }
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def recall(prefix: Path, key: str, *, ctimes: bool = True) -> Recalled | None:
    """The answer remembered for ``key``, if nothing it was read from changed since.

    ``ctimes=False`` for an answer that depends on no ctime of the environment's files:
    doctor's findings, computed through caches keyed without it (its tree, ELF and hash
    caches), hold while only ctimes and cudafix's own state moved, as after a ``run``
    whose snapshot hard-linked every file and whose command changed nothing.

    Only a file this user wrote is trusted: an answer is printed as it was rendered, so
    one planted by another user (who may own the environment) could say anything, escape
    sequences included.
    """
    data = load_cache(StateDir(prefix).answers, FORMAT, VERSION, own=True)
    if data is None:
        return None
    try:
        found = data["answers"].get(key)
        if found is None:
            return None
        read = ReadSet(tuple(data["env"]), tuple(data["host"]))
        dirs = data.get("dirs")
        if dirs is not None and not _dirs_hold(prefix, read, dirs, ctimes=ctimes):
            return None  # a directory moved: the whole stamp differs too
        now = _stamp(prefix, read)
        if (now.digest if ctimes else now.quiet) != data["stamp" if ctimes else "quiet"]:
            return None
        return Recalled(Answer(str(found["out"]), int(found["code"])), read)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError):
        return None


def remember(
    prefix: Path,
    answers: Mapping[str, Answer],
    read: ReadSet,
    *,
    since_ns: int,
    ctimes: bool = True,
) -> bool:
    """Keep each of ``answers`` for its key (False: not kept, e.g. something changed too
    recently; none longer than :data:`MAX_KEPT_CHARS`); answers kept for other keys stay
    while the stamp is the same.

    ``since_ns`` is when the command started: a path changed after ``since_ns - RACY_NS``
    may have changed while the answer was being computed. ``ctimes=False``: ``answers``
    depend on no ctime of the environment's files (:func:`recall`), so a recent ctime
    alone (a hard link just made) does not keep them from being remembered.
    """
    now = _stamp(prefix, read)
    if (now.newest_ns if ctimes else now.quiet_newest_ns) >= since_ns - RACY_NS:
        return False
    return _save(prefix, answers, read, now)


def _save(prefix: Path, answers: Mapping[str, Answer], read: ReadSet, now: _Stamp) -> bool:
    """Write ``answers`` with those kept that still hold: all stamped over one read set, the
    union of theirs and ``read`` (a dry run consults a few host paths a doctor does not;
    keeping only the last question's answer made questions that alternate compute each
    time)."""
    path = StateDir(prefix).answers
    old = load_cache(path, FORMAT, VERSION) or {}
    same = old.get("answers") if old.get("stamp") == now.digest else None
    if same is None and isinstance(old.get("answers"), dict):
        read, now, same = _joined(prefix, old, read, now)
    kept = dict(same) if isinstance(same, dict) else {}
    for key, answer in answers.items():
        kept.pop(key, None)
        if len(answer.out) <= MAX_KEPT_CHARS:
            kept[key] = {"out": answer.out, "code": answer.code}
    body = {
        "env": list(read.env),
        "host": list(read.host),
        "stamp": now.digest,
        "quiet": now.quiet,
        "dirs": {"at": list(now.dirs), "stamp": list(now.dirs_digest)},
        "answers": dict(list(kept.items())[-KEPT:]),
    }
    return save_cache(path, FORMAT, VERSION, body)


def _dirs_hold(prefix: Path, read: ReadSet, dirs: Mapping[str, Any], *, ctimes: bool) -> bool:
    """Whether the directories of a remembered read set are as they were: the same values
    :func:`_stamp` takes of them, so where these differ so does the whole. Installing or
    removing a distribution moves ``site-packages``: a stale answer is told by its 2,000
    directories, not by all 19,000 paths of a torch venv's read set."""
    now = _stamp_now(prefix, ReadSet(tuple(read.env[int(i)] for i in dirs["at"]), ()))
    then = dirs["stamp"]
    return bool(now.digest == then[0]) if ctimes else bool(now.quiet == then[1])


def _joined(
    prefix: Path, old: Mapping[str, Any], read: ReadSet, now: _Stamp
) -> tuple[ReadSet, _Stamp, object]:
    """``read`` joined with the read set of the ``old`` answers, its stamp, and those
    answers, when nothing they were read from changed since (else ``read``, ``now`` and
    none kept). Only the host paths may differ: another list of the environment's paths
    means its tree changed (a listed directory's times moved), so nothing old holds."""
    try:
        theirs = ReadSet(tuple(map(str, old["env"])), tuple(map(str, old["host"])))
        if theirs == read or theirs.env != read.env:  # another tree: its stamp moved
            return read, now, None
        if _stamp(prefix, theirs).digest != old["stamp"]:
            return read, now, None
    except (KeyError, TypeError):
        return read, now, None
    both = ReadSet(
        sorted_unique([*theirs.env, *read.env]), sorted_unique([*theirs.host, *read.host])
    )
    return both, _stamp(prefix, both), old["answers"]


def stamp(prefix: Path, read: ReadSet) -> str:
    """The digest of the stat of every path in ``read``, as they are now."""
    return _stamp(prefix, read).digest


def settled_stamp(prefix: Path, read: ReadSet) -> str:
    """:func:`stamp`, returned only once the clock has moved a tick past the newest change
    it saw: any write after it returns gives its path a later ctime, so a later
    :func:`stamp` differs (a write in the same tick as the last change might not show)."""
    now = _stamp(prefix, read)
    wait = (now.newest_ns + TICK_NS - time.time_ns()) / 1e9
    time.sleep(min(max(wait, 0.0), TICK_NS / 1e9))
    return now.digest


_OWN_STATE = STATE_DIR_NAME + "/"


def _stamp(prefix: Path, read: ReadSet) -> _Stamp:
    """One digest of the stat of every path in ``read``: environment paths by ``lstat``
    (a symlink is compared, never followed), host paths both ways (the loader follows);
    and the same less ctimes (``_Stamp.quiet``). Computed once per reading."""
    return stats.once(("stamp", str(prefix), read), lambda: _stamp_now(prefix, read))


_ABSENT = (-1, -1, -1, -1, -1)
_TRANSACTIONS = f"{STATE_DIR_NAME}/{TRANSACTIONS}"
_PREFIX = "."
"""The prefix, stamped by the names it holds less :data:`TOOLS_STATE`, not by its times:
they move when cudafix's first command makes ``.cudafix/`` in it, or uv's first lock its
``.lock``, neither a change of the environment. Stamped by its times, the first command's
own answer could not be remembered (the prefix changed as it ran), and uv's first lock
would leave every answer stale. Names are exact: no change hides behind a timestamp, so
its times count for no racy check."""


def _prefix_names(prefix: Path) -> int:
    """The names in the prefix, less :data:`TOOLS_STATE`, as one signed 64-bit value; -1
    when it cannot be listed."""
    try:
        names = sorted(set(os.listdir(prefix)) - TOOLS_STATE)  # noqa: PTH208 - names alone
    except OSError:
        return -1
    joined = "\0".join(names).encode(errors="surrogateescape")
    return int.from_bytes(hashlib.blake2b(joined, digest_size=8).digest(), "little", signed=True)


def _stamp_now(prefix: Path, read: ReadSet) -> _Stamp:
    values, quiet = array("q"), array("q")
    dirs: list[int] = []
    dir_values, dir_quiet = array("q"), array("q")  # the same values, of the directories
    newest = quiet_newest = 0
    base = f"{prefix}/"  # a str join, as the walk's: 19k paths on a torch venv
    found = stats.lstats([base + rel for rel in read.env])
    for i, (rel, st) in enumerate(zip(read.env, found, strict=True)):
        if st is None:
            values.extend(_ABSENT)
            if not rel.startswith(_OWN_STATE):
                quiet.extend(_ABSENT[:4])
            continue
        ctime, mtime = st.st_ctime_ns, st.st_mtime_ns
        four = (st.st_ino & _INODE_MASK, st.st_mode, st.st_size, mtime)
        if rel == _PREFIX:
            ctime = mtime = 0
            four = (four[0], four[1], _prefix_names(prefix), 0)
        values.extend(four)
        values.append(ctime)
        if ctime > newest:
            newest = ctime
        own = rel.startswith(_OWN_STATE)
        if not own:
            quiet.extend(four)
            if mtime > quiet_newest:
                quiet_newest = mtime
        if S_ISDIR(st.st_mode):
            dirs.append(i)
            dir_values.extend(four)
            dir_values.append(ctime)
            if not own:
                dir_quiet.extend(four)
    for path in read.host:
        for how in (stats.lstat, stats.stat):
            st5 = _stat(path, how)
            values.extend(st5)
            quiet.extend(st5)
            newest = max(newest, st5[4])
            quiet_newest = max(quiet_newest, st5[4])
    dirs_digest = (_digest(dir_values), _digest(dir_quiet))
    return _Stamp(_digest(values), newest, _digest(quiet), quiet_newest, tuple(dirs), dirs_digest)


def _stat(path: str, how: Callable[[str], os.stat_result]) -> tuple[int, ...]:
    """(inode, mode, size, mtime, ctime); all -1 when there is nothing to stat."""
    try:
        st = how(path)
    except (OSError, ValueError):
        return (-1, -1, -1, -1, -1)
    return (st.st_ino & _INODE_MASK, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _digest(values: array[int]) -> str:
    return hashlib.blake2b(values.tobytes(), digest_size=16).hexdigest()


@functools.cache
def _code_stamp() -> tuple[object, ...]:
    """cudafix's version and the stat of its own modules and data files: an answer given
    by other code (an upgrade, an edited checkout) is not this code's answer. Read once a
    process: one command keys several answers (doctor's every rendering)."""
    root = Path(__file__).resolve().parents[2]
    out: list[object] = [__version__, str(root)]
    for directory, _dirs, files in sorted(os.walk(root)):
        for name in sorted(files):
            if name.endswith((".py", ".toml")):
                st = os.stat(os.path.join(directory, name))  # noqa: PTH116, PTH118
                out.append([name, st.st_size, st.st_mtime_ns])
    return tuple(out)


def sorted_unique(paths: Iterable[str]) -> tuple[str, ...]:
    """``paths`` once each, in a stable order (the stamp is order-sensitive)."""
    return tuple(sorted(set(paths)))


def read_set(tree: Iterable[str], host: Iterable[str]) -> ReadSet:
    """What facts read from an environment depend on: the ``tree`` paths the
    walk listed and watched (``Facts.read_paths``), with ``pyvenv.cfg`` and the transaction
    log (a transaction begun or ended changes what a command says), and the ``host`` paths
    outside it (the interpreter, the files the loader consulted, extra dlopen tables, system
    directories a resolution still to come will list)."""
    env = [*tree, "pyvenv.cfg", _TRANSACTIONS]
    return ReadSet(sorted_unique(env), sorted_unique(host))
