"""Sub-tasks survive SIGKILL of the parent and of its children at random points (issue 44,
both backends).

A parent fans out to one child thread per number; the process running the tree (a
``longtask run`` of the parent, then ``longtask resume`` of the parent or of a child that
has not ended, picked at random) is killed from outside at random points: while the parent
plans, while children work, between a child's end and the parent's continuation. After
each kill another process resumes. Checked from the database and an outside counter:

- every child for an item was started exactly once: one row per item, attempt 1, its
  thread id the derived one, one thread record and one ``longtask.started`` event each,
  and every call of the child's work came from that thread;
- a child's work ran again only in the process after the one killed while it ran (at most
  once per process);
- the parent continued exactly once per child's end: one ``subtask.completed`` per child,
  one ``step.completed`` of the sub-task step, one ``longtask.completed``;
- the final result is right.

The default runs a few rounds per backend; ``-m slow`` (or ``LT_SUBTASK_ROUNDS=30``) runs
the issue's 30.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
import subtask_crash_task as sct
from conftest import run_cli

from longtask import Runner
from longtask.model import child_thread_id

HERE = Path(__file__).resolve().parent
TASK_FILE = HERE / "subtask_crash_task.py"
COUNT = 5


def _spawn(args: list[str], db_url: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "longtask", *args],
        env={**os.environ, "LONGTASK_DB": db_url, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_inactive(db_url: str, threads: list[str]) -> None:
    """A dead process's locks go with it; on PostgreSQL the server notices the closed
    connection a moment later, so poll (bounded) rather than race it."""
    deadline = time.monotonic() + 10
    with Runner(db_url) as runner:
        for thread in threads:
            while runner.status(thread, usage=False).active and time.monotonic() < deadline:
                time.sleep(0.05)


def _tree(db_url: str, parent: str) -> tuple[str | None, list[tuple[str, str | None]]]:
    """The parent's status (None before its record exists) and its children's."""
    with Runner(db_url) as runner:
        rec = runner.db.store.get_thread(parent)
        if rec is None:
            return None, []
        status = rec.status
        return status, [(r.child, r.status) for r in runner.db.store.subtask_rows(parent)]


def _round(db_url: str, env: dict[str, str], counter: Path, rng: random.Random, no: int) -> None:
    parent = f"sub-crash-{no}"
    kills = rng.randint(1, 3)
    killed: set[int] = set()
    args = ["run", f"{TASK_FILE}:parent", "--thread", parent, "--input", '{"count": 5}']
    for _ in range(60):
        seen = len(sct.work_calls(counter))
        proc = _spawn(args, db_url, env)
        if len(killed) < kills:
            # Kill after 0-3 more child work calls (0: while the parent plans or records its
            # children) and a random part of a child's time.
            target = seen + rng.randint(0, 3)
            deadline = time.monotonic() + 60
            while proc.poll() is None and len(sct.work_calls(counter)) < target:
                assert time.monotonic() < deadline, "the run made no progress"
                time.sleep(0.01)
            time.sleep(rng.uniform(0, 0.15) if target > seen else rng.uniform(0.8, 2.0))
        if len(killed) < kills and proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            killed.add(proc.pid)
        else:
            out, err = proc.communicate(timeout=120)
            assert proc.returncode in (0, 3), out + err  # 3: a child's run left it waiting
        status, children = _tree(db_url, parent)
        if status is None:
            continue  # killed before the thread was stored: run it again
        _wait_inactive(db_url, [parent, *(c for c, s in children if s is not None)])
        if status == "completed":
            break
        if status == "pending" and not children:
            args = ["resume", parent]
            continue
        open_children = [c for c, s in children if s in (None, "pending", "running")]
        # Resume the parent, or now and then a child that has not ended (its end must
        # continue the parent when it is the last), or run `tick` once every child has
        # ended (it continues a parent whose continuation died with the process).
        pick = rng.random()
        if open_children and pick < 0.3:
            args = ["resume", rng.choice(open_children)]
        elif not open_children and pick < 0.5:
            args = ["tick"]
        else:
            args = ["resume", parent]
    _check(db_url, parent, counter, killed)


def _check(db_url: str, parent: str, counter: Path, killed: set[int]) -> None:
    with Runner(db_url) as runner:
        assert runner.status(parent).status == "completed"
        assert runner.result(parent, "total") == sum(n * n for n in range(1, COUNT + 1))
        rows = runner.db.store.subtask_rows(parent)
        assert [(r.index, r.attempt) for r in rows] == [(i, 1) for i in range(COUNT)]
        children = [child_thread_id(parent, "fan", i, 1) for i in range(COUNT)]
        assert [r.child for r in rows] == children
        for child in children:
            assert runner.status(child).status == "completed"
            started = [e for e in runner.events(child) if e.kind == "longtask.started"]
            assert len(started) == 1, child
            assert started[0].data["parent"]["thread_id"] == parent
        ended = Counter(
            e.data["thread_id"] for e in runner.events(parent) if e.kind == "subtask.completed"
        )
        assert ended == dict.fromkeys(children, 1)
        kinds = [e.kind for e in runner.events(parent)]
        assert kinds.count("longtask.completed") == 1
        fan_done = [e for e in runner.events(parent, kinds=["step.completed"]) if e.step == "fan"]
        assert len(fan_done) == 1
        tree_threads = [t for t in runner.threads(limit=10000) if t.thread_id.startswith("fan.")]
        mine = {c for c in children}
        assert len([t for t in tree_threads if t.thread_id in mine]) == COUNT
    calls: dict[str, list[int]] = defaultdict(list)
    for thread, n, pid in sct.work_calls(counter):
        if thread in children:
            assert thread == children[n - 1], (thread, n)
            calls[thread].append(pid)
    assert set(calls) == set(children)
    for child, pids in calls.items():
        assert len(set(pids)) == len(pids), (child, pids)
        assert set(pids[:-1]) <= killed, (child, pids, killed)


def _rounds() -> int:
    return int(os.environ.get("LT_SUBTASK_ROUNDS", "3"))


def _run(db_url: str, tmp_path: Path, rounds: int, seed: int) -> None:
    rng = random.Random(seed)
    counter = tmp_path / "calls.db"
    env = {sct.COUNTER_ENV: str(counter)}
    for no in range(rounds):
        _round(db_url, env, counter, rng, no)
    # No second child for any item, across every round.
    with Runner(db_url) as runner:
        children = [t for t in runner.threads(limit=10000) if t.task_name == "sub_child"]
        assert len(children) == rounds * COUNT


def test_subtasks_survive_sigkill_at_random_points(db_url: str, tmp_path: Path) -> None:
    _run(db_url, tmp_path, _rounds(), seed=44)


@pytest.mark.slow
def test_subtasks_survive_30_rounds_of_sigkills(
    db_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if "slow" not in (request.config.option.markexpr or ""):
        pytest.skip("the long run (30 rounds a backend): select it with -m slow")
    _run(db_url, tmp_path, 30, seed=4444)


def test_a_childs_approval_from_the_cli_continues_the_parent(db_url: str) -> None:
    parent = "sub-approved"
    first = run_cli("run", f"{TASK_FILE}:gated_parent", "--thread", parent, db=db_url)
    assert first.returncode == 3, first.stdout + first.stderr
    shown = json.loads(run_cli("status", parent, "--json", db=db_url).stdout)
    assert shown["status"] == "waiting_external"
    assert [w["kind"] for w in shown["waiting"]] == ["subtask"]
    children = [r["thread_id"] for r in shown["subtasks"]["fan"]]
    assert children == [child_thread_id(parent, "fan", i, 1) for i in range(2)]
    assert [r["status"] for r in shown["subtasks"]["fan"]] == ["waiting_user"] * 2
    # `ls --top` leaves the children out; `status --tree` shows them under the step.
    top = json.loads(run_cli("ls", "--top", "--json", db=db_url).stdout)
    assert [t["thread_id"] for t in top] == [parent]
    everything = json.loads(run_cli("ls", "--json", db=db_url).stdout)
    assert {t["thread_id"] for t in everything} == {parent, *children}
    tree = run_cli("status", parent, "--tree", db=db_url)
    assert tree.returncode == 0, tree.stderr
    assert "fan: 0/2 sub-tasks ended" in tree.stdout
    assert all(c in tree.stdout for c in children)
    assert f"longtask status {parent} --tree" in tree.stdout  # what continues it
    assert "signal" not in tree.stdout
    # Answering a sub-task pause itself is refused with what to do instead.
    refused = run_cli("resume", parent, "--resume", "true", db=db_url)
    assert refused.returncode != 0
    assert "waits for its sub-tasks" in refused.stdout + refused.stderr
    for n, child in enumerate(children):
        done = run_cli("approve", child, "ok", "--by", "alice", db=db_url)
        assert done.returncode == 0, done.stdout + done.stderr
        status = json.loads(run_cli("status", parent, "--json", db=db_url).stdout)
        assert status["status"] == ("completed" if n == 1 else "waiting_external")
    result = run_cli("result", parent, "total", "--json", db=db_url)
    assert json.loads(result.stdout) == 4 + 9
