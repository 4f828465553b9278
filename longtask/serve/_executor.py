"""Runs outside the request: ``serve``'s executor carries out the runs requests recorded.

A request checks its command, records a run (``longtask_api_runs``, status ``pending``) and
returns; a small thread pool with its own Runner takes the run, advances the thread until it
completes, pauses or fails, and records the run's outcome. Nothing a task does runs inside a
request handler, so a request answers at once however long the next step takes.

When ``serve`` starts, runs left open and threads left ``running`` by a process that died
(their writer lock is free) are continued, the way a worker takes over a stalled job.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from langgraph.types import Command

from longtask.errors import (
    CompensationFailed,
    InvalidInput,
    LongTaskError,
    NothingToResume,
    ThreadBusy,
)
from longtask.runtime import logging_parts
from longtask.serve._webhooks import Deliverer, WebhookPolicy
from longtask.serve.lgapi._json import plain
from longtask.serve.lgapi._state import thread_state
from longtask.serve.lgapi.resources._assistant_body import run_context
from longtask.steps import breaking
from longtask.store._apiruns import OPEN_RUN_STATUSES
from longtask.store._parts import END, START

if TYPE_CHECKING:
    from longtask._runner import Runner
    from longtask.model import LongTask
    from longtask.serve._registry import Registry
    from longtask.store import ThreadRecord
    from longtask.store._apiruns import ApiRun

log = logging.getLogger("longtask.serve")

#: run statuses that are final
FINAL_RUN = frozenset({"success", "error", "interrupted", "timeout"})
#: seconds between deletes of stream parts past their time (``longtask.store._parts``)
EXPIRE_EVERY = 60.0
#: how long a run waits for a thread another process holds before it ends in error
BUSY_WAIT = 30.0
#: seconds between looks, when idle, for queued runs whose run ahead another process ended
WAITING_POLL = 1.0
#: longtask thread status after a run -> the run's status
#: (a run that stops at a pause succeeded, as on LangGraph's server: "interrupted" is a
#: run cancelled by request)
RUN_OUTCOME = {
    "completed": "success",
    "waiting_user": "success",
    "waiting_external": "success",
    "pending": "success",
    "failed": "error",
    "cancelled": "interrupted",
    "cancelling": "interrupted",
}


class Executor:
    """Carries out recorded runs on a thread pool of its own."""

    def __init__(
        self,
        runner: Runner,
        registry: Registry,
        *,
        workers: int = 4,
        to_workers: bool = False,
        follow_poll: float = 0.2,
        webhooks: WebhookPolicy | None = None,
    ) -> None:
        from longtask._runner import Runner as RunnerClass

        # Its own Runner on the app's database: runs never share the request side's state.
        self.runner = RunnerClass(runner.db)
        self.registry = registry
        #: start threads served by workers (``longtask worker``, PostgreSQL) instead of here
        self.to_workers = to_workers
        self.follow_poll = follow_poll
        # Daemon threads, not a ThreadPoolExecutor (whose threads the interpreter joins at
        # exit): stopping serve must not wait hours for a step. A run cut off that way is a
        # thread left running with its lock free, which the next start continues.
        self._jobs: queue.Queue[tuple[Any, tuple[Any, ...]] | None] = queue.Queue()
        self._threads = [
            threading.Thread(target=self._work, name=f"longtask-run-{i}", daemon=True)
            for i in range(max(1, workers))
        ]
        for t in self._threads:
            t.start()
        #: notified whenever a run's status changes
        self.changed = threading.Condition()
        #: threads fired by a schedule waiting in the job queue
        self._fired: set[str] = set()
        self._fired_lock = threading.Lock()
        #: runs submitted here (a cron's run another process recorded is adopted once)
        self._submitted: set[str] = set()
        #: plans a queued run when its turn comes (set by the Server API's runs, which
        #: check what a run asks against the thread's state)
        self.planner: Callable[[ApiRun], ApiRun] | None = None
        #: runs submitted while a run of their thread recorded before them was open: each
        #: is submitted again when the run ahead of it ends (see ``end_run``)
        self._waiting: set[str] = set()
        #: when parts past their time were last deleted
        self._expired = float("-inf")
        self._waiting_lock = threading.Lock()
        #: POSTs ended runs to their webhooks, beside the runs; started with the app
        #: (``start``), it first makes the deliveries a previous serve left owed
        self.webhooks = Deliverer(self.runner.db.store, self._values, webhooks)

    def close(self) -> None:
        self.webhooks.close()
        for _ in self._threads:
            self._jobs.put(None)

    def _work(self) -> None:
        while True:
            try:
                job = self._jobs.get(timeout=WAITING_POLL)
            except queue.Empty:
                # A run ahead may have been ended by another process sharing the database.
                self._submit_waiting(None)
                continue
            if job is None:
                return
            fn, args = job
            try:
                fn(*args)
            except Exception:
                log.exception("a run of serve's executor failed")

    def task_for(self, rec: ThreadRecord) -> LongTask:
        entry = self.registry.find(rec.task_name)
        return entry.for_thread(rec) if entry is not None else self.runner.engine.load(rec)

    # -- submitting ------------------------------------------------------------------------

    def submit(self, run_id: str) -> None:
        with self._fired_lock:
            self._submitted.add(run_id)
        self._jobs.put((self._execute, (run_id,)))

    def adopt_cron_runs(self) -> list[str]:
        """Submit the pending runs crons recorded in another process (a worker or
        ``longtask tick`` fired the tick), once each; returns their ids. Two serves may
        both submit one: the claim (pending -> running) lets one carry it out."""
        open_runs = self.runner.db.store.api_runs_open()
        found = [
            run.run_id
            for run in open_runs
            if run.status == "pending" and run.request.get("cron_id")
        ]
        with self._fired_lock:
            # Only open runs are remembered: the set does not grow with every run served.
            self._submitted.intersection_update(run.run_id for run in open_runs)
            new = [r for r in found if r not in self._submitted]
        for run_id in new:
            self.submit(run_id)
        return new

    def start_fired(self, thread_id: str) -> None:
        """Run a thread a schedule fired (see ``Scheduler.start_fired``). Firing hands
        over a fired thread again each round until it has started: while the pool is busy
        with long runs, it waits here once, not once per round."""
        with self._fired_lock:
            if thread_id in self._fired:
                return
            self._fired.add(thread_id)
        self._jobs.put((self._start_fired, (thread_id,)))

    def _start_fired(self, thread_id: str) -> None:
        with self._fired_lock:
            self._fired.discard(thread_id)
        self.runner.start_fired(thread_id)

    def submit_cancel(self, thread_id: str, reason: str | None, by: str) -> None:
        self._jobs.put((self._cancel, (thread_id, reason, by)))

    def end_run(self, run: ApiRun, status: str, error: str | None = None) -> None:
        """Record a run's end. A run with a webhook keeps the thread's values as they are
        now, in the same statement (the next run of the thread waits for this end, so they
        are the run's), and the webhook is delivered once that is committed. The next run
        queued behind it is handed to the pool."""
        values = self._values(run) if run.webhook else None
        store = self.runner.db.store
        store.api_run_set(run.run_id, status, error, values=values)
        # After the status: a stream that reads the end reads the run's final status.
        store.parts_mark(run.thread_id, run.run_id, END)
        with self.changed:
            self.changed.notify_all()
        if run.webhook:
            self.webhooks.wake()
        self._submit_waiting(run.thread_id)

    def _submit_waiting(self, thread_id: str | None) -> None:
        """Submit again the waiting runs (of ``thread_id``, or all) with nothing ahead."""
        store = self.runner.db.store
        with self._waiting_lock:
            for run_id in list(self._waiting):
                run = store.api_run(run_id)
                if run is None or run.status not in OPEN_RUN_STATUSES:
                    self._waiting.discard(run_id)
                    continue
                if thread_id is not None and run.thread_id != thread_id:
                    continue
                if not store.api_run_ahead(run):
                    self._waiting.discard(run_id)
                    self._jobs.put((self._execute, (run_id,)))

    def _values(self, run: ApiRun) -> dict[str, Any] | None:
        """The thread's values as the Server API shows them (None if they cannot be read:
        the delivery reads them again then)."""
        rec = self.runner.db.store.get_thread(run.thread_id)
        if rec is None:
            return {}
        try:
            return dict(plain(thread_state(self.runner, self.registry, rec)["values"]))
        except Exception:
            log.exception("could not read the values of thread %s for a webhook", rec.thread_id)
            return None

    # -- recovering ------------------------------------------------------------------------

    def recover(self) -> list[str]:
        """Continue open runs and threads left running by a process that died (lock free).
        Returns the thread ids continued."""
        store = self.runner.db.store
        threads: list[str] = []
        for run in store.api_runs_open():
            threads.append(run.thread_id)
            self.submit(run.run_id)
        left = [
            rec
            for status in ("running", "cancelling")
            for rec in store.list_threads(limit=10000, status=status)
        ]
        for rec in left:
            if rec.thread_id in threads or rec.mode == "worker":
                continue  # workers take over their own threads
            if self.runner.db.is_locked(rec.thread_id):
                continue  # another process is advancing it
            threads.append(rec.thread_id)
            self._jobs.put((self._continue, (rec.thread_id,)))
        return threads

    def _continue(self, thread_id: str) -> None:
        rec = self.runner.db.store.get_thread(thread_id)
        if rec is None or rec.status not in ("running", "cancelling"):
            return
        if self.runner.db.is_locked(thread_id):
            return
        log.info("continuing thread %s left running by a process that stopped", thread_id)
        try:
            self.runner.resume(thread_id, task=self.task_for(rec))
        except ThreadBusy:
            pass
        except LongTaskError as exc:
            log.info("thread %s stopped: %s", thread_id, exc)

    # -- carrying out ----------------------------------------------------------------------

    def _execute(self, run_id: str) -> None:
        store = self.runner.db.store
        with self._waiting_lock:
            # Checked under the lock ``end_run`` submits waiting runs under, after it has
            # recorded the end: a run either sees the one ahead ended, or is found waiting.
            run = store.api_run(run_id)
            if run is not None and run.status == "pending" and store.api_run_ahead(run):
                self._waiting.add(run_id)
                return
        self._execute_run(run_id)

    def _execute_run(self, run_id: str) -> None:
        store = self.runner.db.store
        run = store.api_run(run_id)
        if run is None or run.status not in OPEN_RUN_STATUSES:
            return  # cancelled before it started, or already done
        # A run a process that died was carrying out (a cancel is simply carried out again:
        # a repeated cancel continues where the first stopped).
        again = run.status == "running" and run.request.get("kind") != "cancel"
        if not store.api_run_claim(run_id, run.status):
            return  # cancelled meanwhile
        with self.changed:
            self.changed.notify_all()
        # The run's stream is the thread's parts from here to the run's end mark.
        store.parts_mark(run.thread_id, run_id, START)
        if time.monotonic() - self._expired > EXPIRE_EVERY:
            self._expired = time.monotonic()
            store.parts_expire()
        if run.request.get("kind") == "queued":
            try:
                run = self._plan(run)
            except LongTaskError as exc:
                self.end_run(run, "error", str(exc))
                return
        error: str | None = None
        #: the command was refused (InvalidInput): not carried out, whatever the thread is
        refused = False
        before = store.get_thread(run.thread_id)
        try:
            modes = run.request.get("stream_mode") or ()
            breaks = run.request.get("breaks") or {}
            with (
                logging_parts(store, self.runner.db.saver.serde, run.thread_id, modes),
                breaking(breaks.get("before"), breaks.get("after")),
            ):
                self._carry_out_when_free(run, again)
            after = store.get_thread(run.thread_id)
            if after is not None and after.mode == "worker":
                # Handed to the workers' queue: the run lasts until a worker has acted.
                recorded = run.request.get("runs_before")
                if recorded is None:  # a run recorded before the count was kept with it
                    recorded = before.runs if before is not None else 0
                self._follow_worker(run.thread_id, int(recorded))
        except ThreadBusy as exc:
            error = str(exc)
        except LongTaskError as exc:
            # A failing step, a rejection, a limit: the thread's status says which.
            log.info("run %s of thread %s: %s", run_id, run.thread_id, exc)
            error = str(exc)
            refused = isinstance(exc, InvalidInput)
        except Exception as exc:
            log.exception("run %s of thread %s failed", run_id, run.thread_id)
            error = f"{type(exc).__name__}: {exc}"
        rec = store.get_thread(run.thread_id)
        if run.request.get("kind") == "cancel":
            # Delivered: the thread is cancelled, or the run advancing it stops at its next
            # step and compensates.
            self.end_run(run, "error" if error else "success", error)
            return
        status = RUN_OUTCOME.get(rec.status, "error") if rec is not None else "error"
        if rec is not None and rec.status == "failed":
            error = error or str((rec.error or {}).get("message") or "the thread failed")
        if (rec is not None and rec.status == "running") or refused:
            # another process holds the thread, or what the run asked was not done (an
            # answer the thread no longer waits for): never a success that did nothing
            status = "error"
        self.end_run(run, status, error if status == "error" else None)

    def _plan(self, run: ApiRun) -> ApiRun:
        if self.planner is None:
            raise InvalidInput("this server does not plan queued runs (no Server API)")
        return self.planner(run)

    def _carry_out_when_free(self, run: ApiRun, again: bool) -> None:
        """Carry ``run`` out, waiting a while for a thread another process holds: an
        accepted command is not dropped because a reader or a refused write held the thread
        for a moment (a busy thread refuses before anything is written, so trying again is
        safe). A holder that keeps it past ``BUSY_WAIT`` seconds ends the run in error."""
        deadline = time.monotonic() + BUSY_WAIT
        pause = 0.05
        while True:
            try:
                self._carry_out(run, again)
                return
            except ThreadBusy:
                if time.monotonic() + pause > deadline:
                    raise
                time.sleep(pause)
                pause = min(pause * 2, 1.0)

    def _carry_out(self, run: ApiRun, again: bool) -> None:
        runner = self.runner
        req = run.request
        rec = runner.db.store.get_thread(run.thread_id)
        # "pending": it died after the thread was recorded and before its first advance.
        if again and rec is not None and rec.status in ("running", "pending", "cancelling"):
            if rec.mode != "worker" and not runner.db.is_locked(run.thread_id):
                # Its process died mid-run: continue from the last checkpoint first.
                runner.resume(run.thread_id, task=self.task_for(rec))
            rec = runner.db.store.get_thread(run.thread_id)
        kind = req.get("kind")
        if kind == "cancel":
            with contextlib.suppress(CompensationFailed):  # recorded on the thread
                runner.cancel(run.thread_id, reason=req.get("reason"), by=run.actor)
            return
        if kind == "start":
            if rec is not None:
                return  # started before the restart, and continued above
            entry = self.registry.get(req["graph"])
            # Owned by whoever made the thread through the API, else by who asked for the run.
            owner = runner.db.store.api_thread_owner(run.thread_id) or run.actor
            given = run_context(entry.task, req)
            if self.to_workers:
                runner.submit(
                    entry.task,
                    req.get("input") or {},
                    thread_id=run.thread_id,
                    task_ref=entry.ref,
                    by=owner,
                    context=given,
                )
                return
            # The run's config over its assistant's (tags, metadata, run_name...), as
            # recorded when the run was asked: what tracers see of the thread's run.
            runner.start(
                entry.task,
                req.get("input") or {},
                thread_id=run.thread_id,
                task_ref=entry.ref,
                by=owner,
                config=req.get("run_config") or None,
                context=given,
            )
            return
        assert rec is not None, "a resume run names a thread that exists"
        task = self.task_for(rec)
        if kind == "answer":
            for answer in req.get("answers", []):
                try:
                    self._answer(run, task, answer)
                except InvalidInput:
                    if not again:
                        raise
                    # Answered before the restart; the thread went on without it.
        elif kind in ("retry", "skip"):
            try:
                if kind == "retry":
                    runner.retry(run.thread_id, req.get("step"), by=run.actor, task=task)
                else:
                    step = str(req["step"])
                    runner.skip(run.thread_id, step, req.get("result"), by=run.actor, task=task)
            except InvalidInput:
                if not again:
                    raise
                # Carried out before the restart; the thread went on from it.
        elif kind == "turn":
            # A new input on a served graph's thread: recorded under the run's id, so a
            # run carried out again after a restart continues the turn it recorded.
            runner.run_again(
                run.thread_id,
                req.get("input") or {},
                task=task,
                turn=run.run_id,
                by=run.actor,
                at=req.get("at"),
                context=run_context(task, req),
            )
        elif kind == "command":
            command = Command(update=req.get("update"), goto=req.get("goto") or ())
            runner.resume(run.thread_id, command, task=task, by=run.actor)
        else:
            with contextlib.suppress(NothingToResume):
                runner.resume(run.thread_id, task=task, by=run.actor)

    def _follow_worker(self, thread_id: str, runs_before: int) -> None:
        """Wait until a worker has taken the commands queued for the thread (its inbox is
        empty, it has advanced at least once more) and let go of it."""
        store = self.runner.db.store
        while True:
            rec = store.get_thread(thread_id)
            if rec is None:
                return
            if (
                rec.runs > runs_before
                and rec.status not in ("pending", "running", "cancelling")
                and not store.inbox_peek(thread_id)
            ):
                return
            time.sleep(self.follow_poll)

    def _answer(self, run: ApiRun, task: LongTask, answer: dict[str, Any]) -> None:
        by = run.actor or "api"
        if answer["kind"] == "approval":
            self.runner.decide(
                run.thread_id,
                answer.get("interrupt_id") or answer["step"],
                approved=bool(answer["approved"]),
                by=by,
                comment=answer.get("comment"),
                plan_hash=answer.get("plan_hash"),
                task=task,
                edited_args=answer.get("edited_args"),
                response=answer.get("response"),
            )
        elif answer["kind"] == "effect":
            # settled in the ledger first (who, and what became of the call), then resumed
            self.runner.resolve_effect(
                run.thread_id,
                answer["key"],
                answer["outcome"],
                result=answer.get("result"),
                reason=answer.get("reason"),
                by=by,
                task=task,
            )
        elif answer["kind"] == "interrupt":
            self.runner.answer(
                run.thread_id,
                answer.get("value"),
                interrupt=answer["interrupt_id"],
                by=by,
                task=task,
            )
        else:
            self.runner.signal(
                run.thread_id, answer["step"], answer.get("payload"), by=by, task=task
            )

    def _cancel(self, thread_id: str, reason: str | None, by: str) -> None:
        try:
            self.runner.cancel(thread_id, reason=reason, by=by)
        except LongTaskError as exc:
            log.info("cancel of thread %s by %s: %s", thread_id, by, exc)
        with self.changed:
            self.changed.notify_all()
