"""Sub-tasks on PostgreSQL workers (issue 44): the children of a submitted parent run as
jobs of their own on the workers, and the last child's end queues the parent's
continuation; no process waits while they run."""

from __future__ import annotations

import os
import random
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


def _worker(pg_url: str, tmp_path: Path, name: str, sleep: str = "") -> subprocess.Popen[str]:
    log = open(tmp_path / f"{name}.log", "w")  # noqa: SIM115 (closed with the process)
    return subprocess.Popen(
        [sys.executable, "-m", "longtask", "worker", "--name", name, "--stalled-after", "1.5"],
        env={
            **os.environ,
            "LONGTASK_DB": pg_url,
            sct.COUNTER_ENV: str(tmp_path / "calls.db"),
            sct.SLEEP_ENV: sleep,
        },
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.fixture
def two_workers(pg_url: str, tmp_path: Path) -> Iterator[list[subprocess.Popen[str]]]:
    procs = [_worker(pg_url, tmp_path, f"w{n}") for n in range(2)]
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


def test_workers_killed_at_random_points_start_each_child_once(pg_url: str, tmp_path: Path) -> None:
    """SIGKILL a worker at random points while the tree runs (inside a child's work,
    between a child's end and the parent's wake-up, in the parent's own run) and start a
    replacement: the stalled job goes to another worker, every item still has one child,
    the parent continues once per child's end, and the total is right."""
    rng = random.Random(4407)
    procs = {f"w{n}": _worker(pg_url, tmp_path, f"w{n}", sleep="0.3") for n in range(2)}
    counter = tmp_path / "calls.db"
    try:
        with Runner(pg_url) as runner:
            parent = runner.submit(
                sct.parent, {"count": COUNT}, "sub-worker-kills", task_ref=f"{TASK_FILE}:parent"
            )
            kills = 0
            deadline = time.monotonic() + 180
            while runner.status(parent, usage=False).status != "completed":
                assert time.monotonic() < deadline, runner.status(parent).model_dump_json()
                if kills < 3 and len(sct.work_calls(counter)) >= 2 * kills + 1:
                    time.sleep(rng.uniform(0, 0.35))
                    name = rng.choice(sorted(procs))
                    procs[name].kill()
                    procs[name].wait(10)
                    kills += 1
                    replacement = f"r{kills}"
                    procs[replacement] = _worker(pg_url, tmp_path, replacement, sleep="0.3")
                    del procs[name]
                time.sleep(0.05)
            assert kills >= 1
            assert runner.result(parent, "total") == sum(n * n for n in range(1, COUNT + 1))
            children = [child_thread_id(parent, "fan", i, 1) for i in range(COUNT)]
            assert [r.child for r in runner.db.store.subtask_rows(parent)] == children
            ended = Counter(
                e.data["thread_id"] for e in runner.events(parent) if e.kind == "subtask.completed"
            )
            assert ended == dict.fromkeys(children, 1)
            kinds = [e.kind for e in runner.events(parent)]
            assert kinds.count("longtask.completed") == 1
            started = [t for t in runner.threads(limit=1000) if t.task_name == "sub_child"]
            assert sorted(t.thread_id for t in started) == sorted(children)
        calls = sct.work_calls(counter)
        assert {t for t, _, _ in calls} == set(children)
        for child in children:
            pids = [p for t, _, p in calls if t == child]
            assert len(set(pids)) == len(pids), (child, pids)  # at most once per process
    finally:
        for proc in procs.values():
            proc.kill()
        for proc in procs.values():
            proc.wait(10)
