"""Every process cudafix starts goes through here, waited for or not.

uv, pip, the target interpreter, the command ``cudafix run`` wraps, and the deletion of old
snapshots that outlives cudafix (``spawn_detached``).

``run`` logs the command and captures its output, so the transaction journal can record
exactly what was run and what it said (pypa/build's ``run_subprocess``). ``run_live`` is
for a user's command: its output is shown as it comes (a terminal gets a terminal, so uv
draws its progress bars), only a bounded tail is kept, and the command lives in its own
process group that dies with cudafix, ends with the command, and ends at ``timeout``.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import logging
import os
import pty
import select
import shutil
import signal
import subprocess
import sys
import termios
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from cudafix.process import reap

log = logging.getLogger("cudafix.process")

TAIL_BYTES = 64 * 1024
"""How much of each stream of a live command is kept (for the journal and the error)."""
GRACE = 2.0
"""Seconds a stopped command's process group gets between SIGTERM and SIGKILL."""
_POLL = 0.05
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class Completed:
    """A finished process: what ran and what it said (for ``run_live``, the tail of it)."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool = False


Env = Mapping[str, str | None]
"""Variables to set over cudafix's own environment for a process (None: unset it)."""


def activated(prefix: Path, last: Sequence[str] = ()) -> dict[str, str | None]:
    """Variables that make a command act on the environment at ``prefix`` as if activated,
    as ``uv run`` does: ``VIRTUAL_ENV``, its ``bin/`` first on ``PATH``, ``PYTHONHOME``
    unset (it would point the environment's interpreter at another standard library);
    ``last``: directories after the rest of ``PATH`` (found only where nothing before them
    has the name)."""
    path = os.pathsep.join([str(prefix / "bin"), os.environ.get("PATH", ""), *last])
    return {"VIRTUAL_ENV": str(prefix), "PATH": path, "PYTHONHOME": None}


def merged_env(env: Env | None) -> dict[str, str] | None:
    """cudafix's own environment with ``env`` over it (None values removed); None: as is."""
    if env is None:
        return None
    out = {**os.environ, **env}
    return {k: v for k, v in out.items() if v is not None}


def resolve_command(word: str, env: Env) -> str | None:
    """The file ``word`` (a command's first word) runs under ``env``, as ``execvp`` finds it
    (on ``env``'s ``PATH`` unless it names a path); None when nothing is found."""
    if "/" in word:
        return word
    path = env.get("PATH", os.environ.get("PATH"))
    return shutil.which(word, path=path)


def _die_with_parent() -> None:  # runs in the child between fork and exec
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _own_group() -> None:  # runs in the child between fork and exec
    os.setpgid(0, 0)


_detached: set[int] = set()
"""Pids :func:`spawn_detached` started: not orphans of a command (:func:`stop_everything`)."""


def spawn_detached(code: str, fd: int) -> int:
    """Start Python ``code`` with ``fd`` (its number is ``sys.argv[1]``) in a session of its
    own, and do not wait for it: work that must not hold the user's prompt.

    It holds none of cudafix's streams (``/dev/null`` for all three), so a pipe reading
    cudafix's output ends when cudafix does. Returns its pid; it is not reaped here.
    """
    inherited = os.dup(fd)
    try:
        os.set_inheritable(inherited, True)
        argv = [sys.executable, "-I", "-S", "-c", code, str(inherited)]
        null = [(os.POSIX_SPAWN_OPEN, n, os.devnull, os.O_RDWR, 0) for n in (0, 1, 2)]
        pid = os.posix_spawn(sys.executable, argv, os.environ, file_actions=null, setsid=True)
    finally:
        os.close(inherited)
    log.debug("spawned detached process %d", pid)
    _detached.add(pid)
    return pid


def run(
    argv: Sequence[str | Path],
    *,
    env: Env | None = None,
    timeout: float | None = None,
    cwd: Path | None = None,
    stdin: str | None = None,
) -> Completed:
    """Run ``argv`` to completion and capture its output; never raise on a non-zero exit.

    A timeout kills the process and reports ``timed_out`` rather than raising, so callers
    (probes, the backend) decide what a hang means. The process is killed if cudafix dies.
    ``stdin``: text the process reads (data too large for its argv: one argument may hold
    128 KiB at most); else it reads nothing.
    """
    args = tuple(str(a) for a in argv)
    log.debug("run: %s", " ".join(args))
    merged = merged_env(env)
    try:
        proc = subprocess.run(
            args,
            env=merged,
            cwd=cwd,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            check=False,
            **({"input": stdin} if stdin is not None else {"stdin": subprocess.DEVNULL}),
            preexec_fn=_die_with_parent,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else ""
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
        return Completed(args, -9, out, err, timed_out=True)
    except OSError as exc:
        return Completed(args, 127, "", f"{args[0]}: {exc.strerror}")
    return Completed(args, proc.returncode, proc.stdout, proc.stderr)


# -- live commands -------------------------------------------------------------------------

_WRAPPER = r"""
import ctypes, os, signal, sys, time
parent, cell, argv = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
me, group = os.getpid(), os.getpgrp()
def others():
    kids, mine = {}, []
    for d in os.listdir("/proc"):
        try:
            st = open(f"/proc/{d}/stat").read()
            f = st[st.rindex(")") + 2 :].split()
            kids.setdefault(int(f[1]), []).append(int(d))
            if int(d) != me and f[0] != "Z" and int(f[2]) == group:
                mine.append(int(d))
        except (OSError, ValueError, IndexError):
            pass
    todo = [me]
    while todo:
        for p in kids.get(todo.pop(), []):
            mine.append(p)
            todo.append(p)
    return [p for p in set(mine) if p != me]
def stop(*_):
    if cell:
        try:
            with open(cell + "/cgroup.kill", "w") as fh:
                fh.write("1")
        except OSError:
            pass
    for _ in range(200):
        left = others()
        if not left:
            break
        for p in left:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass
        time.sleep(0.005)
    os.killpg(0, signal.SIGKILL)
signal.signal(signal.SIGTERM, stop)
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(1, signal.SIGTERM)
libc.prctl(36, 1)
if os.getppid() != parent:
    stop()
pid = os.fork()
if pid == 0:
    for s in (signal.SIGTERM, signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(s, signal.SIG_DFL)
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        os.write(2, f"{argv[0]}: {exc.strerror}\n".encode())
    os._exit(127)
while True:
    try:
        _, status = os.waitpid(pid, 0)
        break
    except ChildProcessError:
        os._exit(127)
    except InterruptedError:
        pass
code = os.waitstatus_to_exitcode(status)
if code < 0:
    signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
os._exit(code)
"""
"""The command's parent: it dies (killing the group) when cudafix dies, even by SIGKILL
(``PR_SET_PDEATHSIG`` reaches only a direct child, not the command's own children). It is
the subreaper of what the command starts, so a process that left the group (``setsid``,
or joined cudafix's own) and lost its parent is its child; dying, it kills its cell
(``cgroup.kill``, when it has one) and every process below it, then its group."""


class _Tail:
    """The last ``limit`` bytes of a stream, and how many came before them."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        self.data += chunk
        if len(self.data) > 2 * self.limit:
            cut = len(self.data) - self.limit
            self.dropped += cut
            del self.data[:cut]

    def text(self) -> str:
        extra = len(self.data) - self.limit
        if extra > 0:
            self.dropped += extra
            del self.data[:extra]
        body = bytes(self.data).replace(b"\r\n", b"\n").decode(errors="replace")
        return f"[{self.dropped} earlier bytes not kept]\n{body}" if self.dropped else body


class EchoFilter(Protocol):
    """What a live command's output goes through on its way to the echo (not to the tail)."""

    def feed(self, data: bytes) -> bytes:
        """What to show of ``data``, the next bytes the command wrote."""
        ...

    def end(self) -> bytes:
        """What is still to show once the command wrote its last byte."""
        ...


@dataclass
class _Channel:
    """One output stream of the command: what it writes to, what we read, where it goes."""

    child: int
    parent: int
    echo: int
    tail: _Tail
    shown: EchoFilter | None = None

    def show(self, chunk: bytes) -> None:
        """Copy ``chunk`` to the echo (through ``shown``); ``b""``: the stream ended."""
        if self.shown is None:
            _write_all(self.echo, chunk)
        elif chunk:
            _write_all(self.echo, self.shown.feed(chunk))
        else:
            _write_all(self.echo, self.shown.end())


def _channel(echo: int, limit: int) -> _Channel:
    """A pty when ``echo`` is a terminal (the command sees one, with its size), else a pipe."""
    if os.isatty(echo):
        parent, child = pty.openpty()
        with contextlib.suppress(OSError):
            size = fcntl.ioctl(echo, termios.TIOCGWINSZ, b"\0" * 8)
            fcntl.ioctl(child, termios.TIOCSWINSZ, size)
    else:
        parent, child = os.pipe()
    os.set_inheritable(child, False)
    return _Channel(child, parent, echo, _Tail(limit))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    with contextlib.suppress(OSError):  # a closed terminal must not stop the command
        while view:
            view = view[os.write(fd, view) :]


def _pump(channels: list[_Channel], wait: float) -> None:
    """Copy what is ready from each channel to its echo and tail; drop channels at EOF.
    ``channels`` is never empty: once all are closed, :func:`_wait` waits on the process."""
    poller = select.poll()  # not select(): a held snapshot puts pipes above fd 1024
    for c in channels:
        poller.register(c.parent, select.POLLIN)
    ready = {fd for fd, _ in poller.poll(int(wait * 1000))}
    for c in [c for c in channels if c.parent in ready]:
        try:
            chunk = os.read(c.parent, 65536)
        except OSError as exc:  # EIO: a pty whose every writer closed
            if exc.errno != errno.EIO:
                raise
            chunk = b""
        if not chunk:
            channels.remove(c)
            c.show(b"")
            continue
        c.show(chunk)
        c.tail.add(chunk)


def stop_group(proc: subprocess.Popen[bytes], grace: float = GRACE) -> None:
    """SIGTERM the process group ``proc`` leads, SIGKILL what is left after ``grace`` s."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            proc.poll()  # reap the leader
            if not group_members(proc.pid):  # zombies are not counted (nobody may reap them)
                return
            time.sleep(_POLL)
        os.killpg(proc.pid, signal.SIGKILL)


def group_members(pgid: int) -> list[tuple[int, str]]:
    """Live processes of process group ``pgid`` (pid, command line), read from ``/proc``."""
    found = []
    for pid, state, _ppid, group in _processes():
        if state != "Z" and group == pgid:
            with contextlib.suppress(OSError):
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                found.append((pid, cmd.decode(errors="replace").strip()))
    return found


def _processes() -> Iterator[tuple[int, str, int, int]]:
    """(pid, state, parent pid, process group) of every process, from ``/proc/PID/stat``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            yield int(entry.name), fields[0], int(fields[1]), int(fields[2])


@contextlib.contextmanager
def _spawned(
    args: tuple[str, ...],
    channels: list[_Channel],
    env: Env | None,
    cwd: Path | None,
) -> Iterator[subprocess.Popen[bytes]]:
    """The wrapped command in its own process group, and in a cgroup of its own where the
    host offers one; on leaving, the group is stopped, then every process the command
    started, whatever group or session it moved to (:mod:`cudafix.process.reap`)."""
    reap.become_subreaper()
    before = reap.identities(os.getpid())
    cell = reap.open_cell()
    wrapper = [sys.executable, "-I", "-S", "-c", _WRAPPER, str(os.getpid())]
    wrapper += [str(cell.path) if cell else "", *args]

    def setup() -> None:  # runs in the child between fork and exec
        _own_group()
        if cell is not None:
            with contextlib.suppress(OSError):  # checked below: the tree is used instead
                cell.join()

    try:
        proc = subprocess.Popen(
            wrapper,
            stdin=subprocess.DEVNULL,
            stdout=channels[0].child,
            stderr=channels[1].child,
            env=merged_env(env),
            cwd=cwd,
            preexec_fn=setup,
        )
    except BaseException:
        if cell is not None:
            cell.remove()
        raise
    if cell is not None and proc.pid not in cell.pids():
        cell.remove()
        cell = None
    try:
        yield proc
    finally:
        stop_group(proc, grace=GRACE if proc.poll() is None else 0.0)
        stop_everything(proc, cell, before)


def stop_everything(
    proc: subprocess.Popen[bytes], cell: reap.Cell | None, before: frozenset[reap.Identity]
) -> None:
    """Stop what is left of the command: its cell at once, then whatever the process tree
    still holds below this process (the subreaper), but work it started on purpose
    (:func:`spawn_detached`)."""
    if cell is not None:
        if not cell.kill():
            log.warning("processes of the command outlived cgroup.kill: %s", cell.pids())
        cell.remove()
    proc.wait()
    left = reap.stop_descendants(before, skip=_detached)
    if left:
        log.warning("processes of the command could not be stopped: %s", left)


def run_live(
    argv: Sequence[str | Path],
    *,
    env: Env | None = None,
    timeout: float | None = None,
    cwd: Path | None = None,
    echo: tuple[int, int] = (1, 2),
    on_start: Callable[[int], None] | None = None,
    watch: Callable[[], None] | None = None,
    tail: int = TAIL_BYTES,
    shown: Callable[[], EchoFilter] | None = None,
) -> Completed:
    """Run a user's command as if it ran alone, its output copied live to ``echo``.

    ``shown`` makes the filter each stream's echo goes through (the tail keeps every byte).
    ``on_start`` gets the command's process group id once it runs (before it can change
    anything worth recording), ``watch`` is called every few milliseconds while it runs.
    Waiting ends when the command itself exits (a daemon it left holding the output does
    not hold cudafix); whatever of its process group is left is then stopped, as it is at
    ``timeout`` or when cudafix itself is interrupted.
    """
    args = tuple(str(a) for a in argv)
    log.debug("run live: %s", " ".join(args))
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    channels = [_channel(echo[0], tail), _channel(echo[1], tail)]
    for c in channels:
        c.shown = shown() if shown is not None else None
    outputs = list(channels)
    try:
        with _spawned(args, channels, env, cwd) as proc:
            for c in channels:
                os.close(c.child)
                c.child = -1  # its number may be another file's from now on
            if on_start is not None:
                on_start(proc.pid)
            timed_out = _wait(proc, channels, timeout, watch)
            code = proc.returncode if not timed_out else -signal.SIGKILL
            for c in channels:  # still open (a daemon holds it): show what was held back
                c.show(b"")
    finally:
        for c in outputs:
            with contextlib.suppress(OSError):
                os.close(c.parent)
            if c.child >= 0:  # the command never started
                with contextlib.suppress(OSError):
                    os.close(c.child)
    return Completed(args, code, outputs[0].tail.text(), outputs[1].tail.text(), timed_out)


def _wait(
    proc: subprocess.Popen[bytes],
    channels: list[_Channel],
    timeout: float | None,
    watch: Callable[[], None] | None,
) -> bool:
    """Copy output until the command exits (then drain what it wrote) or times out."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while proc.poll() is None:
        if deadline is not None and time.monotonic() >= deadline:
            stop_group(proc)
            proc.wait()
            return True
        if channels:
            _pump(channels, _POLL)
        else:  # its output closed: its exit is what is waited for, seen at once
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(_POLL)
        if watch is not None:
            watch()
    if watch is not None:
        watch()  # once more: what happened as the command exited
    for _ in range(64):  # what it wrote before exiting; a daemon's later output is not waited for
        if not channels:
            break
        before = sum(len(c.tail.data) + c.tail.dropped for c in channels)
        _pump(channels, 0.0)
        if sum(len(c.tail.data) + c.tail.dropped for c in channels) == before:
            break
    return False
