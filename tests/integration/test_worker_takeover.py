"""Taking over the jobs of a stalled worker (issue 50, item 7), on the real PostgreSQL queue:
a job whose thread got a wake-up queued while it ran is put back all the same (its
queueing lock released in the same transaction), a job another worker took over is left
alone, and one job that cannot be put back holds up no other. And the sweep of parents
whose sub-tasks all ended finds them however many parents wait on open children."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from longtask import LongTask, Runner, Stage, approval, subtask_step
from longtask._runner import make_worker
from longtask.checkpointers import Database
from longtask.runtime._queue import Queue
from longtask.runtime._worker import Worker


@pytest.fixture
def db(pg_url: str) -> Iterator[Database]:
    database = Database.open(pg_url)
    yield database
    database.close()


@pytest.fixture
def queue(db: Database) -> Iterator[Queue]:
    q = Queue(db, None)
    yield q
    q.close()


def _jobs(pg_url: str) -> dict[int, tuple[str, str | None, str]]:
    """Every job: id -> (status, queueing lock, thread)."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT id, status, queueing_lock, args->>'thread_id' FROM procrastinate_jobs"
        ).fetchall()
    return {int(r[0]): (str(r[1]), r[2], str(r[3])) for r in rows}


def _run_by_dead_worker(pg_url: str, job_ids: list[int]) -> int:
    """Mark the jobs running on a worker whose last heartbeat is an hour old; its id."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        row = conn.execute(
            "INSERT INTO procrastinate_workers (last_heartbeat) "
            "VALUES (now() - interval '1 hour') RETURNING id"
        ).fetchone()
        assert row is not None
        conn.execute(
            "UPDATE procrastinate_jobs SET status = 'doing', worker_id = %s WHERE id = ANY(%s)",
            (row[0], job_ids),
        )
    return int(row[0])


def _only_job(pg_url: str, thread: str) -> int:
    (job,) = [j for j, (_, _, t) in _jobs(pg_url).items() if t == thread]
    return job


def test_a_stalled_job_is_put_back_though_a_wake_up_holds_its_queueing_lock(
    pg_url: str, db: Database, queue: Queue
) -> None:
    queue.wake("t-busy")
    queue.wake("t-plain")
    busy, plain = _only_job(pg_url, "t-busy"), _only_job(pg_url, "t-plain")
    dead = _run_by_dead_worker(pg_url, [busy, plain])
    queue.wake("t-busy")  # queued while the job ran: the queueing lock binds waiting jobs only
    (waiting,) = [j for j in _jobs(pg_url) if j not in (busy, plain)]

    assert db.store.job_take_over(busy, dead).startswith("retried, its queueing lock released")
    assert db.store.job_take_over(plain, dead) == "retried"
    jobs = _jobs(pg_url)
    # Both wake-ups of t-busy wait; the new one keeps the lock that dedupes later wake-ups.
    assert jobs[busy] == ("todo", None, "t-busy")
    assert jobs[waiting] == ("todo", "t-busy", "t-busy")
    assert jobs[plain] == ("todo", "t-plain", "t-plain")
    queue.wake("t-busy")  # covered by the waiting one
    assert len(_jobs(pg_url)) == 3


def test_a_job_no_longer_the_stalled_workers_is_left_alone(
    pg_url: str, db: Database, queue: Queue
) -> None:
    queue.wake("t-taken")
    job = _only_job(pg_url, "t-taken")
    dead = _run_by_dead_worker(pg_url, [job])
    other = _run_by_dead_worker(pg_url, [job])  # taken over and fetched by another worker
    assert db.store.job_take_over(job, dead) is None
    assert _jobs(pg_url)[job][0] == "doing"
    assert db.store.job_take_over(job, other) == "retried"
    assert db.store.job_take_over(job, other) is None  # put back already


@pytest.fixture
def worker(pg_url: str) -> Iterator[Worker]:
    w = make_worker(pg_url, name="w-takeover", stalled_after=1.0)
    yield w
    w.runner.close()


def test_one_stalled_job_that_cannot_be_put_back_holds_up_no_other(
    pg_url: str, queue: Queue, worker: Worker, caplog: pytest.LogCaptureFixture
) -> None:
    threads = ["t-broken", "t-a", "t-b"]
    for thread in threads:
        queue.wake(thread)
    ids = [_only_job(pg_url, t) for t in threads]
    _run_by_dead_worker(pg_url, ids)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        # A real failure of the database for the first takeover tried, whichever job it is
        # (the sequence does not roll back with the refusal).
        conn.execute("CREATE SEQUENCE lt_refusals")
        conn.execute(
            "CREATE FUNCTION lt_refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "IF nextval('lt_refusals') = 1 THEN RAISE EXCEPTION 'refused for the test'; END IF; "
            "RETURN NEW; END $$"
        )
        conn.execute(
            "CREATE TRIGGER lt_refuse BEFORE UPDATE ON procrastinate_jobs FOR EACH ROW "
            "EXECUTE FUNCTION lt_refuse()"
        )

    async def take_over() -> list[int]:
        async with worker.app.open_async():
            return await worker._take_over()

    with caplog.at_level(logging.WARNING, logger="longtask.workers"):
        retried = asyncio.run(take_over())
    jobs = _jobs(pg_url)
    (refused,) = [j for j in ids if jobs[j][0] == "doing"]
    assert sorted(retried) == sorted(j for j in ids if j != refused)
    assert sorted(jobs[j][0] for j in ids) == ["doing", "todo", "todo"]
    failed = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [r.getMessage() for r in failed] == [
        f"could not retry job {refused} (thread {jobs[refused][2]}) of a stalled worker"
    ]
    assert "refused for the test" in str(failed[0].exc_info[1] if failed[0].exc_info else "")
    # The next round puts it back.
    assert asyncio.run(take_over()) == [refused]


#: a parent of two children that each wait for a person
GATED = LongTask(
    "takeover_gated_parent",
    stages=[
        Stage(
            "fan",
            [
                subtask_step(
                    "fan",
                    LongTask("takeover_gated_child", stages=[Stage("ok", [approval("ok")])]),
                    over=lambda ctx: [{}, {}],
                )
            ],
        )
    ],
)


def test_the_sweep_finds_a_parent_whose_children_ended_behind_parents_still_waiting(
    db_url: str,
) -> None:
    with Runner(db_url) as runner:
        for parent in ("sweep-a", "sweep-b"):
            runner.start(GATED, thread_id=parent)
            assert runner.status(parent).status == "waiting_external"
        store: Any = runner.db.store
        # sweep-b's children ended, and the continuation died with its process.
        children = [r.child for r in store.subtask_rows("sweep-b")]
        for child in children:
            store.set_status(child, "cancelled")
        assert store.subtask_parents_waiting(1) == ["sweep-b"]
        assert store.subtask_parents_waiting(10) == ["sweep-b"]
