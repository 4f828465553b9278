"""Threads served by workers, driven in process (PostgreSQL): what a caller queues, and what
a worker's job does with it — retry waits and deadlines become scheduled jobs."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from longtask import (
    InvalidInput,
    LongTask,
    Retry,
    Runner,
    Stage,
    StepContext,
    approval,
    function_step,
)
from longtask.errors import WorkersNeedPostgres
from longtask.runtime._queue import serve_thread

START = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.t = START

    def __call__(self) -> datetime:
        return self.t


def _jobs(url: str) -> list[tuple[str, str, Any]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT task_name, status, scheduled_at FROM procrastinate_jobs ORDER BY id"
        ).fetchall()
    return [(r[0], r[1], r[2]) for r in rows]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def caller(pg_url: str, clock: Clock) -> Iterator[Runner]:
    r = Runner(pg_url, clock=clock)
    yield r
    r.close()


@pytest.fixture
def worker(pg_url: str, clock: Clock) -> Iterator[Runner]:
    r = Runner(pg_url, clock=clock, worker="w-test")
    yield r
    r.close()


def flaky_task(calls: list[int]) -> LongTask:
    def call(ctx: StepContext) -> int:
        calls.append(ctx.attempt)
        if ctx.attempt < 2:
            raise ConnectionError("down")
        return ctx.attempt

    return LongTask(
        "flaky",
        stages=[
            Stage(
                "s",
                [
                    function_step(
                        call,
                        name="call",
                        retry=Retry(max_attempts=3, initial_wait=90, max_wait=90, jitter=False),
                    )
                ],
            )
        ],
    )


def test_submit_queues_and_a_worker_job_runs(caller: Runner, worker: Runner, pg_url: str) -> None:
    calls: list[int] = []
    task = flaky_task(calls)
    thread = caller.submit(task, thread_id="t-q", task_ref="tests.nowhere:task")
    assert caller.status(thread).status == "pending" and calls == []
    assert [(n, s) for n, s, _ in _jobs(pg_url)] == [("longtask.advance", "todo")]
    # A second wake-up while one waits is folded into it (queueing lock).
    caller.wake(thread)
    assert len(_jobs(pg_url)) == 1

    worker.engine._graphs.clear()
    worker.resume(thread, task=task)  # what the job does, with the task given directly
    status = worker.status(thread)
    # The retry wait is not slept through: the thread waits for a scheduled wake-up.
    assert calls == [1]
    assert status.status == "pending"
    (waiting,) = status.waiting
    assert waiting["kind"] == "retry" and waiting["step"] == "call"
    assert waiting["at"] == pytest.approx((START + timedelta(seconds=90)).timestamp())
    attempts = worker.db.store.attempts(thread)[("call", -1)]
    assert attempts.failed == 1


def test_a_caller_queues_answers_instead_of_running(caller: Runner, pg_url: str) -> None:
    gate = approval("go", plan=lambda ctx: {"ok": True}, timeout=3600)
    task = LongTask(
        "gate",
        stages=[Stage("a", [function_step(lambda ctx: 1, name="one")]), Stage("b", [gate])],
    )
    with Runner(pg_url, worker="w-local") as local:
        local.engine.load = lambda rec: task  # type: ignore[method-assign]
        thread = local.submit(task, thread_id="t-gate", task_ref="x:y")
        serve_thread(local, thread)  # the worker's job runs it to the approval
        assert local.status(thread).status == "waiting_user"
    # the approval's deadline became a wake-up scheduled for then: nothing polls
    later = [(n, at) for n, status, at in _jobs(pg_url) if n == "longtask.wake"]
    assert len(later) == 1
    assert abs((later[0][1] - datetime.now(UTC)).total_seconds() - 3600) < 120
    (pending,) = caller.pending(thread, task=task)
    with pytest.raises(InvalidInput, match="approves plan"):
        caller.approve(thread, "go", by="ops", plan_hash="0" * 16, task=task)
    caller.approve(thread, "go", by="ops", task=task)
    assert caller.status(thread).status == "waiting_user"  # not run here: queued
    inbox = caller.db.store.inbox_peek(thread)
    assert len(inbox) == 1 and inbox[0][1]["expect_interrupt"] == pending.interrupt_id
    with Runner(pg_url, worker="w-local") as local:
        local.engine.load = lambda rec: task  # type: ignore[method-assign]
        assert serve_thread(local, thread) == "continued"
        assert local.status(thread).status == "completed"
        assert local.db.store.inbox_peek(thread) == []


def test_workers_need_postgres(tmp_path: Any) -> None:
    with Runner(f"sqlite:///{tmp_path / 'x.db'}") as runner:
        task = LongTask("t", stages=[Stage("a", [function_step(lambda ctx: 1, name="one")])])
        with pytest.raises(WorkersNeedPostgres, match="PostgreSQL"):
            runner.submit(task, thread_id="t-sqlite", task_ref="x:y")
        assert runner.threads() == []
