"""Threads served by workers: submitting, continuing through the queue, and the job a
worker runs for a thread.

A thread submitted to workers (``mode = 'worker'``) is never advanced by the caller: starting
it, answering it (approve, reject, signal, resume, retry) and cancelling it put a command in
the thread's inbox (``longtask_inbox``) and queue a wake-up job for it in procrastinate, with
``lock=thread_id`` (never two jobs of one thread at once) and ``queueing_lock=thread_id`` (at
most one waiting wake-up: the inbox keeps every command, so nothing is lost when a wake-up
is already queued). Deadlines and retry waits are wake-ups scheduled for later.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from langgraph.types import Command

from longtask.errors import InvalidInput, WorkersNeedPostgres
from longtask.steps._tracing import remote_parent, trace_carrier

if TYPE_CHECKING:
    from longtask.checkpointers import Database
    from longtask.store import ThreadRecord

log = logging.getLogger("longtask.workers")

#: the procrastinate task every wake-up job runs
JOB_TASK = "longtask.advance"
#: the task of a wake-up scheduled for later (it queues a JOB_TASK when due)
WAKE_TASK = "longtask.wake"
DEFAULT_QUEUE = "longtask"


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


_NEED_POSTGRES = (
    "workers share threads through PostgreSQL; use --db postgresql://... (or "
    "$LONGTASK_DB) for `longtask submit` and `longtask worker`"
)


def require_postgres(url: str | None) -> None:
    """Refuse a database URL (else ``$LONGTASK_DB``, else the default) that is not
    PostgreSQL, before anything opens it: opening an SQLite URL would create its file."""
    from longtask.checkpointers._url import parse_url, resolve_url

    if parse_url(resolve_url(url)).scheme != "postgresql":
        raise WorkersNeedPostgres(_NEED_POSTGRES)


def make_app(db: Database) -> Any:
    """A procrastinate App on the thread database (PostgreSQL only)."""
    import procrastinate

    if db.url.scheme != "postgresql":
        raise WorkersNeedPostgres(_NEED_POSTGRES)
    return procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=db.url.raw))


def encode_command(command: Command[Any] | None) -> dict[str, Any] | None:
    if command is None:
        return None
    goto: Any = command.goto
    if goto and not isinstance(goto, str):
        # step names only: a Send cannot cross the queue (and callers never queue one)
        goto = [g for g in goto if isinstance(g, str)]
    return {"resume": command.resume, "update": command.update, "goto": goto or None}


def decode_command(data: Mapping[str, Any] | None) -> Command[Any] | None:
    if not data:
        return None
    return Command(
        resume=data.get("resume"), update=data.get("update"), goto=data.get("goto") or ()
    )


class Queue:
    """The job queue of threads served by workers (procrastinate, in the same PostgreSQL),
    and the lease that fences every writer of a thread. ``worker`` is set in a worker's
    runner: it advances worker threads itself instead of queueing their continuations."""

    def __init__(self, db: Database, worker: str | None) -> None:
        self.db = db
        self.worker = worker
        self._app: Any = None

    def _queue(self) -> Any:
        if self._app is None:
            self._app = make_app(self.db)
            self._app.open()
        return self._app

    def served_by_workers(self, rec: ThreadRecord) -> bool:
        """Whether this runner must hand ``rec``'s continuation to the queue."""
        return self.worker is None and rec.mode == "worker"

    def mark(self, rec: ThreadRecord) -> str | None:
        """For a thread this runner queues for workers, the mark to take before a command
        is checked against its state and to give ``enqueue`` (None for any other thread)."""
        return self.db.store.inbox_mark(rec.thread_id) if self.served_by_workers(rec) else None

    def enqueue(self, thread_id: str, command: dict[str, Any], *, seen: str | None = None) -> None:
        """Put a continuation in the thread's inbox and wake a worker for it. With ``seen``
        (``mark``, taken before the command was checked): refused (InvalidInput, nothing
        queued) if the thread's state or inbox changed since, as the check may no longer
        hold: a command accepted here is never voided by a state write made meanwhile."""
        headers = trace_carrier()
        if headers:
            # The worker's run continues the caller's trace (see apply_command).
            command = {**command, "trace": headers}
        if not self.db.store.inbox_put(thread_id, command, seen=seen):
            raise InvalidInput(
                f"the state of thread {thread_id!r} changed while this command was checked "
                "(a state update or another command was recorded): nothing was queued; "
                f"look at the thread again (`longtask status {thread_id}`) and send it "
                "again if it still applies"
            )
        self.wake(thread_id)

    def wake(self, thread_id: str, *, at: float | None = None, queue: str = DEFAULT_QUEUE) -> None:
        """Queue a wake-up job for the thread (now, or at ``at``); a wake-up already waiting
        covers this one."""
        import procrastinate.exceptions

        if at is not None:
            # A later wake-up is a lock-free job that queues the real one when due: a job
            # holding the thread's lock would block every job of the thread until then.
            task, options = (
                WAKE_TASK,
                {
                    "queueing_lock": f"{thread_id}@{int(at)}",
                    "schedule_at": datetime.fromtimestamp(at, UTC),
                    "queue": queue,
                },
            )
        else:
            task, options = (
                JOB_TASK,
                {"lock": thread_id, "queueing_lock": thread_id, "queue": queue},
            )
        try:
            self._queue().configure_task(task, **options).defer(thread_id=thread_id)
        except procrastinate.exceptions.AlreadyEnqueued:
            log.debug("a wake-up of %s is already queued", thread_id)

    def close(self) -> None:
        if self._app is not None:
            with contextlib.suppress(Exception):
                self._app.close()
            self._app = None

    @contextlib.contextmanager
    def lease(self, thread_id: str, holder: str | None = None) -> Iterator[int]:
        """Hold the thread (as this worker, or as ``holder``): a new lease epoch, checked by
        every checkpoint and ledger write while it is held."""
        epoch = self.db.store.lease_take(thread_id, holder or self.worker or "?")
        self.db.fence.hold(thread_id, epoch)
        try:
            yield epoch
        finally:
            self.db.fence.drop(thread_id)
            with contextlib.suppress(Exception):
                self.db.store.lease_release(thread_id, epoch)

    @contextlib.contextmanager
    def hold(self, thread_id: str) -> Iterator[int]:
        """A single process's hold on a thread: its writer lock, and a lease epoch."""
        with self.db.lock(thread_id), self.lease(thread_id, f"process:{worker_name()}") as epoch:
            yield epoch


class ThreadServer(Protocol):
    """What a worker's job needs of the Runner that serves the thread."""

    @property
    def db(self) -> Database: ...

    def tick(self, limit: int = ..., *, thread_id: str | None = ...) -> Any: ...

    def resume(
        self,
        thread_id: str,
        command: Command[Any] | None = ...,
        *,
        allow_changed_definition: bool = ...,
        expect_interrupt: str | None = ...,
        skip_pending: bool = ...,
        by: str | None = ...,
    ) -> str: ...

    def cancel(self, thread_id: str, *, reason: str | None = ..., by: str | None = ...) -> bool: ...

    def wake(self, thread_id: str, *, at: float | None = ..., queue: str = ...) -> None: ...

    def subtask_ended(self, thread_id: str) -> None: ...


def apply_command(runner: ThreadServer, thread_id: str, command: Mapping[str, Any]) -> None:
    """Carry out a continuation a caller queued for a worker thread (worker side)."""
    kind = command.get("kind")
    if kind == "resume":
        with remote_parent(command.get("trace")):
            runner.resume(
                thread_id,
                decode_command(command.get("command")),
                allow_changed_definition=bool(command.get("allow_changed_definition")),
                expect_interrupt=command.get("expect_interrupt"),
                skip_pending=bool(command.get("skip_pending")),
                by=command.get("by"),
            )
    elif kind == "cancel":
        runner.cancel(thread_id, reason=command.get("reason"), by=command.get("by"))
    else:
        raise InvalidInput(f"unknown queued command {kind!r}")


def serve_thread(runner: ThreadServer, thread_id: str) -> str:
    """The job a worker runs for a thread: apply its inbox in order (or just continue it),
    then schedule what it waits for (a deadline, a retry). Returns what happened."""
    from longtask.errors import NothingToResume

    store = runner.db.store
    rec = store.get_thread(thread_id)
    if rec is None:
        return "unknown thread"
    if rec.status in ("completed", "failed", "cancelled"):
        # A child's end wakes its parent, again if this job is run again because the
        # worker that ran it died after the end committed (see runtime._subtasks).
        runner.subtask_ended(thread_id)
    runner.tick(thread_id=thread_id)  # deadlines that are due (they resume the thread)
    entries = store.inbox_peek(thread_id)
    if not entries and rec.status in ("completed", "cancelled"):
        return "nothing to do"
    for entry_id, command in entries:
        try:
            apply_command(runner, thread_id, command)
        except (NothingToResume, InvalidInput) as exc:
            # Answered twice, or no longer waiting: the command has nothing left to do.
            log.info("command for %s not applied: %s", thread_id, exc)
        store.inbox_done(entry_id)
    if not entries:
        runner.resume(thread_id)
    # What it waits for next, as scheduled wake-ups: nothing sleeps in a worker.
    for _step, due in store.timers_of(thread_id):
        runner.wake(thread_id, at=due)
    rec = store.get_thread(thread_id)
    for w in (rec.waiting or []) if rec else []:
        if w.get("kind") == "retry" and w.get("at"):
            runner.wake(thread_id, at=float(w["at"]))
    return "continued"
