"""Retries, cancel and budgets through the CLI, across real process deaths (both backends).

- A step fails twice transiently; its process is killed with SIGKILL during the back-off
  before attempt 3. ``longtask resume`` continues with attempt 3 (not 1), which succeeds.
- ``longtask cancel`` dies in the middle of the compensations; running it again finishes
  them, newest step first, each undo reaching the outside service exactly once.
- A task over its token budget pauses (exit 3, the reason in ``status``); ``longtask budget
  --add-tokens`` and ``resume`` finish it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import limits_task
import pytest
from conftest import run_cli

from longtask import Runner

HERE = Path(__file__).resolve().parent


def _ref(name: str) -> str:
    return f"{HERE / 'limits_task.py'}:{name}"


def _wait_unlocked(db_url: str, thread: str) -> None:
    deadline = time.monotonic() + 10
    with Runner(db_url) as runner:
        while runner.status(thread).active and time.monotonic() < deadline:
            time.sleep(0.05)


def test_attempt_count_survives_a_kill_between_attempts(db_url: str, tmp_path: Path) -> None:
    attempts = tmp_path / "attempts"
    env = {**os.environ, "LONGTASK_DB": db_url, "LT_ATTEMPTS": str(attempts)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "longtask", "run", _ref("flaky"), "--thread", "t-flaky"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        # The second failure is durable before the back-off starts: kill during the wait.
        deadline = time.monotonic() + 60
        with Runner(db_url) as runner:
            while time.monotonic() < deadline:
                if runner.db.store.get_thread("t-flaky") is not None:
                    rows = runner.db.store.attempts("t-flaky")
                    if rows.get(("call", -1)) is not None and rows[("call", -1)].failed == 2:
                        break
                time.sleep(0.02)
            else:
                pytest.fail("the step never failed twice")
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert limits_task.attempts_seen(attempts) == [1, 2]
    _wait_unlocked(db_url, "t-flaky")
    resumed = run_cli("resume", "t-flaky", db=db_url, env={"LT_ATTEMPTS": str(attempts)})
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert limits_task.attempts_seen(attempts) == [1, 2, 3]
    with Runner(db_url) as runner:
        assert runner.result("t-flaky", "call") == {"attempt": 3}
        completed = [e for e in runner.events("t-flaky", kinds=["step.completed"])]
        assert [e.attempt for e in completed if e.step == "call"] == [3]
    shown = run_cli("events", "t-flaky", "--kind", "step.retry", "--json", db=db_url)
    assert shown.returncode == 0, shown.stderr
    retries = [json.loads(line) for line in shown.stdout.splitlines() if line.strip()]
    if isinstance(retries[0], list):  # --json prints one array
        retries = retries[0]
    assert [(e["attempt"], e["data"]["error_class"]) for e in retries] == [
        (1, "transient"),
        (2, "transient"),
    ]
    assert all(e["kind"] == "step.retry" for e in retries)


@pytest.mark.parametrize("crash_at", ["after_undo", "in_undo"])
def test_cancel_killed_during_compensation_finishes_once(
    db_url: str, tmp_path: Path, crash_at: str
) -> None:
    service = tmp_path / "service.db"
    env = {
        "LT_SERVICE_DB": str(service),
        "LT_CRASH_AT": crash_at,
        "LT_CRASH_MARKER": str(tmp_path / "crashed"),
    }
    started = run_cli("run", _ref("saga"), "--thread", "t-saga", db=db_url, env=env)
    assert started.returncode == 3, started.stdout + started.stderr
    first = run_cli("cancel", "t-saga", "--reason", "trip off", "--by", "ops", db=db_url, env=env)
    assert first.returncode == 1, first.stdout + first.stderr
    assert (tmp_path / "crashed").exists(), "the cancel did not crash"
    _wait_unlocked(db_url, "t-saga")
    shown = run_cli("status", "t-saga", "--json", db=db_url)
    assert json.loads(shown.stdout)["status"] == "cancelling"
    again = run_cli("cancel", "t-saga", db=db_url, env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "cancelled" in again.stdout
    undos = [what for what, _ in limits_task.service_calls(service) if what.startswith("undo")]
    assert undos == ["undo charge", "undo hotel", "undo flight"]
    keys = [key for what, key in limits_task.service_calls(service)]
    assert len(keys) == len(set(keys)) == 6
    with Runner(db_url) as runner:
        st = runner.status("t-saga")
        assert st.status == "cancelled"
        ledger = {(e.step, e.name): e for e in runner.effects("t-saga")}
        for step in ("flight", "hotel", "charge"):
            assert ledger[(step, "compensate")].status == "succeeded"
            assert ledger[(step, "compensate:undo")].status == "succeeded"
        (event,) = runner.events("t-saga", kinds=["longtask.cancelled"])
        assert event.data["compensated"] == ["charge", "hotel", "flight"]
        assert event.data["reason"] == "trip off"
    refused = run_cli("resume", "t-saga", db=db_url, env=env)
    assert refused.returncode == 1 and "nothing to resume" in refused.stderr


def test_budget_pause_raise_and_resume(db_url: str) -> None:
    ran = run_cli("run", _ref("spend"), "--thread", "t-spend", db=db_url)
    assert ran.returncode == 3, ran.stdout + ran.stderr
    assert "budget exceeded: tokens 150 of 100" in ran.stdout
    assert "longtask budget t-spend --add-tokens N" in ran.stdout
    status = run_cli("status", "t-spend", db=db_url)
    assert status.returncode == 0, status.stderr
    assert "budget exceeded: tokens 150 of 100" in status.stdout
    shown = run_cli("budget", "t-spend", "--json", db=db_url)
    budget = json.loads(shown.stdout)
    assert budget["used"]["tokens"] == 150 and budget["limits"]["tokens"] == 100
    bad = run_cli("budget", "t-spend", "--add-cost", "1", db=db_url)
    assert bad.returncode == 1 and "no cost limit" in bad.stderr
    raised = run_cli("budget", "t-spend", "--add-tokens", "100", "--by", "ops", db=db_url)
    assert raised.returncode == 0, raised.stderr
    assert "150 of 200" in raised.stdout
    assert "continue with: longtask resume t-spend" in raised.stdout
    resumed = run_cli("resume", "t-spend", db=db_url)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    events = run_cli("events", "t-spend", "--kind", "budget.exceeded", db=db_url)
    assert events.stdout.count("budget.exceeded") == 1
