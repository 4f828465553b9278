"""Graph steps survive SIGKILL anywhere inside their graph (both backends): a process
running a graph step over a 5-node LangGraph graph is killed from outside at random
points, and ``longtask resume`` continues it each time from the graph's last checkpoint.

What "a finished node never runs again" means, checked from the outside counter: the graph
is a chain, so once node ``n{k+1}`` has begun, ``n{k}`` finished and its checkpoint was
committed; from then on ``n{k}`` must never begin again. A node runs again only in the
process after the one killed while it ran, and at most once per process. The final state
holds every node once (the trail is appended to by each node: a node applied twice would
show twice).

The default runs a few kills per backend; ``-m slow`` (or ``LT_GRAPH_KILLS=30``) runs the
issue's 30.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import counter
import graph_crash_task as gct
import pytest

from longtask import Runner

HERE = Path(__file__).resolve().parent
TASK_REF = f"{HERE / 'graph_crash_task.py'}:task"
START = 5
EXPECTED = {"total": START + sum(i * 10 for i in range(1, 6)), "trail": gct.NODES}


def _spawn(args: list[str], db_url: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "longtask", *args],
        env={**os.environ, "LONGTASK_DB": db_url, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _begins(path: Path, thread: str) -> int:
    return sum(1 for s, _ in counter.calls(path) if s.startswith(f"{thread}:") and "begin" in s)


def _wait_inactive(db_url: str, thread_id: str) -> None:
    """The dead process's lock goes away with it; on PostgreSQL the server notices the closed
    connection a moment later, so poll (bounded) rather than race it."""
    deadline = time.monotonic() + 10
    with Runner(db_url) as runner:
        while runner.status(thread_id).active and time.monotonic() < deadline:
            time.sleep(0.05)


def _check_thread(calls: list[tuple[str, int]], thread: str, killed: set[int]) -> None:
    """The promise, from the outside counter: see the module's docstring."""
    begun: dict[str, list[int]] = defaultdict(list)
    order: list[tuple[str, int]] = []
    for label, pid in calls:
        t, node, what = label.split(":")
        if t == thread and what == "begin":
            begun[node].append(pid)
            order.append((node, pid))
    assert set(begun) == set(gct.NODES), begun
    for node, pids in begun.items():
        # at most once per process, and every run but the last in a killed process
        assert len(set(pids)) == len(pids), (node, pids)
        assert set(pids[:-1]) <= killed, (node, pids, killed)
    for k, node in enumerate(gct.NODES[:-1]):
        successor = gct.NODES[k + 1]
        first_successor = next(i for i, (n, _) in enumerate(order) if n == successor)
        again = [i for i, (n, _) in enumerate(order) if n == node and i > first_successor]
        assert not again, f"{node} ran again after {successor} had begun: {order}"


def _kills() -> int:
    return int(os.environ.get("LT_GRAPH_KILLS", "4"))


def _run_kills(db_url: str, tmp_path: Path, kills: int, seed: int) -> None:
    rng = random.Random(seed)
    counter_db = tmp_path / "calls.db"
    env = {counter.ENV_VAR: str(counter_db), "LT_NODE_SLEEP": "0.06"}
    done = 0
    thread_no = 0
    while done < kills:
        thread_no += 1
        thread = f"gk-{seed}-{thread_no}"
        killed: set[int] = set()
        args = ["run", TASK_REF, "--thread", thread, "--input", f'{{"start": {START}}}']
        while True:
            seen = _begins(counter_db, thread)
            proc = _spawn(args, db_url, env)
            # Kill once the graph is under way in this process: after 0-4 more node
            # begins, and a random part of a node's time (inside a node, between two, or
            # in a checkpoint write), unless the run finishes first.
            target = seen + rng.randint(1, 4)
            deadline = time.monotonic() + 60
            while proc.poll() is None and _begins(counter_db, thread) < target:
                assert time.monotonic() < deadline, "the run made no progress"
                time.sleep(0.01)
            if done < kills and proc.poll() is None:
                time.sleep(rng.uniform(0, 0.09))
            if done < kills and proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                killed.add(proc.pid)
                done += 1
                _wait_inactive(db_url, thread)
                with Runner(db_url) as runner:
                    if runner.status(thread).status == "completed":
                        break  # killed on its way out, after the thread completed
                args = ["resume", thread]
                continue
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, out + err
            break
        _check_thread(counter.calls(counter_db), thread, killed)
        with Runner(db_url) as runner:
            assert runner.status(thread).status == "completed"
            assert runner.result(thread, "five") == EXPECTED
            kinds = [e.kind for e in runner.events(thread)]
            assert kinds.count("longtask.completed") == 1
            assert [e.step for e in runner.events(thread, kinds=["step.completed"])] == [
                "seed",
                "five",
            ]


def test_graph_step_survives_sigkill_at_random_points(db_url: str, tmp_path: Path) -> None:
    _run_kills(db_url, tmp_path, _kills(), seed=40)


@pytest.mark.slow
def test_graph_step_survives_30_sigkills(
    db_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if "slow" not in (request.config.option.markexpr or ""):
        pytest.skip("the long run (30 kills a backend): select it with -m slow")
    _run_kills(db_url, tmp_path, 30, seed=4040)
