"""Promise 1, resume not rerun: a process killed at any step is continued by
``longtask resume`` without running a finished step again (both backends)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import counter
import crash_task
import pytest
from conftest import run_cli

from longtask import Runner

HERE = Path(__file__).resolve().parent
TASK_REF = f"{HERE / 'crash_task.py'}:task"
SEED = 7

# the first step, a step inside the 4-wide parallel stage, a single step in the middle,
# the last step of a 3-wide parallel stage, and the last step
CRASH_POINTS = ["step01", "step06", "step09", "step15", "step20"]


def _wait_inactive(db_url: str, thread_id: str) -> None:
    """The dead process's lock goes away with it; on PostgreSQL the server notices the closed
    connection a moment later, so poll (bounded) rather than race it."""
    deadline = time.monotonic() + 10
    with Runner(db_url) as runner:
        while runner.status(thread_id).active and time.monotonic() < deadline:
            time.sleep(0.05)


@pytest.mark.parametrize("crash_at", CRASH_POINTS)
def test_crash_then_resume_runs_every_step_once(db_url: str, tmp_path: Path, crash_at: str) -> None:
    assert crash_at in crash_task.STEP_NAMES
    thread = f"crash-{crash_at}"
    counter_db = tmp_path / "calls.db"
    marker = tmp_path / "crashed"
    env = {
        counter.ENV_VAR: str(counter_db),
        "LT_CRASH_AT": crash_at,
        "LT_CRASH_MARKER": str(marker),
    }

    # 1. The run dies in the middle of step `crash_at`.
    first = run_cli(
        "run",
        TASK_REF,
        "--thread",
        thread,
        "--input",
        json.dumps({"seed": SEED}),
        db=db_url,
        env=env,
    )
    assert first.returncode != 0, first.stdout + first.stderr
    assert marker.exists(), f"the process did not crash at {crash_at}:\n{first.stderr}"
    before = counter.counts(counter_db)
    assert before[crash_at] == 1
    index = crash_task.STEP_NAMES.index(crash_at)
    later_stages = [
        names for _, names in crash_task.LAYOUT if crash_task.STEP_NAMES.index(names[0]) > index
    ]
    assert not any(before[s] for names in later_stages for s in names), before

    _wait_inactive(db_url, thread)
    with Runner(db_url) as runner:
        st = runner.status(thread)
        assert st.status == "running"  # what the dead process left behind
        assert not st.active
        states = {s.name: s.state for s in st.steps}
        assert states[crash_at] != "completed"
        # every step of the earlier stages, and (we waited for them) every sibling, is done
        for name in crash_task.STEP_NAMES[:index]:
            assert states[name] == "completed", (name, states)
        for name in crash_task.siblings(crash_at):
            assert states[name] == "completed", (name, states)

    # 2. Resume from another process finishes the thread.
    second = run_cli("resume", thread, db=db_url, env=env)
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"thread {thread} completed" in second.stdout

    # 3. Status (CLI, JSON): completed, every step completed.
    shown = run_cli("status", thread, "--json", db=db_url, env=env)
    assert shown.returncode == 0, shown.stderr
    status = json.loads(shown.stdout)
    assert status["status"] == "completed"
    assert status["progress"] == 1.0
    assert [s["name"] for s in status["steps"]] == crash_task.STEP_NAMES
    assert {s["state"] for s in status["steps"]} == {"completed"}
    assert status["runs"] == 2

    # 4. The outside counter: every step ran exactly once, except the one that crashed,
    # which ran again on resume (once or twice in total, never more).
    calls = counter.counts(counter_db)
    assert set(calls) == set(crash_task.STEP_NAMES)
    for name in crash_task.STEP_NAMES:
        if name == crash_at:
            assert 1 <= calls[name] <= 2, (name, calls)
        else:
            assert calls[name] == 1, (name, calls)
    # A step's function ran in the crashed process or in the resuming one, never both,
    # unless it is the crashed step.
    pids = {}
    for step, pid in counter.calls(counter_db):
        pids.setdefault(step, []).append(pid)
    assert len(set(pids[crash_at])) == len(pids[crash_at])

    # 5. The results are right: dependencies were passed through the crash.
    expected = crash_task.expected_values(SEED)
    with Runner(db_url) as runner:
        results = runner.results(thread)
        assert {k: v["value"] for k, v in results.items()} == expected
        assert runner.result(thread, crash_task.LAST) == {
            "step": crash_task.LAST,
            "value": expected[crash_task.LAST],
        }
        kinds = [e.kind for e in runner.events(thread)]
        assert kinds.count("longtask.completed") == 1
        assert kinds.count("longtask.started") == 1
