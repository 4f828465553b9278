"""A worker whose code lacks a thread's definition hands the job back without touching the
thread (runtime._routing), driven in process; and what the heartbeat rows say each worker
serves."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import run_cli

from longtask import Runner
from longtask._runner import make_worker
from longtask.runtime._routing import HANDBACK_FIRST, HANDBACK_MAX, Lacking, Routing
from longtask.runtime._worker import Worker

MODULE = """
from longtask import LongTask, Stage, function_step, versions


def make(version):
    def body(ctx):
        return {{"version": version}}

    step = function_step(body, name="step")
    return LongTask("routed", version=version, stages=[Stage("s", [step])])


task = versions({tasks})
"""


def _write(directory: Path, name: str, versions: list[str]) -> None:
    tasks = ", ".join(f"make({v!r})" for v in versions)
    (directory / f"{name}.py").write_text(MODULE.format(tasks=tasks))
    sys.modules.pop(name, None)


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.syspath_prepend(str(tmp_path))
    # A module rewritten within one second must not be read back from a stale .pyc.
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    yield tmp_path
    for name in ("handback_v1", "handback_both"):
        sys.modules.pop(name, None)


@pytest.fixture
def worker(pg_url: str) -> Iterator[Worker]:
    w = make_worker(pg_url, name="w-route")
    yield w
    w.runner.close()


def _snapshot(url: str, thread_id: str) -> dict[str, list[str]]:
    """Every row of longtask's tables that belongs to the thread."""
    with psycopg.connect(url) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT table_name FROM information_schema.columns WHERE column_name = "
                "'thread_id' AND table_schema = 'public' AND table_name LIKE 'longtask%%' "
                "ORDER BY table_name"
            ).fetchall()
        ]
        assert "longtask_threads" in tables and "longtask_leases" in tables
        return {
            t: sorted(
                repr(row)
                for row in conn.execute(
                    f"SELECT * FROM {t} WHERE thread_id = %s",  # type: ignore[arg-type]
                    (thread_id,),
                ).fetchall()
            )
            for t in tables
        }


def _wakes(url: str, thread_id: str) -> list[tuple[str, str, str]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT task_name, status, queue_name FROM procrastinate_jobs "
            "WHERE args->>'thread_id' = %s ORDER BY id",
            (thread_id,),
        ).fetchall()
    return [(r[0], r[1], r[2]) for r in rows]


def _v2_on_v1_code(modules: Path, runner: Runner, thread_id: str, queue: str = "longtask") -> str:
    """A thread recorded on v2 whose task reference now names v1 only (v2 was rolled back
    on this worker's machine)."""
    _write(modules, "handback_both", ["2", "1"])
    import handback_both

    runner.submit(
        handback_both.task.newest, thread_id=thread_id, task_ref="handback_v1:task", queue=queue
    )
    _write(modules, "handback_v1", ["1"])
    return handback_both.task.newest.definition_hash


def test_a_worker_without_the_definition_hands_the_job_back_untouched(
    pg_url: str, modules: Path, worker: Worker
) -> None:
    with Runner(pg_url) as caller:
        digest = _v2_on_v1_code(modules, caller, "t-v2", queue="blue")
        before = _snapshot(pg_url, "t-v2")
        assert len(before["longtask_events"]) == 1  # longtask.started, by submit
        first_job = _wakes(pg_url, "t-v2")

        outcome = worker._job("t-v2", queue="blue")
        assert outcome == f"handed back: lacks definition {digest[:12]} (v2)"
        outcome = worker._job("t-v2", queue="blue")
        assert outcome.startswith("handed back")

        assert _snapshot(pg_url, "t-v2") == before  # no lease, no event, no inbox change
        assert caller.status("t-v2").status == "pending"
        # a wake-up for later on the job's own queue, per hand-back; the job in the queue
        # when the test began stays as it was
        wakes = _wakes(pg_url, "t-v2")
        assert wakes[: len(first_job)] == first_job
        assert wakes[len(first_job) :] == [("longtask.wake", "todo", "blue")] * 2

        (row,) = caller.db.store.workers(time.time() - 60)
        assert row.name == "w-route" and row.handed_back == 2 and row.jobs == 0
        assert row.serves == [{"task": "routed", "version": "1", "hash": row.serves[0]["hash"]}]

        cli = run_cli("workers", "--json", db=pg_url)
        assert cli.returncode == 0, cli.stderr
        (shown,) = json.loads(cli.stdout)
        assert shown["serves"] == row.serves and shown["handed_back"] == 2
        text = run_cli("workers", db=pg_url)
        assert "serves routed v1" in text.stdout and "handed back 2" in text.stdout


def test_a_task_reference_that_does_not_import_is_handed_back(
    pg_url: str, modules: Path, worker: Worker
) -> None:
    _write(modules, "handback_both", ["2", "1"])
    import handback_both

    with Runner(pg_url) as caller:
        caller.submit(handback_both.task.newest, thread_id="t-gone", task_ref="handback_gone:task")
        before = _snapshot(pg_url, "t-gone")
        outcome = worker._job("t-gone")
        assert outcome.startswith("handed back: cannot load its task: cannot import ")
        assert "No module named 'handback_gone'" in outcome
        assert _snapshot(pg_url, "t-gone") == before
        assert caller.status("t-gone").status == "pending"


def test_a_forced_resume_runs_on_the_code_the_worker_has(
    pg_url: str, modules: Path, worker: Worker
) -> None:
    """`resume --allow-changed-definition` asks for the code deployed: a worker without the
    thread's definition carries it out on its own newest."""
    with Runner(pg_url) as caller:
        _v2_on_v1_code(modules, caller, "t-forced")
        assert worker._job("t-forced").startswith("handed back")
        caller.resume("t-forced", allow_changed_definition=True)
        assert worker._job("t-forced") == "continued"
        assert caller.status("t-forced").status == "completed"
        assert caller.result("t-forced", "step") == {"version": "1"}
        import handback_v1

        rec = caller.db.store.get_thread("t-forced")
        assert rec is not None and rec.definition_hash == handback_v1.task.newest.definition_hash


def test_a_finished_thread_is_not_routed(pg_url: str, modules: Path, worker: Worker) -> None:
    _write(modules, "handback_both", ["2", "1"])
    import handback_both

    with Runner(pg_url) as caller:
        caller.submit(handback_both.task.newest, thread_id="t-done", task_ref="handback_both:task")
        assert worker._job("t-done") == "continued"
        assert caller.result("t-done", "step") == {"version": "2"}
        _write(modules, "handback_both", ["1"])  # v2 removed from the code since
        assert worker._job("t-done") == "nothing to do"
        (row,) = caller.db.store.workers(time.time() - 60)
        assert row.handed_back == 0 and [s["version"] for s in row.serves] == ["1", "2"]


def test_hand_backs_of_one_thread_back_off() -> None:
    routing = Routing()
    lack = Lacking("t", "h" * 64, "2", "lacks definition")
    delays = [routing.hand_back_delay(lack, elsewhere=False) for _ in range(8)]
    assert delays[:3] == [HANDBACK_FIRST, 2 * HANDBACK_FIRST, 4 * HANDBACK_FIRST]
    assert delays == sorted(delays) and delays[-1] == HANDBACK_MAX
    other = Lacking("u", "h" * 64, "2", "lacks definition")
    assert routing.hand_back_delay(other, elsewhere=False) == HANDBACK_FIRST
    routing.served("t")  # it ran here since: the next hand-back starts afresh
    assert routing.hand_back_delay(lack, elsewhere=False) == HANDBACK_FIRST
    assert routing.handed_back == 10


def test_heartbeat_rows_keep_what_a_worker_serves(db_url: str) -> None:
    from longtask.checkpointers import Database

    serves: list[dict[str, Any]] = [
        {"task": "demo", "version": "1", "hash": "aaaaaaaaaaaa"},
        {"task": "demo", "version": "2", "hash": "bbbbbbbbbbbb"},
    ]
    with Database.open(db_url) as db:
        now = time.time()
        db.store.worker_beat("w1", "host", 1, now, 3, None, 30.0)
        db.store.worker_beat("w2", "host", 2, now, 0, None, 30.0, serves=serves, handed_back=4)
        rows = {w.name: w for w in db.store.workers(now - 60)}
        assert rows["w1"].serves == [] and rows["w1"].handed_back == 0
        assert rows["w2"].serves == serves and rows["w2"].handed_back == 4
        assert rows["w2"].to_json()["serves"] == serves
