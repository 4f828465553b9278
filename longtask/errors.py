"""The errors longtask raises. Every one derives from :class:`LongTaskError`.

Messages say what is wrong and how to fix it; an underlying driver error is kept as
``__cause__``. Connection URLs in messages are always redacted.

The floor everything stands on: every room may import it, and it imports no longtask module.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class LongTaskError(Exception):
    """Base class of every error longtask raises on purpose."""

    #: process exit code the CLI uses for this error
    exit_code: int = 1


class DefinitionError(LongTaskError):
    """A LongTask definition is invalid. ``problems`` lists every problem found."""

    def __init__(self, task_name: str, problems: Sequence[str]) -> None:
        self.task_name = task_name
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        n = len(self.problems)
        super().__init__(
            f"LongTask {task_name!r} has {n} definition problem{'s' if n != 1 else ''}:\n{lines}"
        )


class InvalidInput(LongTaskError):
    """A value given by the caller (inputs, a resume value, a CLI argument) is malformed.

    Raised by a step, it fails the step without a retry: the same input fails the same way.
    """

    retryable = False


class BadAnswer(InvalidInput):
    """An answer of a shape the pause it is given to cannot take (a graph's interrupt that
    wants another): refused before the graph sees it, naming the shape it takes. The pause
    stays answerable; nothing is recorded."""


def describe_validation(exc: Exception) -> str:
    """A pydantic ValidationError on one line: ``field: problem; other: problem``."""
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return str(exc)
    parts = []
    for err in errors():
        where = ".".join(str(p) for p in err.get("loc", ())) or "value"
        parts.append(f"{where}: {err.get('msg')}")
    return "; ".join(parts)


class TaskRefError(LongTaskError):
    """A task reference such as ``examples/quickstart.py:task`` cannot be loaded."""


class DatabaseError(LongTaskError):
    """The database cannot be opened or used. The URL in the message is redacted."""


class SchemaVersionError(DatabaseError):
    """The database schema is older (or newer) than this version of longtask expects."""


class ThreadNotFound(LongTaskError):
    def __init__(self, thread_id: str, database: str | None = None) -> None:
        """``database``: the redacted URL of the database searched, named in the message."""
        self.thread_id = thread_id
        where = database or "this database"
        super().__init__(f"no thread {thread_id!r} in {where}; list threads with `longtask ls`")


class ThreadExists(LongTaskError):
    def __init__(self, thread_id: str, status: str | None = None) -> None:
        """``status``: the existing thread's, when known; an ended thread has nothing to
        resume, so the message points at what can be done with it instead."""
        self.thread_id = thread_id
        self.status = status
        how = {
            "completed": f"see its results with `longtask result {thread_id}`",
            "failed": f"run its failed step again with `longtask retry {thread_id}`",
            "cancelled": f"see it with `longtask status {thread_id}`",
        }.get(status or "", f"continue it with `longtask resume {thread_id}`")
        state = f" and is {status}" if status in ("completed", "failed", "cancelled") else ""
        super().__init__(
            f"thread {thread_id!r} already exists{state}; {how}, or choose another --thread"
        )


class ThreadBusy(LongTaskError):
    """Another process is advancing this thread right now (one writer per thread)."""

    def __init__(self, thread_id: str) -> None:
        self.thread_id = thread_id
        super().__init__(
            f"thread {thread_id!r} is being advanced by another process; only one process "
            f"may advance a thread at a time. Wait for it to finish (`longtask status "
            f"{thread_id}`) and try again."
        )


class NothingToResume(LongTaskError):
    def __init__(self, thread_id: str, status: str) -> None:
        self.thread_id = thread_id
        self.status = status
        super().__init__(f"thread {thread_id!r} is {status}; there is nothing to resume")


class TooLateToCancel(NothingToResume):
    """A cancel that came after the thread ended (completed, or cancelled already): it
    changed nothing."""

    def __init__(self, thread_id: str, status: str) -> None:
        LongTaskError.__init__(
            self, f"too late: thread {thread_id!r} is {status} already; the cancel changed nothing"
        )
        self.thread_id = thread_id
        self.status = status


class DefinitionChanged(LongTaskError):
    """The task definition differs from the one the thread started with."""

    def __init__(
        self,
        thread_id: str,
        old_hash: str,
        new_hash: str,
        changes: Sequence[str],
        to_version: str | None = None,
    ):
        import shlex

        self.thread_id = thread_id
        self.old_hash = old_hash
        self.new_hash = new_hash
        self.changes = list(changes)
        lines = "\n".join(f"  - {c}" for c in self.changes)
        thread = shlex.quote(thread_id)
        version = shlex.quote(to_version) if to_version is not None else "VERSION"
        # Every caller that continues a thread (resume, approve, reject, signal, an answer)
        # meets this: name the command that moves the thread, and the escape hatch with the
        # one command that has it (`resume`), not an option the caller may lack.
        super().__init__(
            f"thread {thread_id!r} started with definition {old_hash[:12]}, but the task is "
            f"now {new_hash[:12]}:\n{lines}\n"
            "Continuing it as it is could skip or repeat work. Move the thread to the new "
            "definition, checked and recorded: see the plan with "
            f"`longtask migrate {thread} --to {version} --by NAME --dry-run`, then run it "
            "without --dry-run. Or keep the old definition in the code beside the new one "
            "(versions(new, old)). Or, if the change is safe for this thread, go on "
            f"unchecked with `longtask resume {thread} --allow-changed-definition` (add "
            "--resume JSON to answer its pause; Runner.resume(..., "
            "allow_changed_definition=True)), recorded as a definition.forced event."
        )


class MigrationRefused(LongTaskError):
    """``migrate`` refused to move a thread to another definition; nothing was written.
    ``plan`` is the refused :class:`~longtask.runtime.MigrationPlan` (with ``refusals``)."""

    def __init__(self, plan: Any) -> None:
        self.plan = plan
        self.thread_id = str(plan.thread_id)
        self.refusals = list(plan.refusals)
        lines = "\n".join(f"  - {r}" for r in self.refusals)
        super().__init__(
            f"cannot migrate thread {self.thread_id!r} to version {plan.to_version} "
            f"({str(plan.to_hash)[:12]}); the thread was left as it is:\n{lines}"
        )


class StepFailed(LongTaskError):
    """A step raised; the thread is marked failed and can be resumed."""

    def __init__(self, thread_id: str, step: str, error: str, *, rejected: bool = False) -> None:
        """``rejected``: the step is an approval that was rejected (or timed out), its
        policy is to fail, and the task compensated the failure (nothing goes on from it)."""
        self.thread_id = thread_id
        self.step = step
        self.error = error
        if rejected:
            message = f"{error}; the thread failed and its compensations ran"
        else:
            message = (
                f"step {step!r} failed: {error}\n"
                f"Fix the cause, then continue with `longtask resume {thread_id}` "
                "(finished steps are not run again)."
            )
        super().__init__(message)


class PauseFailed(StepFailed):
    """An approval was rejected, or a pause reached its deadline, and its policy fails the
    thread: ``retry`` asks again (``resume`` would only repeat the outcome)."""

    def __init__(self, thread_id: str, step: str, error: str) -> None:
        LongTaskError.__init__(
            self,
            f"{error}; the thread failed. To ask again (a fresh request), run "
            f"`longtask retry {thread_id} {step}`",
        )
        self.thread_id = thread_id
        self.step = step
        self.error = error


class StepExited(LongTaskError):
    """A step raised ``SystemExit`` (``sys.exit()``) or another BaseException that is not an
    Exception (KeyboardInterrupt aside): the step fails, the process does not end quietly.
    Its error keeps the original's type name (``SystemExit``); the original is ``__cause__``.
    """

    retryable = False

    def __init__(self, exc: BaseException, what: str) -> None:
        self.original = exc
        #: the type name shown for this error (the step's, not this wrapper's)
        self.__longtask_type__ = type(exc).__name__
        if isinstance(exc, SystemExit):
            text = (
                f"sys.exit({exc.code!r}) was called in {what}; a step cannot end the process: "
                "return a value or raise an exception"
            )
        else:
            shown = str(exc)
            text = (
                f"{shown + ' ' if shown else ''}({type(exc).__name__} is a BaseException, not "
                f"an Exception, raised in {what}; raise an Exception to fail a step)"
            )
        super().__init__(text)


class StepTimeout(LongTaskError):
    """A step ran longer than its ``timeout``."""


class ResultNotAvailable(LongTaskError):
    """A step asked for the result of a step that is not one of its dependencies."""


# -- error classes of a step's failure (see longtask.classify) -------------------------------


class Transient(LongTaskError):
    """A passing fault (a dropped connection, a timeout, a 5xx): retried with backoff."""


class RateLimited(Transient):
    """The outside system asked to slow down: retried after ``retry_after`` seconds (the
    server's ``Retry-After``), or with backoff when it named no time."""

    def __init__(self, message: str = "rate limited", retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class PermissionDenied(LongTaskError):
    """Credentials are missing, wrong or not allowed: retrying cannot help, a person must fix
    it. The thread pauses (``waiting_user``); ``longtask retry THREAD`` tries again."""

    retryable = False


class OutcomeUnknown(LongTaskError):
    """A call may or may not have happened (cut off mid-way): reconcile before acting again."""

    retryable = False


# -- a step stopping for a person, or because the thread was cancelled -----------------------


class NeedsPerson(LongTaskError):
    """A step cannot go on until a person acts: the thread pauses (``waiting_user``) with
    ``reason``. ``kind`` is what it waits for.

    longtask's own steps no longer raise it: a budget or deadline reached, a permission
    missing and a fix loop out of rounds pause with LangGraph's ``interrupt()`` (see
    ``longtask.steps._attempts.gate``), which LangGraph's API sees. Raised by a step's own
    code, it still pauses a thread the Runner advances."""

    retryable = False
    exit_code = 3

    def __init__(self, kind: str, reason: str, command: str) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason
        #: the command that continues the thread once the person has acted
        self.command = command


class LimitReached(LongTaskError):
    """The thread's budget or deadline is used up and the task says to fail (``on_limit``)."""

    retryable = False


class SubtaskFailed(LongTaskError):
    """A child thread of a sub-task step failed (or was cancelled) with no attempt left."""

    retryable = False


class Cancelled(LongTaskError):
    """The thread was cancelled: raised where a step would have started, so that the run
    stops at the next step boundary and the Runner runs the compensations."""

    retryable = False


class CompensationFailed(LongTaskError):
    """A step's ``compensate`` raised; the thread stays ``cancelling`` until it succeeds."""

    def __init__(self, thread_id: str, step: str, error: str) -> None:
        self.thread_id = thread_id
        self.step = step
        self.error = error
        super().__init__(
            f"compensation of step {step!r} failed: {error}\nFix the cause, then run "
            f"`longtask cancel {thread_id}` again (finished compensations are not repeated)."
        )


# -- workers -----------------------------------------------------------------------------------


class LeaseLost(LongTaskError):
    """Another process advances this thread now: this one's lease epoch is stale (a worker
    stalled past its heartbeat, or a single process lost its writer lock, e.g. its lock
    connection was closed). Its writes are refused; it stops without touching the thread."""

    retryable = False

    def __init__(self, thread_id: str) -> None:
        self.thread_id = thread_id
        super().__init__(
            f"lease lost: thread {thread_id} is advanced by another process; this process's "
            "writes were refused and it stopped without changing the thread"
        )


class Stopping(LongTaskError):
    """The worker is shutting down: the run stops at this step boundary and the thread is
    handed back to the queue."""

    retryable = False


class RetryLater(LongTaskError):
    """A step waits to retry: on a worker the wait is a scheduled job, not a sleep."""

    retryable = False

    def __init__(self, at: float) -> None:
        self.at = at
        super().__init__(f"retry at {at}")


class WorkersNeedPostgres(LongTaskError):
    """Workers share threads through PostgreSQL; an SQLite database has no queue."""


class MoveRefused(LongTaskError):
    """``longtask import`` (or ``export``) refused: nothing was written."""


class ExportFileInvalid(MoveRefused):
    """The file is not a readable longtask export (corrupt, truncated or something else)."""


class ExportFormatTooNew(MoveRefused):
    """The export was written by a newer longtask, in a format this one cannot read."""


class ImportThreadExists(MoveRefused, ThreadExists):
    """The thread id an import would create is already in the target database."""

    def __init__(self, thread_id: str, database: str, file: str) -> None:
        import shlex

        self.thread_id = thread_id
        file = shlex.quote(file)
        LongTaskError.__init__(
            self,
            f"thread {thread_id!r} already exists in {database}; nothing was imported. Import "
            f"it under another id with `longtask import {file} --as NEW_ID`",
        )


class ScheduleNotFound(LongTaskError):
    """No schedule of that name is registered in the database."""

    def __init__(self, name: str, known: Sequence[str]) -> None:
        self.name = name
        self.known = list(known)
        listing = (
            f"the schedules are {', '.join(map(repr, self.known))}"
            if self.known
            else "no schedule is registered (add one with `longtask schedule add TASKREF`)"
        )
        super().__init__(f"no schedule {name!r}; {listing}")


def connection_error(exc: BaseException) -> BaseException | None:
    """The driver error in ``exc``'s chain if the database connection failed under it
    (PostgreSQL: the server went away or ended the connection, or none could be had in
    time), else None. psycopg is looked up, not imported: the SQLite path never loads it."""
    import sys

    psycopg = sys.modules.get("psycopg")
    if psycopg is None:
        return None
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, psycopg.OperationalError):
            found: BaseException = current
            return found
        current = current.__cause__ or current.__context__
    return None
