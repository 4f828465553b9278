"""Schedules: registering them, and firing the ticks that are due.

Nothing of ours stays resident for schedules: whatever already runs fires them. On
PostgreSQL every ``longtask worker`` calls :meth:`Scheduler.fire_due` in its
housekeeping loop and queues the threads it starts; on SQLite ``longtask serve`` does in
its loop, and ``longtask tick`` (from the system's crontab) does each time it runs.

Exactly one thread per tick, however many processes fire: on PostgreSQL the due schedules
are taken with row locks that skip locked rows, so two workers do not even try the same
schedule; everywhere the thread a tick starts has an id derived from the schedule and the
tick (``nightly-20261201T0200Z``), so a second fire of a tick is refused by the thread id
and counted as already fired. A schedule moves on only after its tick's thread exists, so
a process that dies in between leaves the tick to the next fire (which finds the thread).

A cron of the LangGraph Server API is a schedule too (origin ``api``): its tick records a
run of the Server API instead of starting a thread (:func:`cron_ids` derives the run's id,
and a new thread's, from the cron and the tick, so a second fire records nothing), which
``serve``'s executor carries out.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from longtask.errors import (
    InvalidInput,
    LongTaskError,
    ScheduleNotFound,
    ThreadBusy,
    ThreadExists,
)
from longtask.model._schedule import (
    Schedule,
    latest_tick,
    next_tick,
    tick_id,
    ticks_between,
)
from longtask.runtime._reading import schedule_of
from longtask.runtime._taskref import find_ref, load_task
from longtask.runtime._who import whoami
from longtask.store import ScheduleRecord
from longtask.store._schedules import DueSchedules

if TYPE_CHECKING:
    from longtask.checkpointers import Database
    from longtask.model import LongTask
    from longtask.runtime import Engine, Queue
    from longtask.store import ThreadRecord

log = logging.getLogger("longtask.runtime")

#: with ``catch_up="none"``, a tick fires only this many seconds after its time at most;
#: later it counts as missed (a crontab ``tick`` each minute, a worker's loop, fit in it)
GRACE = 300.0
#: missed ticks counted for the report, at most (a year of a per-minute schedule is not
#: walked through)
_COUNT_MISSED = 1000

#: how fired threads start: run here, queue for ``longtask worker``, or hand the thread id
#: to a function (``serve``'s executor)
Launch = Literal["run", "queue"] | Callable[[str], None]


@dataclass(frozen=True)
class Fired:
    """What firing did with one due schedule."""

    schedule: str
    #: the tick fired (or the latest tick skipped)
    tick: datetime | None
    thread_id: str | None
    #: "fired" (a new thread), "already fired" (its thread existed: another process fired
    #: it), "missed" (catch_up="none" and too late), "error: ..." (retried next time)
    outcome: str
    #: ticks passed over without a thread (catch_up: only the latest missed one fires)
    missed: int = 0
    #: a cron of the Server API: the run its tick recorded (carried out by ``serve``)
    run_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["tick"] = self.tick.isoformat() if self.tick else None
        return out


class _NotNew(Exception):
    """A fired thread that has run already: nothing to start."""


class Scheduler:
    """Schedules: registering them (by hand or as a task declares them), and firing the
    ticks that are due, each starting a thread through the run core (``engine``, or
    ``queue`` for the workers). ``clock`` decides what is due."""

    def __init__(
        self, db: Database, clock: Callable[[], datetime], engine: Engine, queue: Queue
    ) -> None:
        self.db = db
        self.clock = clock
        self._engine = engine
        self._queue = queue

    # -- registering -------------------------------------------------------------------------

    def schedules(self) -> list[ScheduleRecord]:
        """Every registered schedule, the next to fire first."""
        return self.db.store.schedules()

    def schedule(self, name: str) -> ScheduleRecord:
        rec = self.db.store.schedule_get(name)
        if rec is None:
            raise ScheduleNotFound(name, [s.name for s in self.db.store.schedules()])
        return rec

    def add_schedule(
        self, task: LongTask, schedule: Schedule, *, task_ref: str | None = None
    ) -> tuple[ScheduleRecord, str]:
        """Register one schedule of ``task`` (not declared in its code). Returns the record
        and "added", or "unchanged" when the same schedule is registered already; a name
        taken by another schedule is refused."""
        ref = self._schedule_ref(task, task_ref)
        problems = schedule.problems(task, named=False)
        if problems:
            raise InvalidInput("; ".join(problems))
        name = schedule.name_for(task.name)
        existing = self.db.store.schedule_get(name)
        if existing is not None:
            if _same(existing, task, schedule, ref):
                return existing, "unchanged"
            raise InvalidInput(
                f"schedule {name!r} exists already (task {existing.task_name!r}, cron "
                f"{existing.cron!r}, {existing.timezone}); remove it first with "
                f"`longtask schedule rm {name}`, or give --name"
            )
        rec = self._record(task, schedule, ref, "cli", None)
        self.db.store.schedule_put(rec)
        return self.schedule(name), "added"

    def register_schedules(
        self, task: LongTask, *, task_ref: str | None = None
    ) -> list[tuple[str, str]]:
        """Bring the schedules declared in ``task`` into the database: add new ones, update
        changed ones, remove the declared ones that are gone from the code (schedules added
        by hand stay). Returns ``(name, "added" | "updated" | "unchanged" | "removed")``.
        A pause survives an update."""
        ref = self._schedule_ref(task, task_ref)
        store = self.db.store
        current = {s.name: s for s in store.schedules()}
        declared = {s.name_for(task.name): s for s in task.schedules}
        for name in declared:
            other = current.get(name)
            if other is not None and (other.origin != "declared" or other.task_name != task.name):
                # Checked for every name before anything is written.
                raise InvalidInput(
                    f"schedule name {name!r} is taken by a schedule of task "
                    f"{other.task_name!r} ({other.origin}); rename one of them (name=...) "
                    f"or remove the other with `longtask schedule rm {name}`"
                )
        out: list[tuple[str, str]] = []
        for name, schedule in declared.items():
            old = current.get(name)
            if old is not None and _same(old, task, schedule, ref):
                out.append((name, "unchanged"))
                continue
            # Same times: the next tick stays (a tick due now still fires).
            keep = None
            if old is not None and (old.cron, old.timezone) == (
                schedule.cron.strip(),
                schedule.timezone,
            ):
                keep = old.next_fire_at
            store.schedule_put(self._record(task, schedule, ref, "declared", keep))
            out.append((name, "updated" if old is not None else "added"))
        for name, old in current.items():
            if old.origin == "declared" and old.task_name == task.name and name not in declared:
                store.schedule_delete(name)
                out.append((name, "removed"))
        return out

    def remove_schedule(self, name: str) -> None:
        """Unregister a schedule; threads it started stay. (A declared one comes back at
        the next ``longtask schedule add TASKREF`` unless removed from the code.)"""
        if not self.db.store.schedule_delete(name):
            self.schedule(name)  # raises, naming the known schedules

    def pause_schedule(self, name: str) -> ScheduleRecord:
        """Fire nothing until resumed."""
        if not self.db.store.schedule_pause(name, True, None):
            self.schedule(name)
        return self.schedule(name)

    def resume_schedule(self, name: str) -> ScheduleRecord:
        """Fire again from the next tick: ticks that passed while paused are not caught up."""
        rec = self.schedule(name)
        nxt = next_tick(rec.cron, rec.timezone, self.clock())
        self.db.store.schedule_pause(name, False, nxt)
        return self.schedule(name)

    def schedule_of(self, thread_id: str) -> dict[str, Any] | None:
        """Which schedule started the thread, the tick, and the schedule's next fire time
        (None for a thread no schedule started)."""
        return schedule_of(self.db.store, thread_id)

    def _schedule_ref(self, task: LongTask, task_ref: str | None) -> str:
        ref = task_ref or find_ref(task)
        if not ref:
            raise InvalidInput(
                f"task {task.name!r} has no importable reference, so a schedule cannot load "
                "it later; define it in a module and pass task_ref='package.module:name'"
            )
        return ref

    def _record(
        self,
        task: LongTask,
        schedule: Schedule,
        ref: str,
        origin: str,
        next_fire_at: datetime | None,
    ) -> ScheduleRecord:
        cron = schedule.cron.strip()
        return ScheduleRecord(
            name=schedule.name_for(task.name),
            task_ref=ref,
            task_name=task.name,
            cron=cron,
            timezone=schedule.timezone,
            inputs=dict(schedule.inputs),
            catch_up=schedule.catch_up,
            origin=origin,
            paused=False,
            next_fire_at=next_fire_at or next_tick(cron, schedule.timezone, self.clock()),
            # kept on an update (ON CONFLICT leaves it): who first added it owns its threads
            owner=whoami(),
        )

    # -- firing ------------------------------------------------------------------------------

    def fire_due(
        self,
        now: datetime | None = None,
        *,
        launch: Launch | None = None,
        limit: int = 100,
        submit_run: Callable[[str], None] | None = None,
    ) -> list[Fired]:
        """Start a thread for every due tick of every unpaused schedule.

        ``now`` defaults to the runner's clock. ``launch`` says how the new threads start:
        ``"run"`` here, one after the other, once every schedule has moved on; ``"queue"``
        for ``longtask worker`` (the default on PostgreSQL); or a function given each new
        thread id. Safe to call from many processes at once: each tick starts one thread.

        A cron of the Server API records a run instead, handed to ``submit_run`` (serve's
        executor); fired by another process, ``serve`` takes it up in its loop.
        """
        now = now or self.clock()
        how: Launch = launch or ("queue" if self.db.url.scheme == "postgresql" else "run")
        mode = "worker" if how == "queue" else None
        store = self.db.store
        results: list[Fired] = []
        new: list[str] = []
        runs: list[str] = []
        # Threads fired by a process that stopped before starting them.
        waiting = [t for _, t in store.fires_unstarted()]
        with store.schedules_due(now, limit) as due:
            for rec in due.rows:
                fired = self._fire(rec, now, due, mode)
                results.append(fired)
                if fired.outcome == "fired" and fired.run_id:
                    runs.append(fired.run_id)
                elif fired.outcome == "fired" and fired.thread_id:
                    new.append(fired.thread_id)
        if submit_run is not None:
            for run_id in runs:
                submit_run(run_id)
        for thread_id in dict.fromkeys([*waiting, *new]):
            self._launch(thread_id, how)
        return results

    def _fire(
        self,
        rec: ScheduleRecord,
        now: datetime,
        due: DueSchedules,
        mode: str | None,
    ) -> Fired:
        store = self.db.store
        latest = latest_tick(rec.cron, rec.timezone, now)
        following = next_tick(rec.cron, rec.timezone, max(latest, now))
        if latest < rec.next_fire_at:
            # Nothing due after all (its cron changed under it): just look ahead.
            due.advance(rec.name, rec.next_fire_at, following)
            return Fired(rec.name, None, None, "nothing due")
        missed = 0
        for _t in ticks_between(rec.cron, rec.timezone, rec.next_fire_at, latest):
            missed += 1
            if missed > _COUNT_MISSED:
                break
        missed -= 1  # the latest is fired, not missed
        if rec.catch_up == "none" and (now - latest).total_seconds() > GRACE:
            due.advance(rec.name, rec.next_fire_at, following)
            log.info("schedule %s: %d tick(s) missed, not caught up", rec.name, missed + 1)
            return Fired(rec.name, latest, None, "missed", missed + 1)
        if rec.api is not None:
            return self._fire_api(rec, latest, following, due, missed)
        thread_id = tick_id(rec.name, latest)
        try:
            task = load_task(rec.task_ref)
            self._engine.new_thread(
                task, rec.inputs, thread_id, rec.task_ref, mode, owner=rec.owner
            )
            outcome = "fired"
        except ThreadExists:
            outcome = "already fired"
        except LongTaskError as exc:
            # Kept due: retried at the next fire (the module may import on another worker,
            # or after a deploy), and told once per new error rather than every round.
            message = f"cannot start {rec.task_ref}: {exc}"
            if rec.last_error != message:
                due.error(rec.name, message)
                log.warning("schedule %s: %s", rec.name, message)
            return Fired(rec.name, latest, None, f"error: {exc}", missed)
        store.fire_record(rec.name, latest, thread_id)
        due.advance(rec.name, rec.next_fire_at, following, latest, thread_id)
        if outcome == "fired":
            log.info("schedule %s fired thread %s", rec.name, thread_id)
        return Fired(rec.name, latest, thread_id, outcome, missed)

    def _fire_api(
        self,
        rec: ScheduleRecord,
        tick: datetime,
        following: datetime,
        due: DueSchedules,
        missed: int,
    ) -> Fired:
        """A cron of the Server API: its tick records a run (and, for a cron of an
        assistant, the new thread it runs on), which ``serve``'s executor carries out as
        any recorded run. The run's id (and the new thread's) derive from the cron and the
        tick, so a tick fired twice records one run."""
        api = rec.api or {}
        store = self.db.store
        end = api.get("end_time")
        if end is not None and tick.timestamp() > float(end):
            due.advance(rec.name, rec.next_fire_at, following)
            return Fired(rec.name, tick, None, "ended", missed)
        run_id, thread_id = cron_ids(rec.name, tick, api.get("thread_id"))
        request = cron_request(api.get("request") or {}, thread_id, rec.name)
        if api.get("thread_id") is None:
            metadata = {"graph_id": request.get("graph"), "cron_id": rec.name}
            store.api_thread_put(thread_id, metadata, owner=rec.owner)
        recorded = store.api_run_create(
            run_id,
            thread_id,
            str(api.get("assistant_id")),
            request,
            rec.owner,
            dict(api.get("metadata") or {}),
            webhook=api.get("webhook"),
            queued=True,
            once=True,
        )
        due.advance(rec.name, rec.next_fire_at, following, tick, thread_id)
        if recorded:
            log.info("cron %s recorded run %s on thread %s", rec.name, run_id, thread_id)
        return Fired(
            rec.name, tick, thread_id, "fired" if recorded else "already fired", missed, run_id
        )

    def _launch(self, thread_id: str, how: Launch) -> None:
        if callable(how):
            how(thread_id)
        else:
            self.start_fired(thread_id, run=how == "run")

    def start_fired(self, thread_id: str, *, run: bool = True) -> str:
        """Start a thread a schedule fired, if it has not started: queued for the workers
        (a thread fired for them), else run here until it completes, pauses or fails.
        Returns what happened."""
        store = self.db.store
        rec = store.get_thread(thread_id)
        if rec is None or rec.runs > 0 or rec.status != "pending":
            store.fire_started(thread_id)
            return "started before"
        if rec.mode == "worker" or not run:
            if rec.mode != "worker":
                return "left for a process that runs it"
            store.append_event(
                thread_id,
                "longtask.started",
                key="longtask.started",
                data={
                    "task": rec.task_name,
                    "version": rec.task_version,
                    "hash": rec.definition_hash,
                },
            )
            self._queue.wake(thread_id)
            store.fire_started(thread_id)
            return "queued"
        try:
            task = self._engine.load(rec)
        except LongTaskError as exc:
            log.warning("thread %s fired by a schedule cannot start: %s", thread_id, exc)
            return f"error: {exc}"

        def check(current: ThreadRecord) -> None:
            # Under the thread's lock, on a fresh read: another process may have run it.
            if current.runs > 0 or current.status != "pending":
                raise _NotNew()
            store.fire_started(thread_id)

        from longtask.steps import INPUTS_CHANNEL

        try:
            self._engine.advance(rec, task, {INPUTS_CHANNEL: rec.inputs}, first=True, check=check)
        except (_NotNew, ThreadBusy):
            return "started elsewhere"
        except LongTaskError as exc:
            # A failing step: the thread records it, as for any run.
            log.info("thread %s fired by a schedule stopped: %s", thread_id, exc)
            return f"stopped: {exc}"
        return "ran"


#: the namespace of the ids a cron's ticks derive (uuid5): the same in every process
_CRON_IDS = uuid.UUID("0b5e2c1e-7d1a-4f43-9a57-4c6f0e2d4b31")


def cron_ids(cron_id: str, tick: datetime, thread_id: str | None) -> tuple[str, str]:
    """The run a cron's tick records and the thread it runs on (the cron's thread, or a
    new one per tick): UUIDs, as the Server API's ids are, derived from cron and tick."""
    at = tick.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    run_id = str(uuid.uuid5(_CRON_IDS, f"{cron_id}/run/{at}"))
    return run_id, thread_id or str(uuid.uuid5(_CRON_IDS, f"{cron_id}/thread/{at}"))


def cron_request(template: dict[str, Any], thread_id: str, cron_id: str) -> dict[str, Any]:
    """The run request a cron's tick records: the cron's, with the thread it runs on
    (the request as LangGraph's Run shows it names its thread)."""
    request: dict[str, Any] = json.loads(json.dumps(template))
    kwargs = request.setdefault("kwargs", {})
    config = kwargs.setdefault("config", {})
    config.setdefault("configurable", {})["thread_id"] = thread_id
    request["cron_id"] = cron_id
    return request


def stable_ref(ref: str) -> str:
    """A file reference made absolute, so any process (in any directory) can load it."""
    from pathlib import Path

    target, _, attr = ref.rpartition(":")
    if target.endswith(".py") or "/" in target:
        return f"{Path(target).resolve()}:{attr}"
    return ref


def _same(rec: ScheduleRecord, task: LongTask, schedule: Schedule, ref: str) -> bool:
    return (
        rec.task_name == task.name
        and rec.task_ref == ref
        and rec.cron == schedule.cron.strip()
        and rec.timezone == schedule.timezone
        and rec.inputs == dict(schedule.inputs)
        and rec.catch_up == schedule.catch_up
    )
