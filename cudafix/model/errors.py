"""One error root for everything cudafix reports to a user.

Each error carries a short reference, the message, optional context lines and a hint
with the next command, in the manner of pip's ``DiagnosticPipError``. The CLI renders
them as one clear line (plus context) and exits with the error's code; nothing below
the CLI prints or exits.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the CLI imports errors for --help, which must not pay for pydantic
    from cudafix.model.plan import Target
    from cudafix.model.reasons import Reason


class ExitCode(enum.IntEnum):
    """Documented process exit codes (README, ``--help``)."""

    OK = 0
    FAILURE = 1
    """``doctor`` found problems, or an operation failed (and was rolled back)."""
    USAGE = 2
    """Bad command line or unusable input (no such venv, unreadable RECORD, bad plan file)."""
    REFUSED = 3
    """The plan would break the environment, or its preconditions no longer hold."""
    LOCKED = 4
    """Another run holds the lock, or an unfinished transaction needs ``cudafix recover``, or a
    rollback could not restore every path (each is named)."""


class CudafixError(Exception):
    """Root of every error cudafix shows to a user."""

    reference = "cudafix-error"
    exit_code: int = ExitCode.FAILURE
    json_emitted = False
    """Set once its JSON object was written (so ``--json`` prints exactly one)."""

    def __init__(
        self,
        message: str,
        *,
        context: Sequence[str] = (),
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.context = tuple(context)
        self.hint = hint


class UsageError(CudafixError):
    """The command line asks for something that cannot be done as asked."""

    reference = "usage"
    exit_code = ExitCode.USAGE


class UnmatchedSelector(UsageError):
    """A selector matches no installed distribution; the CLI, which knows the target, adds
    the command that lists what is installed."""


class TargetError(CudafixError):
    """The target environment cannot be found or read."""

    reference = "bad-target"
    exit_code = ExitCode.USAGE


class InputError(CudafixError):
    """A file cudafix was given or must read (RECORD, plan, script) is malformed."""

    reference = "bad-input"
    exit_code = ExitCode.USAGE


class PlanRefused(CudafixError):
    """A plan was simulated and would break the environment."""

    reference = "plan-refused"
    exit_code = ExitCode.REFUSED

    def __init__(
        self,
        message: str,
        *,
        context: Sequence[str] = (),
        hint: str | None = None,
        reasons: Sequence[Reason] = (),
        target: Target | None = None,
    ) -> None:
        super().__init__(message, context=context, hint=hint)
        self.reasons = tuple(reasons)
        """Why the plan was refused, as the plan's typed records (the CLI words them)."""
        self.target = target
        """The environment the plan was made for: the reasons' paths are shown relative to it."""


class StalePlan(CudafixError):
    """A saved plan's preconditions do not match the environment any more."""

    reference = "stale-plan"
    exit_code = ExitCode.REFUSED


class LockedError(CudafixError):
    """Another run holds the environment, or a transaction is unfinished."""

    reference = "locked"
    exit_code = ExitCode.LOCKED


class BackendError(CudafixError):
    """uv or pip failed outside a transaction (building a scenario or demo venv)."""

    reference = "backend-failed"


class TransactionFailed(CudafixError):
    """A transaction failed and was rolled back (or could not be)."""

    reference = "transaction-failed"


class CommandFailed(TransactionFailed):
    """The command ``run`` wrapped failed (what it changed was rolled back): ``run`` exits
    with the command's own status, as ``uv run`` does."""

    reference = "command-failed"

    def __init__(
        self, message: str, *, status: int, context: Sequence[str] = (), hint: str | None = None
    ) -> None:
        super().__init__(message, context=context, hint=hint)
        self.exit_code = status


class RollbackIncomplete(TransactionFailed):
    """A transaction failed and its rollback did not finish: ``cudafix recover`` must run."""

    reference = "rollback-incomplete"
    exit_code = ExitCode.LOCKED


class UnsafeState(TargetError):
    """cudafix's state directory is a symlink, not a directory, or cannot be created."""

    reference = "unsafe-state"


class DamagedState(CudafixError):
    """A transaction's journal or manifest is unreadable: nothing is acted on from it."""

    reference = "damaged-state"
    exit_code = ExitCode.LOCKED


class EnvironmentFault(CudafixError):
    """The machine failed an operation (no space, read-only, permission): not a cudafix bug."""

    reference = "os-error"
