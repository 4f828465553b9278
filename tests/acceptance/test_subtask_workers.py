"""Sub-tasks on PostgreSQL workers (issue 44): the children of a submitted parent run as
jobs of their own on the workers, and the last child's end queues the parent's
continuation; no process waits while they run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import subtask_crash_task as sct

from longtask import Runner
from longtask.model import child_thread_id

HERE = Path(__file__).resolve().parent
TASK_FILE = HERE / "subtask_crash_task.py"
COUNT = 6


@pytest.fixture
def two_workers(pg_url: str, tmp_path: Path) -> Iterator[list[subprocess.Popen[str]]]:
    procs = []
    for n in range(2):
        log = open(tmp_path / f"w{n}.log", "w")  # noqa: SIM115 (closed with the process)
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "longtask", "worker", "--name", f"w{n}"],
                env={
                    **os.environ,
                    "LONGTASK_DB": pg_url,
                    sct.COUNTER_ENV: str(tmp_path / "calls.db"),
                },
                stdout=log,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    yield procs
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def test_children_run_on_workers_and_the_last_end_continues_the_parent(
    pg_url: str, tmp_path: Path, two_workers: list[subprocess.Popen[str]]
) -> None:
    with Runner(pg_url) as runner:
        parent = runner.submit(
            sct.parent, {"count": COUNT}, "sub-workers", task_ref=f"{TASK_FILE}:parent"
        )
        deadline = time.monotonic() + 120
        while runner.status(parent).status != "completed":
            assert time.monotonic() < deadline, runner.status(parent).model_dump_json()
            assert all(p.poll() is None for p in two_workers), "a worker died"
            time.sleep(0.1)
        assert runner.result(parent, "total") == sum(n * n for n in range(1, COUNT + 1))
        children = [child_thread_id(parent, "fan", i, 1) for i in range(COUNT)]
        assert [r.child for r in runner.db.store.subtask_rows(parent)] == children
        for child in children:
            rec = runner.status(child)
            assert rec.status == "completed"
            assert runner.db.store.get_thread(child).mode == "worker"  # type: ignore[union-attr]
        ended = Counter(
            e.data["thread_id"] for e in runner.events(parent) if e.kind == "subtask.completed"
        )
        assert ended == dict.fromkeys(children, 1)
    calls = sct.work_calls(tmp_path / "calls.db")
    assert sorted(t for t, _, _ in calls) == sorted(children)  # each child's work once
    # The children ran in the worker processes, not in this one.
    assert {pid for _, _, pid in calls} <= {p.pid for p in two_workers}
