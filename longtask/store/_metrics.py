"""Aggregate reads of the stored state for ``/metrics`` and ``/ready`` (mixed into Store).

Every number here is read from the database when it is asked for, so every process that
serves metrics (serve, each worker) reports the same values for the same database. Each read
is one aggregate statement (GROUP BY in SQL): its answer grows with the number of tasks,
steps, kinds and models, never with the number of threads or events, and no Python loop runs
over a thread's history.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from longtask.store._schema import POSTGRES, SCHEMA_VERSION, Dialect

#: upper bounds (seconds) of the step duration histogram's buckets: a function step takes
#: well under a second, an agent step minutes, an approval step hours or days
DURATION_BUCKETS: tuple[float, ...] = (
    0.1,
    0.5,
    1.0,
    5.0,
    15.0,
    60.0,
    300.0,
    900.0,
    3600.0,
    14400.0,
    86400.0,
)

#: the step events counted by ``Snapshot.steps``, by the name the metric gives them
STEP_EVENTS = {
    "step.started": "started",
    "step.completed": "completed",
    "step.failed": "failed",
    "step.retry": "retried",
}

#: statuses of a thread that waits for a person or an outside event
_PAUSED = ("waiting_user", "waiting_external")

#: the workers' jobs (procrastinate's table) that wait, are scheduled for later or run, by
#: queue; a waiting job's wait starts when it became due (its scheduled time, else when it
#: was queued)
_QUEUE_SQL = (
    "SELECT queue_name, state, COUNT(*), "
    "COALESCE(EXTRACT(EPOCH FROM now() - MIN(due)), 0) FROM ("
    "SELECT j.queue_name, CASE WHEN j.status = 'doing' THEN 'running' "
    "WHEN j.scheduled_at > now() THEN 'scheduled' ELSE 'waiting' END AS state, "
    "CASE WHEN j.status = 'todo' AND (j.scheduled_at IS NULL OR j.scheduled_at <= now()) "
    "THEN COALESCE(j.scheduled_at, (SELECT MAX(e.at) FROM procrastinate_events e "
    "WHERE e.job_id = j.id AND e.type IN ('deferred', 'deferred_for_retry', 'retried'))) "
    "END AS due "
    "FROM procrastinate_jobs j WHERE j.status IN ('todo', 'doing')) q "
    "GROUP BY queue_name, state"
)


@dataclass
class Snapshot:
    """The stored state's numbers at one moment (see ``MetricsTables.snapshot``)."""

    #: (task, status, threads)
    threads: list[tuple[str, str, int]] = field(default_factory=list)
    #: (task, step, started|completed|failed|retried, count)
    steps: list[tuple[str, str, str, int]] = field(default_factory=list)
    #: (task, step, finished step runs, seconds in all, count at or below each bucket)
    durations: list[tuple[str, str, int, float, list[int]]] = field(default_factory=list)
    #: (task, pause kind, pauses waiting, seconds the oldest has waited)
    pauses: list[tuple[str, str, int, float]] = field(default_factory=list)
    #: (model, calls, input tokens, output tokens, cost, calls of unknown cost)
    models: list[tuple[str, int, int, int, float, int]] = field(default_factory=list)
    #: (task, tokens, cost, tool calls) charged to the threads' budgets
    usage: list[tuple[str, int, float, int]] = field(default_factory=list)
    #: (event kind, events stored)
    events: list[tuple[str, int]] = field(default_factory=list)
    #: (owed|sent|failed, ended runs of the Server API with a webhook in that state)
    webhooks: list[tuple[str, int]] = field(default_factory=list)
    #: (owed|sent|failed|none, notices of pauses, failures and ends in that state)
    notifications: list[tuple[str, int]] = field(default_factory=list)
    #: (queue, waiting|scheduled|running, jobs, seconds the oldest due job has waited);
    #: empty on SQLite and where procrastinate's tables are missing
    queue: list[tuple[str, str, int, float]] = field(default_factory=list)


def _text(dialect: Dialect, column: str, *path: str) -> str:
    """A JSON text value at ``path`` of a TEXT column holding JSON (or, on PostgreSQL, of a
    jsonb value: the cast is then a no-op)."""
    if dialect is POSTGRES:
        return f"({column}::jsonb #>> '{{{','.join(path)}}}')"
    return f"json_extract({column}, '$.{'.'.join(path)}')"


def _number(dialect: Dialect, column: str, *path: str) -> str:
    if dialect is POSTGRES:
        return f"({_text(dialect, column, *path)})::float8"
    return _text(dialect, column, *path)


class MetricsTables:
    """Mixed into Store."""

    dialect: Dialect

    def _run(
        self, sql: str, params: Sequence[Any] = (), binary: bool = False
    ) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def _table_exists(self, name: str) -> bool:
        raise NotImplementedError

    def schema_version(self) -> int:
        raise NotImplementedError

    def metrics_now(self) -> float:
        """The clock pause ages are measured by: the database server's on PostgreSQL (the
        one every process shares, see ``PostgresStore.server_time``), else this machine's."""
        server_time = getattr(self, "server_time", None)
        return float(server_time()) if server_time is not None else time.time()

    @contextmanager
    def _reads(self) -> Iterator[Callable[[str], list[tuple[Any, ...]]]]:
        """Where the snapshot's statements run: plain reads (SQLite; a transaction there
        would take the write lock). PostgresStore runs them in one transaction."""
        yield lambda sql: self._run(sql)

    def snapshot(self) -> Snapshot:
        """Every number of the stored state that ``/metrics`` reports (a handful of
        aggregate statements)."""
        now = self.metrics_now()
        queue = self.dialect is POSTGRES and self._table_exists("procrastinate_jobs")
        with self._reads() as run:
            return self._snapshot(run, now, queue)

    def _snapshot(
        self, run: Callable[[str], list[tuple[Any, ...]]], now: float, queue: bool
    ) -> Snapshot:
        d = self.dialect
        snap = Snapshot()
        snap.threads = [
            (str(r[0]), str(r[1]), int(r[2]))
            for r in run(
                "SELECT task_name, status, COUNT(*) FROM longtask_threads "
                "GROUP BY task_name, status"
            )
        ]
        # A retry is an attempt that failed and is tried again (step.retry with outcome
        # "retry"); the same event with outcome "failed" or "paused" ended the attempts.
        # CASE looks into the JSON of step.retry events only.
        outcome = _text(d, "e.data", "outcome")
        snap.steps = [
            (str(r[0]), str(r[1]), STEP_EVENTS[str(r[2])], int(r[3]))
            for r in run(
                "SELECT t.task_name, e.step, e.kind, SUM(CASE WHEN e.kind <> 'step.retry' "
                f"THEN 1 WHEN {outcome} = 'retry' THEN 1 ELSE 0 END) FROM longtask_events e "
                "JOIN longtask_threads t ON t.thread_id = e.thread_id "
                "WHERE e.step IS NOT NULL AND e.kind IN "
                "('step.started', 'step.completed', 'step.failed', 'step.retry') "
                "GROUP BY t.task_name, e.step, e.kind"
            )
            if int(r[3])
        ]
        buckets = ", ".join(
            f"SUM(CASE WHEN u.wall_time <= {b!r} THEN 1 ELSE 0 END)" for b in DURATION_BUCKETS
        )
        # A step's usage row holds the time its finished runs took (its step events keep it
        # up to date, see migration 13); a step running now is counted when it ends.
        snap.durations = [
            (str(r[0]), str(r[1]), int(r[2]), float(r[3] or 0), [int(n or 0) for n in r[4:]])
            for r in run(
                f"SELECT t.task_name, u.step, COUNT(*), SUM(u.wall_time), {buckets} "
                "FROM longtask_usage u JOIN longtask_threads t ON t.thread_id = u.thread_id "
                "WHERE u.finished_at IS NOT NULL AND u.running_since IS NULL "
                "GROUP BY t.task_name, u.step"
            )
        ]
        snap.pauses = [
            (str(r[0]), str(r[1] or "unknown"), int(r[2]), max(0.0, now - float(r[3])))
            for r in run(self._pauses_sql())
        ]
        # PostgreSQL parses each call's JSON once: a cast per field parsed it six times
        # (materialized: the planner would fold the subquery into its casts again)
        if d is POSTGRES:
            j = "x.j"
            calls = (
                "WITH x AS MATERIALIZED (SELECT data::jsonb AS j FROM longtask_events "
                "WHERE kind = 'model.call') "
            )
        else:
            j, calls = (
                "x.data",
                "WITH x AS (SELECT data FROM longtask_events WHERE kind = 'model.call') ",
            )
        model = f"COALESCE({_text(d, j, 'model')}, {_text(d, j, 'model_requested')})"
        cost = _number(d, j, "cost")
        snap.models = [
            (
                str(r[0] or "unknown"),
                int(r[1]),
                int(r[2] or 0),
                int(r[3] or 0),
                float(r[4] or 0),
                int(r[5] or 0),
            )
            for r in run(
                f"{calls}SELECT {model}, COUNT(*), SUM({_number(d, j, 'usage', 'input')}), "
                f"SUM({_number(d, j, 'usage', 'output')}), SUM({cost}), "
                f"SUM(CASE WHEN {cost} IS NULL THEN 1 ELSE 0 END) "
                f"FROM x GROUP BY {model}"
            )
        ]
        snap.usage = [
            (str(r[0]), int(r[1] or 0), float(r[2] or 0), int(r[3] or 0))
            for r in run(
                "SELECT t.task_name, SUM(b.tokens), SUM(b.cost), SUM(b.tool_calls) "
                "FROM longtask_budgets b JOIN longtask_threads t ON t.thread_id = b.thread_id "
                "GROUP BY t.task_name"
            )
        ]
        snap.events = [
            (str(r[0]), int(r[1]))
            for r in run("SELECT kind, COUNT(*) FROM longtask_events GROUP BY kind")
        ]
        # The runs table's partial index holds the owed ones; the rest are counted once.
        snap.webhooks = [
            (str(r[0]), int(r[1]))
            for r in run(
                "SELECT COALESCE(webhook_state, 'owed'), COUNT(*) FROM longtask_api_runs "
                "WHERE webhook IS NOT NULL AND status NOT IN ('pending', 'running') "
                "GROUP BY COALESCE(webhook_state, 'owed')"
            )
        ]
        snap.notifications = [
            (str(r[0]), int(r[1]))
            for r in run(
                "SELECT COALESCE(state, 'owed'), COUNT(*) FROM longtask_notifications "
                "GROUP BY COALESCE(state, 'owed')"
            )
        ]
        if queue:
            snap.queue = [
                (str(r[0]), str(r[1]), int(r[2]), float(r[3] or 0)) for r in run(_QUEUE_SQL)
            ]
        return snap

    def _pauses_sql(self) -> str:
        """Pauses of waiting threads by task and kind, with when the oldest began: the time
        of the last event of its step (the request's ``approval.required`` or
        ``wait.started``, a gate's ``budget.exceeded``...), else the thread's last change.
        The event is found through the thread's index from its newest end."""
        d = self.dialect
        if d is POSTGRES:
            items = "CROSS JOIN LATERAL jsonb_array_elements(t.waiting::jsonb) AS w(value)"
            step, kind = "w.value->>'step'", "w.value->>'kind'"
        else:
            items = ", json_each(t.waiting) AS w"
            step, kind = "json_extract(w.value, '$.step')", "json_extract(w.value, '$.kind')"
        statuses = ", ".join(f"'{s}'" for s in _PAUSED)
        return (
            "SELECT task, kind, COUNT(*), MIN(since) FROM ("
            f"SELECT t.task_name AS task, {kind} AS kind, COALESCE(("
            "SELECT e.ts FROM longtask_events e WHERE e.thread_id = t.thread_id "
            f"AND e.step = {step} ORDER BY e.id DESC LIMIT 1), t.updated_at) AS since "
            f"FROM longtask_threads t {items} "
            f"WHERE t.status IN ({statuses}) AND t.waiting IS NOT NULL) p "
            "GROUP BY task, kind"
        )

    def job_wait(self, job_id: int) -> float | None:
        """Seconds job ``job_id`` of the workers' queue waited between becoming due and a
        worker starting it (None when its events are gone)."""
        rows = self._run(
            "SELECT EXTRACT(EPOCH FROM s.at - COALESCE(j.scheduled_at, d.at)) "
            "FROM procrastinate_jobs j "
            "JOIN LATERAL (SELECT MAX(at) AS at FROM procrastinate_events "
            "WHERE job_id = j.id AND type = 'started') s ON true "
            "JOIN LATERAL (SELECT MAX(at) AS at FROM procrastinate_events "
            "WHERE job_id = j.id AND type IN ('deferred', 'deferred_for_retry', 'retried')) d "
            "ON true WHERE j.id = ?",
            (job_id,),
        )
        if not rows or rows[0][0] is None:
            return None
        return max(0.0, float(rows[0][0]))

    def readiness(self) -> dict[str, str]:
        """What ``/ready`` checks, each ``"ok"`` or what is wrong with it: the database
        answers, its schema is this longtask's, and (PostgreSQL) the workers' queue tables
        can be read. Raises when the database does not answer at all."""
        checks = {"database": "ok"}
        version = self.schema_version()  # the first statement: raises if unreachable
        if version == SCHEMA_VERSION:
            checks["schema"] = "ok"
        elif version > SCHEMA_VERSION:
            checks["schema"] = (
                f"at version {version}, newer than this longtask's {SCHEMA_VERSION}: upgrade "
                "the langgraph-longtask package"
            )
        else:
            checks["schema"] = (
                f"at version {version}, this longtask needs {SCHEMA_VERSION}: run "
                "`longtask db upgrade`"
            )
        if self.dialect is POSTGRES:
            try:
                self._run(
                    "SELECT (SELECT 1 FROM procrastinate_jobs LIMIT 1), "
                    "(SELECT 1 FROM procrastinate_workers LIMIT 1), "
                    "(SELECT 1 FROM procrastinate_events LIMIT 1)"
                )
                checks["queue"] = "ok"
            except Exception:
                checks["queue"] = (
                    "procrastinate's job queue tables cannot be read: run `longtask db upgrade`"
                )
        return checks
