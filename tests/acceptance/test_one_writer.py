"""Promise 5, one writer per thread: two ``longtask resume`` processes started together on
one thread; one advances it, the other is refused, and the history does not fork (both
backends)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import counter
import slow_task
from conftest import run_cli

from longtask import Runner

HERE = Path(__file__).resolve().parent
TASK_REF = f"{HERE / 'slow_task.py'}:task"
BUSY = "is being advanced by another process"


def _popen_cli(*args: str, db: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "longtask", *args],
        env={**os.environ, "LONGTASK_DB": db, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _first_to_exit(procs: list[subprocess.Popen[str]], limit: float = 120) -> int:
    """Index of the first process to exit (bounded wait, not a timing assertion)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        for i, p in enumerate(procs):
            if p.poll() is not None:
                return i
        time.sleep(0.02)
    for p in procs:
        p.kill()
    raise AssertionError("neither resume process exited")


def test_two_resumes_at_once_one_wins_and_history_does_not_fork(
    db_url: str, tmp_path: Path
) -> None:
    thread = "one-writer"
    counter_db = tmp_path / "calls.db"
    gate = tmp_path / "gate"
    env = {
        counter.ENV_VAR: str(counter_db),
        "LT_FAILED_MARKER": str(tmp_path / "failed-once"),
        "LT_GATE": str(gate),
    }

    failed = run_cli("run", TASK_REF, "--thread", thread, db=db_url, env=env)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "flaky failed on its first run" in failed.stderr
    with Runner(db_url) as runner:
        st = runner.status(thread)
        assert st.status == "failed"
        assert {s.name: s.state for s in st.steps}["flaky"] == "failed"
    assert counter.counts(counter_db) == {"fetch": 1, "flaky": 1}

    # Both processes start before either is waited for. Whichever takes the thread's lock
    # blocks inside `flaky` until the gate file exists, and the gate is opened only after
    # one process has exited: so the other one meets a thread that is certainly busy.
    procs = [_popen_cli("resume", thread, db=db_url, env=env) for _ in range(2)]
    try:
        loser_index = _first_to_exit(procs)
        loser = procs[loser_index]
        loser_out, loser_err = loser.communicate(timeout=60)
        gate.write_text("go")
        winner = procs[1 - loser_index]
        winner_out, winner_err = winner.communicate(timeout=120)
    finally:
        gate.write_text("go")
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()

    assert loser.returncode == 1, (loser.returncode, loser_out, loser_err)
    assert BUSY in loser_err, loser_err
    assert f"thread {thread!r}" in loser_err
    assert "Traceback" not in loser_err
    assert winner.returncode == 0, (winner.returncode, winner_out, winner_err)
    assert f"thread {thread} completed" in winner_out

    with Runner(db_url) as runner:
        st = runner.status(thread)
        assert st.status == "completed"
        assert {s.state for s in st.steps} == {"completed"}
        assert st.runs == 2  # the first run and the winner; the refused process counts none
        assert runner.result(thread, "slow4") == 6

        # A single chain of checkpoints: no two share a parent, exactly one root, and
        # following parents from the newest reaches every checkpoint.
        views = runner.history(thread, limit=1000)
        parents = [v.parent_id for v in views]
        assert len(parents) == len(set(parents)), "the checkpoint history forked"
        assert parents.count(None) == 1
        by_id = {v.checkpoint_id: v for v in views}
        chain, cursor = [], views[0].checkpoint_id
        while cursor is not None:
            chain.append(cursor)
            cursor = by_id[cursor].parent_id
        assert len(chain) == len(views)
        assert views[0].checkpoint_id == st.checkpoint_id

    # After the resume every step ran once: `flaky` twice in all (failed, then passed), and
    # everything after the failure ran in the winning process only.
    calls = counter.calls(counter_db)
    assert counter.counts(counter_db) == {
        "fetch": 1,
        "flaky": 2,
        **dict.fromkeys(slow_task.SLOW_STEPS, 1),
    }
    resumed_pids = {pid for _, pid in calls[2:]}
    assert resumed_pids == {winner.pid}

    # A third resume finds nothing to do and changes nothing.
    again = run_cli("resume", thread, db=db_url, env=env)
    assert again.returncode == 1
    assert "nothing to resume" in again.stderr
    with Runner(db_url) as runner:
        assert runner.status(thread).checkpoint_id == st.checkpoint_id
