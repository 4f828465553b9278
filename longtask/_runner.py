"""The Runner: one object to start, resume, answer, watch and manage LongTask threads in one
database, composed of named parts (procrastinate's ``App`` is the model).

Each part is built here with exactly what it needs, and each of the Runner's methods is its
part's (``Runner.approve`` is ``runner.pauses.approve``): the run core's parts from
``longtask.runtime`` and the operations' from ``longtask.ops``. The parts are attributes
too, for code that needs one alone (``serve`` checks an answer with ``runner.pauses``
before it records it). This module stands above both rooms: neither imports it.
"""

from __future__ import annotations

import functools
import inspect
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from longtask.checkpointers import Database
from longtask.ops._copy import Copies
from longtask.ops._migrate import Migrations
from longtask.ops._move import Moves
from longtask.ops._prune import Retention
from longtask.ops._reports import Reports
from longtask.ops._schedules import Scheduler
from longtask.runtime._compensate import Compensator
from longtask.runtime._control import Control
from longtask.runtime._engine import Engine, UpdateHook
from longtask.runtime._gotos import Gotos
from longtask.runtime._history import TimeTravel
from longtask.runtime._notify import Notifier
from longtask.runtime._pauses import Pauses
from longtask.runtime._queue import Queue, apply_command, worker_name
from longtask.runtime._reading import Reads
from longtask.runtime._streams import Streams
from longtask.runtime._subtasks import Subtasks
from longtask.runtime._turns import Turns
from longtask.runtime._watch import Watch
from longtask.runtime._who import check_by
from longtask.store import DEFAULT_INLINE_LIMIT, ValueCodec

if TYPE_CHECKING:
    from longtask.runtime._worker import Prune, Worker

P = ParamSpec("P")
R = TypeVar("R")


class _Via(Generic[P, R]):
    """A Runner method that is one of its parts' methods: ``via("pauses", Pauses.approve)``
    on the class calls ``runner.pauses.approve`` on an instance, with that method's
    signature and docstring."""

    def __init__(self, part: str, method: Callable[Concatenate[Any, P], R]) -> None:
        self.part = part
        self.name = method.__name__
        self.__doc__ = method.__doc__
        self.__wrapped__ = method
        # Whoever acts through the Runner (``by=``) is checked here, once for every method
        # that takes one: a new method with ``by`` is checked by construction.
        self.takes_by = "by" in inspect.signature(method).parameters

    @overload
    def __get__(self, obj: None, owner: type[Any] | None = None) -> _Via[P, R]: ...

    @overload
    def __get__(self, obj: object, owner: type[Any] | None = None) -> Callable[P, R]: ...

    def __get__(self, obj: object | None, owner: type[Any] | None = None) -> Any:
        if obj is None:
            return self
        part = getattr(obj, self.part)
        bound: Callable[P, R] = getattr(part, self.name)
        if not self.takes_by:
            return bound

        @functools.wraps(bound)
        def checked(*args: P.args, **kwargs: P.kwargs) -> R:
            by = kwargs.get("by")
            if by is not None:
                check_by(by)  # type: ignore[arg-type]
            return bound(*args, **kwargs)

        # still the part's method, as a bound one says (``runner.approve.__self__``)
        checked.__self__ = part  # type: ignore[attr-defined]
        return checked


def via(part: str, method: Callable[Concatenate[Any, P], R]) -> _Via[P, R]:
    return _Via(part, method)


class Runner:
    """Starts, resumes and inspects LongTask threads in one database.

    ``db`` is a URL (``sqlite:///path.db``, ``postgresql://...``), an open
    :class:`~longtask.checkpointers.Database`, or None for ``$LONGTASK_DB`` or the
    embedded default ``sqlite:///.longtask/longtask.db``. With ``create=False`` a missing
    SQLite file is an error instead of being created (for commands that only read).

    ``clock`` is the time for deadlines and decision validity (inject one to test; on
    PostgreSQL the database server's by default, so one clock decides for every process);
    ``sleep`` how steps wait between attempts (inject one to test back-offs without
    waiting); ``cancel_poll`` the seconds between a run's checks for a cancel request;
    ``worker`` is set in a worker's runner (``longtask worker``): it advances threads
    served by workers under a lease instead of queueing their continuations; ``on_update``
    hears of the steps each run finishes.
    """

    def __init__(
        self,
        db: str | Database | None = None,
        *,
        inline_limit: int = DEFAULT_INLINE_LIMIT,
        on_update: UpdateHook | None = None,
        clock: Callable[[], datetime] | None = None,
        sleep: Callable[[float], None] | None = None,
        cancel_poll: float = 0.5,
        worker: str | None = None,
        create: bool = True,
    ) -> None:
        self._owns_db = not isinstance(db, Database)
        self.db = db if isinstance(db, Database) else Database.open(db, create=create)
        self.codec = ValueCodec(
            self.db.store, inline_limit, defer=self.db.events.put_blob, maps=self.db.store
        )
        #: events wait here to commit with their thread's next checkpoint (see EventWriter)
        self.events_writer = self.db.events
        self.clock: Callable[[], datetime] = clock or _default_clock(self.db)
        self.sleep: Callable[[float], None] = sleep or time.sleep
        self.cancel_poll = cancel_poll
        self.worker = worker
        self.on_update = on_update
        #: set to stop every run of this runner at its next step boundary (worker shutdown)
        self.stopping = threading.Event()

        # the run core
        self.reads = Reads(self.db, self.codec)
        self.queue = Queue(self.db, worker)
        self.gotos = Gotos(self.db, self.reads)
        self.compensator = Compensator(self.db, self.codec, self.events_writer)
        #: delivers notices of pauses, failures and ends (see runtime._notify)
        self.notifier = Notifier(self.db, lambda rec: self.engine.load(rec), self.clock)
        self.engine = Engine(
            self.db,
            self.codec,
            self.events_writer,
            reads=self.reads,
            queue=self.queue,
            gotos=self.gotos,
            compensator=self.compensator,
            clock=self.clock,
            sleep=self.sleep,
            stopping=self.stopping,
            worker=worker,
            cancel_poll=cancel_poll,
            on_update=on_update,
            notifier=self.notifier,
        )
        self.subtasks = self.engine.subtasks
        self.pauses = Pauses(self.db, self.clock, self.reads, self.engine, self.queue)
        self.control = Control(self.db, self.codec, self.clock, self.reads, self.engine, self.queue)
        self.watch = Watch(self.db, self.reads)
        self.travel = TimeTravel(self.db, self.codec, self.reads, self.engine)
        self.streams = Streams(self.engine, self.pauses)
        self.turns = Turns(self.db, self.codec, self.reads, self.engine, self.queue)
        # the operations
        self.reports = Reports(self.db, self.codec, self.reads)
        self.moves = Moves(self.db)
        self.copies = Copies(self.db)
        self.retention = Retention(self.db, self.clock)
        self.scheduler = Scheduler(self.db, self.clock, self.engine, self.queue)
        self.migrations = Migrations(
            self.db, self.events_writer, self.reads, self.engine, self.queue
        )

    def close(self) -> None:
        self.notifier.close()
        self.queue.close()
        self.watch.close()
        try:
            self.events_writer.close()
        finally:
            if self._owns_db:
                self.db.close()

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def apply_command(self, thread_id: str, command: Mapping[str, Any]) -> None:
        """Carry out a continuation a caller queued for a worker thread (worker side)."""
        apply_command(self, thread_id, command)

    # -- running (runtime: Engine, Streams) --------------------------------------------------
    graph = via("engine", Engine.graph)
    start = via("engine", Engine.start)
    resume = via("engine", Engine.resume)
    submit = via("engine", Engine.submit)
    run_again = via("turns", Turns.run_again)
    stream = via("streams", Streams.stream)
    astream = via("streams", Streams.astream)
    astream_events = via("streams", Streams.astream_events)
    astart = via("streams", Streams.astart)
    aresume = via("streams", Streams.aresume)
    aapprove = via("streams", Streams.aapprove)
    areject = via("streams", Streams.areject)
    asignal = via("streams", Streams.asignal)

    # -- reading (runtime: Reads) ------------------------------------------------------------
    status = via("reads", Reads.status)
    pending = via("reads", Reads.pending)
    history = via("reads", Reads.history)
    inner_history = via("reads", Reads.inner_history)
    graph_ns = via("reads", Reads.graph_ns)
    result = via("reads", Reads.result)
    results = via("reads", Reads.results)
    run_context = via("reads", Reads.run_context)
    events = via("reads", Reads.events)
    threads = via("reads", Reads.threads)
    effects = via("reads", Reads.effects)
    usage = via("reads", Reads.usage)
    threads_with_cost = via("reads", Reads.threads_with_cost)

    # -- answering (runtime: Pauses) ---------------------------------------------------------
    decide = via("pauses", Pauses.decide)
    approve = via("pauses", Pauses.approve)
    reject = via("pauses", Pauses.reject)
    signal = via("pauses", Pauses.signal)
    answer = via("pauses", Pauses.answer)
    resolve_effect = via("pauses", Pauses.resolve_effect)
    tick = via("pauses", Pauses.tick)

    # -- notifications (runtime: Notifier) ---------------------------------------------------
    deliver_notifications = via("notifier", Notifier.deliver_pending)

    # -- a person's control (runtime: Control) -----------------------------------------------
    cancel = via("control", Control.cancel)
    record_cancel = via("control", Control.record_cancel)
    retry = via("control", Control.retry)
    retry_target = via("control", Control.retry_target)
    skip = via("control", Control.skip)
    check_skip = via("control", Control.check_skip)
    budget = via("control", Control.budget)
    raise_budget = via("control", Control.raise_budget)

    # -- watching (runtime: Watch) -----------------------------------------------------------
    wait_events = via("watch", Watch.wait_events)
    follow = via("watch", Watch.follow)
    artifacts = via("watch", Watch.artifacts)
    artifact = via("watch", Watch.artifact)
    transcript = via("watch", Watch.transcript)

    # -- time travel (runtime: TimeTravel) ---------------------------------------------------
    at = via("travel", TimeTravel.at)
    diff = via("travel", TimeTravel.diff)
    branches = via("travel", TimeTravel.branches)
    fork = via("travel", TimeTravel.fork)

    # -- workers' queue (runtime: Queue) -----------------------------------------------------
    served_by_workers = via("queue", Queue.served_by_workers)
    enqueue = via("queue", Queue.enqueue)
    wake = via("queue", Queue.wake)
    lease = via("queue", Queue.lease)
    subtask_ended = via("subtasks", Subtasks.ended)
    subtask_sweep = via("subtasks", Subtasks.sweep)
    close_queue = via("queue", Queue.close)

    # -- reports and charts (ops: Reports) ---------------------------------------------------
    timeline = via("reports", Reports.timeline)
    cost_chart = via("reports", Reports.cost_chart)
    report = via("reports", Reports.report)
    report_document = via("reports", Reports.report_document)

    # -- moving threads (ops: Moves) ---------------------------------------------------------
    export_thread = via("moves", Moves.export_thread)
    import_thread = via("moves", Moves.import_thread)
    copy_thread = via("copies", Copies.copy_thread)

    # -- retention (ops: Retention) ----------------------------------------------------------
    prune = via("retention", Retention.prune)
    delete = via("retention", Retention.delete)
    trim = via("retention", Retention.trim)

    # -- schedules (ops: Scheduler) ----------------------------------------------------------
    schedules = via("scheduler", Scheduler.schedules)
    schedule = via("scheduler", Scheduler.schedule)
    add_schedule = via("scheduler", Scheduler.add_schedule)
    register_schedules = via("scheduler", Scheduler.register_schedules)
    remove_schedule = via("scheduler", Scheduler.remove_schedule)
    pause_schedule = via("scheduler", Scheduler.pause_schedule)
    resume_schedule = via("scheduler", Scheduler.resume_schedule)
    schedule_of = via("scheduler", Scheduler.schedule_of)
    fire_due = via("scheduler", Scheduler.fire_due)
    start_fired = via("scheduler", Scheduler.start_fired)

    # -- deploying new versions (ops: Migrations) --------------------------------------------
    migrate = via("migrations", Migrations.migrate)
    migrate_all = via("migrations", Migrations.migrate_all)


def _default_clock(db: Database) -> Callable[[], datetime]:
    """The database server's clock on PostgreSQL (one clock for every process), else this
    machine's."""
    from longtask.model._decision import utcnow
    from longtask.runtime._clock import ServerClock

    server_time = getattr(db.store, "server_time", None)
    return utcnow if server_time is None else ServerClock(server_time)


def make_worker(
    db: str | Database | None = None,
    *,
    name: str | None = None,
    concurrency: int = 1,
    queues: list[str] | None = None,
    stalled_after: float = 30.0,
    prune: Prune | None = None,
    metrics: tuple[str, int] | None = None,
) -> Worker:
    """A ``longtask worker`` on ``db`` (PostgreSQL), named ``name`` (default host:pid), with
    a Runner of its own made for it (closed when the worker stops); ``metrics``: (host,
    port) to serve ``/metrics``, ``/ok`` and ``/ready`` on while it runs."""
    from longtask.runtime._worker import Worker

    runner = Runner(db, worker=name or worker_name(), cancel_poll=min(0.5, stalled_after / 4))
    try:
        return Worker(
            runner,
            concurrency=concurrency,
            queues=queues,
            stalled_after=stalled_after,
            prune=prune,
            metrics=metrics,
        )
    except BaseException:
        runner.close()
        raise
