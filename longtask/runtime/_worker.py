"""``longtask worker``: a process that runs the wake-up jobs of threads served by workers.

Many workers, on many machines, share one PostgreSQL. A job advances its thread until it
completes, fails or pauses, then lets go; approvals and waits hold no worker. Each worker
heartbeats (procrastinate's table, and ``longtask_workers`` for ``longtask workers``) and
retries the jobs of workers whose heartbeat is older than ``stalled_after`` seconds: their
threads continue elsewhere from the last checkpoint, and fencing refuses anything the
stalled worker tries to write if it wakes up. SIGTERM/SIGINT stop each running thread at its
next step boundary and hand it back to the queue.

Workers also fire schedules (``longtask schedule``): every few seconds (a quarter of
``stalled_after``) each starts a thread for every due tick and queues it like ``submit``.
Every worker tries; row locks and the tick's thread id make it one thread per tick (see
``longtask.ops._schedules``).

Workers route by definition: a job whose thread recorded a definition this worker's code
lacks is handed back untouched, to wait for a worker that has it (``longtask.runtime._routing``);
the heartbeat row says which definitions each worker serves.

With ``--metrics-port`` a worker also serves ``/metrics``, ``/ok`` and ``/ready`` on a small
HTTP server of its own (``WorkerMetrics``; see ``longtask.runtime._metrics``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import threading
import time
from datetime import datetime
from typing import Any, Protocol

from longtask.errors import LeaseLost, LongTaskError, StepFailed
from longtask.runtime._parts import logging_parts
from longtask.runtime._queue import (
    DEFAULT_QUEUE,
    JOB_TASK,
    WAKE_TASK,
    ThreadServer,
    make_app,
    serve_thread,
)
from longtask.runtime._routing import Lacking, Routing, served_elsewhere

log = logging.getLogger("longtask.workers")


class WorkerRunner(ThreadServer, Protocol):
    """What a worker needs of the Runner it serves threads with (one made with its name as
    ``worker``): the job's calls, the database, the clock, the stop flag, firing due
    schedules."""

    @property
    def worker(self) -> str | None: ...

    @property
    def stopping(self) -> threading.Event: ...

    def clock(self) -> datetime: ...

    def fire_due(
        self, now: datetime | None = ..., *, launch: Any = ..., limit: int = ...
    ) -> Any: ...

    def subtask_sweep(
        self, limit: int = ..., thread_id: str | None = ..., *, workers: bool = ...
    ) -> Any: ...

    def close(self) -> None: ...


class Prune(Protocol):
    """A worker's scheduled prune (``ops.PruneSchedule``): every ``every`` seconds,
    ``run`` prunes through the runner (None when another process is pruning)."""

    @property
    def every(self) -> float: ...

    def run(self, runner: Any) -> Any: ...


class WorkerMetrics:
    """A worker's ``/metrics``, ``/ok`` and ``/ready`` on ``host:port``: the stored state's
    counts every process reports, and this worker's own (jobs run, threads held now, the
    queue wait of the jobs it started)."""

    def __init__(self, worker: Worker, host: str, port: int) -> None:
        from longtask.runtime._metrics import (
            Readiness,
            metrics_registry,
            queue_wait_histogram,
        )
        from longtask.runtime._metrics_http import MetricsServer

        self.worker = worker
        self.registry = metrics_registry(worker.db)
        self.queue_wait = queue_wait_histogram(self.registry)
        self.registry.register(self)
        self.server = MetricsServer(self.registry, Readiness(worker.db), host, port)

    def collect(self) -> Any:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        with self.worker._lock:
            jobs, held = self.worker.jobs, len(self.worker.current)
        yield CounterMetricFamily(
            "longtask_worker_jobs", "Jobs this worker ran (threads advanced).", value=jobs
        )
        yield GaugeMetricFamily(
            "longtask_worker_threads_running", "Threads this worker advances now.", value=held
        )
        yield CounterMetricFamily(
            "longtask_worker_handed_back",
            "Jobs this worker handed back for lack of the thread's definition.",
            value=self.worker.routing.handed_back,
        )

    def started(self, job_id: int) -> None:
        """Observe how long job ``job_id`` waited for a worker (one indexed read)."""
        try:
            waited = self.worker.db.store.job_wait(job_id)
        except Exception:  # a metric is never worth a job
            log.debug("could not read the queue wait of job %s", job_id, exc_info=True)
            return
        if waited is not None:
            self.queue_wait.observe(waited)

    def start(self) -> None:
        self.server.start()

    def close(self) -> None:
        self.server.close()


class Worker:
    """Runs the wake-up jobs of threads served by workers, with ``runner`` (made for this
    worker: its ``worker`` is the worker's name, see ``longtask.make_worker``); closes it
    when it stops."""

    def __init__(
        self,
        runner: WorkerRunner,
        *,
        concurrency: int = 1,
        queues: list[str] | None = None,
        stalled_after: float = 30.0,
        prune: Prune | None = None,
        metrics: tuple[str, int] | None = None,
    ) -> None:
        if runner.worker is None:
            raise ValueError("a Worker needs a Runner made for it (Runner(..., worker=NAME))")
        self.concurrency = concurrency
        self.queues = queues or [DEFAULT_QUEUE]
        self.stalled_after = stalled_after
        self.name = runner.worker
        self.runner = runner
        self.db = runner.db
        self.app = make_app(self.db)
        _tolerate_taken_jobs(self.app.job_manager)
        self.started = time.time()
        self.prune = prune
        self.jobs = 0
        self.routing = Routing()
        self.current: set[str] = set()
        self._lock = threading.Lock()
        self._worker_task: asyncio.Task[Any] | None = None

        self.metrics: WorkerMetrics | None = None
        if metrics is not None:
            self.metrics = WorkerMetrics(self, *metrics)

        def advance(context: Any, thread_id: str) -> str:
            if self.metrics is not None:
                self.metrics.started(context.job.id)
            return self._job(thread_id, queue=context.job.queue or DEFAULT_QUEUE)

        def wake(context: Any, thread_id: str) -> str:
            # On the queue it was scheduled on: a hand-back keeps the job's queue.
            self.runner.wake(thread_id, queue=context.job.queue or DEFAULT_QUEUE)
            return "woken"

        self.app.task(name=JOB_TASK, pass_context=True)(advance)
        self.app.task(name=WAKE_TASK, pass_context=True)(wake)

    def _job(self, thread_id: str, *, queue: str = DEFAULT_QUEUE) -> str:
        # Before anything touches the thread: a worker without its definition lets it be.
        lack = self.routing.lacking(self.db.store, thread_id)
        if lack is not None:
            return self._hand_back(lack, queue)
        with self._lock:
            self.current.add(thread_id)
        self._beat()
        try:
            with self._parts(thread_id):
                outcome = serve_thread(self.runner, thread_id)
        except LeaseLost as exc:
            log.warning("%s", exc)
            outcome = "lease lost"
        except StepFailed as exc:
            outcome = f"failed: {exc.step}"
        except LongTaskError as exc:
            log.error("thread %s: %s", thread_id, exc)
            outcome = f"error: {exc}"
        finally:
            with self._lock:
                self.current.discard(thread_id)
                self.jobs += 1
            self.routing.served(thread_id)
        self._beat()
        return outcome

    def _parts(self, thread_id: str) -> contextlib.AbstractContextManager[Any]:
        """A thread a client of ``serve`` streams (an API run of it is open) has its run's
        parts stored, for that client, tokens too if the run streams messages."""
        runs = self.db.store.api_runs_open_of(thread_id)
        if not runs:
            return contextlib.nullcontext()
        modes = [m for run in runs for m in run.request.get("stream_mode") or ()]
        return logging_parts(self.db.store, self.db.saver.serde, thread_id, modes)

    def _hand_back(self, lack: Lacking, queue: str) -> str:
        """Queue the thread's wake-up for later and end the job, the thread untouched. The
        wake-up is a job of its own, scheduled: the queueing lock of the thread's jobs only
        covers waiting ones, and this one is running, so nothing swallows it."""
        try:
            elsewhere = served_elsewhere(
                self.db.store, lack, self.name, time.time() - 2 * self.stalled_after
            )
        except Exception:  # only shortens the wait
            elsewhere = False
        delay = self.routing.hand_back_delay(lack, elsewhere)
        # By the database's clock, which decides when a scheduled job is due: by this
        # machine's, a clock running behind would make every wait due at once.
        due = self.runner.clock().timestamp() + delay
        self.runner.wake(lack.thread_id, at=due, queue=queue)
        log.log(
            logging.INFO if lack.imported else logging.WARNING,
            "thread %s handed back: %s; next try in %.0fs",
            lack.thread_id,
            lack.reason,
            delay,
        )
        self._beat()
        return f"handed back: {lack.reason}"

    def _beat(self) -> None:
        with self._lock:
            current = ",".join(sorted(self.current)) or None
            jobs = self.jobs
        with contextlib.suppress(Exception):  # a missed beat is not worth a crash
            self.db.store.worker_beat(
                self.name,
                socket.gethostname(),
                os.getpid(),
                self.started,
                jobs,
                current,
                self.stalled_after,
                serves=self.routing.serves(),
                handed_back=self.routing.handed_back,
            )

    async def _scheduling(self) -> None:
        """Fire due schedules, and wake parents whose sub-tasks have all ended but whose
        wake-up was lost (see runtime._subtasks), apart from the heartbeat and the
        takeovers (a task module slow to import must not hold them up); as often as the
        housekeeping runs."""
        while not self.runner.stopping.is_set():
            try:
                await asyncio.to_thread(self.runner.fire_due, launch="queue")
            except Exception:  # the next round tries again; a tick stays due until fired
                log.exception("could not fire due schedules")
            try:
                await asyncio.to_thread(self.runner.subtask_sweep, workers=True)
            except Exception:  # the next round tries again
                log.exception("could not look for parents whose sub-tasks ended")
            await asyncio.sleep(max(0.2, self.stalled_after / 4))

    async def _housekeeping(self) -> None:
        """Heartbeat, and retry the jobs of workers that stopped beating."""
        while True:
            await asyncio.to_thread(self._beat)
            await self._take_over()
            await asyncio.sleep(max(0.2, self.stalled_after / 4))

    async def _take_over(self) -> list[int]:
        """Put the jobs of stalled workers back in the queue; returns the ids of those put
        back. Each job on its own: one that cannot be put back is logged and tried again
        next round, and holds up no other."""
        try:
            threshold = await asyncio.to_thread(self.db.store.stalled_threshold, self.stalled_after)
            stalled = await self.app.job_manager.get_stalled_jobs(seconds_since_heartbeat=threshold)
        except Exception:  # the next round tries again
            log.exception("could not look for the jobs of stalled workers")
            return []
        retried = []
        for job in stalled:
            try:
                done = await asyncio.to_thread(self.db.store.job_take_over, job.id, job.worker_id)
            except Exception:  # the next round tries again
                log.exception(
                    "could not retry job %s (thread %s) of a stalled worker",
                    job.id,
                    job.task_kwargs.get("thread_id"),
                )
                continue
            if done is not None:
                log.warning("job %s of a stalled worker %s", job.id, done)
                retried.append(job.id)
        return retried

    async def _pruning(self) -> None:
        """The scheduled prune, apart from the heartbeat (a long prune must not make this
        worker look stalled): first a minute after start, then every ``prune.every``."""
        assert self.prune is not None
        await asyncio.sleep(min(60.0, self.prune.every))
        while True:
            try:
                report = await asyncio.to_thread(self.prune.run, self.runner)
                if report is None:
                    log.info("scheduled prune skipped: another worker is pruning")
                elif report.threads or report.blobs or report.artifact_files:
                    log.info(
                        "pruned %d thread(s) %s, %d blob(s), %d artifact file(s)",
                        len(report.threads),
                        report.by_status,
                        report.blobs,
                        report.artifact_files,
                    )
            except Exception:  # the next round tries again
                log.exception("scheduled prune failed")
            await asyncio.sleep(self.prune.every)

    def stop(self) -> None:
        """Stop every running thread at its next step boundary, then the worker."""
        self.runner.stopping.set()
        if self._worker_task is not None:
            self._worker_task.cancel()

    async def _main(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop)
        async with self.app.open_async():
            self._worker_task = asyncio.create_task(
                self.app.run_worker_async(
                    queues=self.queues,
                    concurrency=self.concurrency,
                    name=self.name,
                    wait=True,
                    install_signal_handlers=False,
                    update_heartbeat_interval=max(0.2, self.stalled_after / 4),
                    # procrastinate's own pruning deletes the rows of workers silent this
                    # long, which hands their jobs over: keep it well behind the takeover
                    # rule above (the largest threshold of the live workers).
                    stalled_worker_timeout=max(300.0, 10 * self.stalled_after),
                    # A job put back after a stalled worker sends no notification: poll
                    # often enough that taking over is not held up by it.
                    fetch_job_polling_interval=min(1.0, max(0.2, self.stalled_after / 4)),
                    delete_jobs="successful",
                )
            )
            background = [
                asyncio.create_task(self._housekeeping()),
                asyncio.create_task(self._scheduling()),
            ]
            if self.prune is not None:
                background.append(asyncio.create_task(self._pruning()))
            try:
                await self._worker_task
            except asyncio.CancelledError:
                pass
            finally:
                for task in background:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task

    def run(self) -> None:
        log.info("worker %s on queues %s", self.name, ", ".join(self.queues))
        if self.metrics is not None:
            self.metrics.start()
        notifier = getattr(self.runner, "notifier", None)
        if notifier is not None:
            notifier.start()  # notices left owed by processes before, and reminders
        try:
            asyncio.run(self._main())
        finally:
            if self.metrics is not None:
                self.metrics.close()
            with contextlib.suppress(Exception):
                self.db.store.worker_stopped(self.name)
            self.runner.close()


def _job_gone(exc: BaseException) -> bool:
    """Whether ``exc`` is procrastinate's refusal to settle a job whose row is no longer
    this worker's: retried for another worker after a takeover, or finished by it."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if "Job was not found" in str(current):
            return True
        current = current.__cause__ or current.__context__
    return False


def _tolerate_taken_jobs(manager: Any) -> None:
    """Let a worker whose job was taken over settle it quietly.

    A worker that stalled past its lease (a long pause, a network stall) comes back to a
    job another worker has retried and run: the thread refuses its writes (``lease lost``,
    logged once by ``_job``), and procrastinate's acknowledgment of the job then fails in
    the database ("Job was not found or not in doing status"). procrastinate raises that
    out of the job's asyncio task, which nothing awaits: asyncio logged it at exit as "Task
    exception was never retrieved" with two tracebacks, twice per takeover. The job is the
    other worker's now, so there is nothing left to acknowledge: the refusal is dropped
    (debug), and every other error goes on as before. (Our own takeover of a stalled job
    does not go through procrastinate: see ``Store.job_take_over``.)"""
    for name in ("finish_job", "retry_job"):
        settle = getattr(manager, name)

        async def tolerant(job: Any, *args: Any, _settle: Any = settle, **kwargs: Any) -> Any:
            try:
                return await _settle(job, *args, **kwargs)
            except Exception as exc:
                if not _job_gone(exc):
                    raise
                log.debug("job %s is another worker's now: nothing to acknowledge", job.id)
                return None

        setattr(manager, name, tolerant)
