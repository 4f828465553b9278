"""Prometheus metrics and readiness of a process that serves threads (serve, a worker).

``metrics_registry`` builds a ``prometheus_client`` registry of its own (never the global
one: two apps in one process would collide) with:

- ``StoredState``: the counts of the stored state (threads, steps, pauses, model calls,
  events, the workers' queue), read from the database at scrape time by aggregate queries
  (``Store.snapshot``), so every process reports the same numbers. They are gauges: they
  fall when ``longtask prune`` deletes threads, which a counter may not do.
- this process's own: database calls that timed out (PostgreSQL), the workers' queue wait,
  and the usual ``process_*`` series.

``Readiness`` answers ``/ready``: the database answers within a timeout, its schema is
current, and on PostgreSQL the queue's tables can be read.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from longtask.store import THREAD_STATUSES
from longtask.store._metrics import DURATION_BUCKETS, STEP_EVENTS, Snapshot

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry, Histogram

    from longtask.checkpointers import Database

log = logging.getLogger("longtask.metrics")

#: the media type of the Prometheus text format that ``generate_latest`` writes
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: how long a snapshot of the stored state is reused: scrapes of several Prometheus servers
#: (or a dashboard's and an alert's) within this time share one round of queries
SNAPSHOT_MAX_AGE = 2.0
#: seconds ``/ready`` waits for the database's answer (a load balancer's probe is short)
READY_TIMEOUT = 2.0
#: buckets (seconds) of the workers' queue wait
QUEUE_WAIT_BUCKETS = (0.05, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0)

_STEP_HELP = {
    "started": "Step runs started (step.started events stored), by task and step.",
    "completed": "Steps completed (step.completed events stored), by task and step.",
    "failed": "Steps failed for good (step.failed events stored), by task and step.",
    "retried": "Failed attempts tried again (step.retry events with outcome retry stored), "
    "by task and step.",
}


class StoredState:
    """A ``prometheus_client`` collector of the stored state's counts (see module doc)."""

    def __init__(self, db: Database, *, max_age: float = SNAPSHOT_MAX_AGE) -> None:
        self.db = db
        self.max_age = max_age
        self._lock = threading.Lock()
        self._last: tuple[float, Snapshot, float] | None = None
        self.errors = 0

    def _read(self) -> tuple[Snapshot, float] | None:
        with self._lock:  # concurrent scrapes wait for one read instead of each making one
            last = self._last
            if last is not None and time.monotonic() - last[0] < self.max_age:
                return last[1], last[2]
            started = time.monotonic()
            try:
                snap = self.db.store.snapshot()
            except Exception as exc:
                # Only the class: a driver's message may hold the database URL.
                log.warning("could not read the stored state for /metrics: %s", type(exc).__name__)
                self.errors += 1
                self._last = None
                return None
            took = time.monotonic() - started
            self._last = (time.monotonic(), snap, took)
            return snap, took

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        read = self._read()
        up = GaugeMetricFamily(
            "longtask_database_up",
            "1 when the last read of the stored state for these metrics succeeded, else 0 "
            "(then the stored-state series are missing from this scrape).",
            value=0 if read is None else 1,
        )
        yield up
        yield CounterMetricFamily(
            "longtask_metrics_read_errors",
            "Reads of the stored state for /metrics that failed in this process.",
            value=self.errors,
        )
        if read is None:
            return
        snap, took = read
        yield GaugeMetricFamily(
            "longtask_metrics_read_seconds",
            "How long the last read of the stored state for /metrics took.",
            value=took,
        )
        threads = GaugeMetricFamily(
            "longtask_threads", "Threads stored, by task and status.", labels=["task", "status"]
        )
        counts = {(task, status): n for task, status, n in snap.threads}
        # every status of every task, zeros too: an alert on a status sees 0, not nothing
        for task in sorted({task for task, _ in counts}):
            for status in THREAD_STATUSES:
                threads.add_metric([task, status], counts.get((task, status), 0))
        yield threads
        steps = {
            name: GaugeMetricFamily(
                f"longtask_steps_{name}", _STEP_HELP[name], labels=["task", "step"]
            )
            for name in STEP_EVENTS.values()
        }
        for task, step, name, n in snap.steps:
            steps[name].add_metric([task, step], n)
        yield from steps.values()
        durations = HistogramMetricFamily(
            "longtask_step_duration_seconds",
            "Time the finished steps of the stored threads ran (all their attempts; an "
            "approval or wait step's time includes the wait), by task and step.",
            labels=["task", "step"],
        )
        for task, step, count, total, below in snap.durations:
            bounds = [(_bound(b), float(n)) for b, n in zip(DURATION_BUCKETS, below, strict=True)]
            durations.add_metric([task, step], [*bounds, ("+Inf", float(count))], total)
        yield durations
        pauses = GaugeMetricFamily(
            "longtask_pauses_waiting",
            "Pauses of waiting threads (approvals, waits, gates), by task and kind.",
            labels=["task", "kind"],
        )
        oldest = GaugeMetricFamily(
            "longtask_pause_oldest_age_seconds",
            "How long the oldest pause of each task and kind has waited.",
            labels=["task", "kind"],
        )
        for task, kind, n, age in snap.pauses:
            pauses.add_metric([task, kind], n)
            oldest.add_metric([task, kind], age)
        yield pauses
        yield oldest
        yield from _model_families(snap)
        events = GaugeMetricFamily(
            "longtask_events_stored", "Events stored in the event log, by kind.", labels=["kind"]
        )
        for kind, n in snap.events:
            events.add_metric([kind], n)
        yield events
        webhooks = GaugeMetricFamily(
            "longtask_run_webhooks",
            "Ended runs of the LangGraph Server API created with a webhook, by the state of "
            "its delivery (owed, sent, failed).",
            labels=["state"],
        )
        found = dict(snap.webhooks)
        for state in ("owed", "sent", "failed"):
            webhooks.add_metric([state], found.get(state, 0))
        yield webhooks
        notices = GaugeMetricFamily(
            "longtask_notifications",
            "Notices of pauses, failures and ends (and reminders), by the state of their "
            "delivery (owed, sent, failed: given up, none: no target).",
            labels=["state"],
        )
        found = dict(snap.notifications)
        for state in ("owed", "sent", "failed", "none"):
            notices.add_metric([state], found.get(state, 0))
        yield notices
        if snap.queue:
            yield from _queue_families(snap)


def _bound(value: float) -> str:
    return repr(float(value))


def _model_families(snap: Snapshot) -> Iterator[Any]:
    from prometheus_client.core import GaugeMetricFamily

    calls = GaugeMetricFamily(
        "longtask_model_calls",
        "Model calls of agent steps (model.call events), by model.",
        labels=["model"],
    )
    tokens = GaugeMetricFamily(
        "longtask_model_tokens",
        "Tokens of model calls, by model and direction (input, output).",
        labels=["model", "direction"],
    )
    cost = GaugeMetricFamily(
        "longtask_model_cost_dollars",
        "Cost of model calls at the prices longtask knows (see agent_step(prices=...)), by model.",
        labels=["model"],
    )
    unpriced = GaugeMetricFamily(
        "longtask_model_calls_unpriced",
        "Model calls whose cost is unknown (a model without a price), by model.",
        labels=["model"],
    )
    for model, n, tokens_in, tokens_out, dollars, unknown in snap.models:
        calls.add_metric([model], n)
        tokens.add_metric([model, "input"], tokens_in)
        tokens.add_metric([model, "output"], tokens_out)
        cost.add_metric([model], dollars)
        unpriced.add_metric([model], unknown)
    yield from (calls, tokens, cost, unpriced)
    charged = {
        "tokens": GaugeMetricFamily(
            "longtask_budget_tokens",
            "Tokens charged to the threads' budgets, by task.",
            labels=["task"],
        ),
        "cost": GaugeMetricFamily(
            "longtask_budget_cost_dollars",
            "Cost charged to the threads' budgets (model calls and ctx.charge), by task.",
            labels=["task"],
        ),
        "tool_calls": GaugeMetricFamily(
            "longtask_budget_tool_calls",
            "Tool calls charged to the threads' budgets, by task.",
            labels=["task"],
        ),
    }
    for task, n_tokens, dollars, tool_calls in snap.usage:
        charged["tokens"].add_metric([task], n_tokens)
        charged["cost"].add_metric([task], dollars)
        charged["tool_calls"].add_metric([task], tool_calls)
    yield from charged.values()


def _queue_families(snap: Snapshot) -> Iterator[Any]:
    from prometheus_client.core import GaugeMetricFamily

    jobs = GaugeMetricFamily(
        "longtask_queue_jobs",
        "Jobs of the workers' queue, by queue and state (waiting: due and not started; "
        "scheduled: due later, e.g. a retry's back-off or a deadline; running).",
        labels=["queue", "state"],
    )
    oldest = GaugeMetricFamily(
        "longtask_queue_oldest_wait_seconds",
        "How long the oldest due job of each queue has waited for a worker.",
        labels=["queue"],
    )
    for queue, state, n, wait in snap.queue:
        jobs.add_metric([queue, state], n)
        if state == "waiting":
            oldest.add_metric([queue], wait)
    yield jobs
    yield oldest


class ProcessCounts:
    """This process's own counts: database calls that timed out (PostgreSQL's bound, see
    ``checkpointers._bounded``) and statements that failed for a connection error (see
    ``store._pooled``)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily

        outage = getattr(self.db, "outage", None)
        if outage is not None:
            from longtask.store._pooled import failed_calls

            yield CounterMetricFamily(
                "longtask_db_timeouts",
                "Database calls of this process that gave up after $LONGTASK_DB_TIMEOUT "
                "(PostgreSQL).",
                value=outage.timeouts,
            )
            yield CounterMetricFamily(
                "longtask_db_errors",
                "Statements of this process (longtask's tables, checkpoints) that failed "
                "with a connection error, timeouts included (PostgreSQL).",
                value=failed_calls(),
            )


def metrics_registry(db: Database, *, max_age: float = SNAPSHOT_MAX_AGE) -> CollectorRegistry:
    """A registry of the stored state's counts, this process's counts, and the usual
    ``process_*`` series."""
    from prometheus_client import CollectorRegistry, ProcessCollector

    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoredState(db, max_age=max_age))
    registry.register(ProcessCounts(db))
    ProcessCollector(registry=registry)
    return registry


def queue_wait_histogram(registry: CollectorRegistry) -> Histogram:
    """The workers' queue wait, observed by a worker as it starts each job."""
    from prometheus_client import Histogram

    return Histogram(
        "longtask_queue_wait_seconds",
        "Time a job of the workers' queue waited between becoming due and this worker starting it.",
        buckets=QUEUE_WAIT_BUCKETS,
        registry=registry,
    )


def exposition(registry: CollectorRegistry) -> bytes:
    """The registry in the Prometheus text format."""
    from prometheus_client import generate_latest

    return generate_latest(registry)


class Readiness:
    """Answers ``/ready`` for a process on ``db``: each check ``"ok"`` or what is wrong.

    The database is asked in a thread of its own and waited for ``timeout`` seconds: a
    database that does not answer makes the probe fail fast instead of hanging it. While
    an unanswered check is still out, the next probe reports it rather than starting one
    more."""

    def __init__(self, db: Database, *, timeout: float = READY_TIMEOUT) -> None:
        self.db = db
        self.timeout = timeout
        self._lock = threading.Lock()
        self._pending: threading.Thread | None = None
        self._result: dict[str, str] | None = None

    def check(self) -> tuple[bool, dict[str, str]]:
        with self._lock:
            if self._pending is not None and self._pending.is_alive():
                return False, {"database": self._no_answer()}
            box: dict[str, dict[str, str]] = {}

            def probe() -> None:
                try:
                    box["checks"] = self.db.store.readiness()
                except Exception as exc:
                    # The class only: a driver's message may hold the database URL.
                    box["checks"] = {
                        "database": f"unreachable ({type(exc).__name__}); check that the "
                        "server is running and the URL (--db / $LONGTASK_DB) is right"
                    }

            worker = threading.Thread(target=probe, name="longtask-ready", daemon=True)
            self._pending = worker
            worker.start()
        worker.join(self.timeout)
        if worker.is_alive():
            return False, {"database": self._no_answer()}
        checks = box["checks"]
        return all(v == "ok" for v in checks.values()), checks

    def _no_answer(self) -> str:
        return f"no answer within {self.timeout:g} s"
