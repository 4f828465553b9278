"""Approvals and waits from the command line, one new process per command (both backends):
a release pauses at its CI wait and at its approval, printing the command that continues it;
bad answers exit 1 with a one-line error and leave the thread as it was; ``longtask tick``
acts on a passed deadline."""

from __future__ import annotations

import json
import re
import shlex
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import approval_task
import counter
import pytest
from conftest import run_cli

from longtask import Runner, ThreadStatus
from longtask.runtime import load_task

HERE = Path(__file__).resolve().parent
TASK_REF = f"{HERE / 'approval_task.py'}:task"
STEP = "approve_release"
CI_PAYLOAD = {"status": "passed", "url": "https://ci/1"}


class FakeClock:
    """A clock that stands still unless advanced (for threads started in this process)."""

    def __init__(self, start: datetime) -> None:
        self.t = start

    def now(self) -> datetime:
        return self.t

    def advance(self, seconds: float) -> datetime:
        self.t += timedelta(seconds=seconds)
        return self.t

    __call__ = now


def status(db: str, thread: str) -> ThreadStatus:
    with Runner(db) as runner:
        return runner.status(thread)


def continue_lines(stdout: str) -> list[str]:
    return [line.strip() for line in stdout.splitlines() if line.strip().startswith("longtask ")]


def paused_at_approval(db: str, thread: str, clock: FakeClock | None = None) -> None:
    """Start the release in this process and signal CI: it waits for the approval."""
    task = load_task(TASK_REF)
    with Runner(db, clock=clock) as runner:
        runner.start(task, {"version": "2.0.0"}, thread_id=thread)
        runner.signal(thread, "ci", CI_PAYLOAD, task=task)
        assert runner.status(thread).status == "waiting_user"


def cli_refused(db: str, thread: str, *args: str, expect: list[str]) -> str:
    """Run the command; it must exit 1 with exactly one ``error:`` line on stderr that
    contains every fragment of ``expect``, and leave the thread's latest checkpoint, status
    and runs as they were."""
    before = status(db, thread)
    result = run_cli(*args, db=db)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, f"the error is not one line:\n{result.stderr}"
    assert lines[0].startswith("error: "), result.stderr
    for fragment in expect:
        assert fragment in lines[0], (fragment, lines[0])
    assert "Traceback" not in result.stdout + result.stderr
    after = status(db, thread)
    assert after.checkpoint_id == before.checkpoint_id
    assert (after.status, after.runs, after.waiting) == (before.status, before.runs, before.waiting)
    return lines[0]


def test_release_pauses_for_ci_and_approval_then_completes(db_url: str, tmp_path: Path) -> None:
    calls_db = tmp_path / "calls.db"
    env = {counter.ENV_VAR: str(calls_db)}
    thread = "rel-1"

    # 1. run: builds, then pauses at the CI wait and prints the exact signal command.
    run = run_cli(
        "run",
        TASK_REF,
        "--thread",
        thread,
        "--input",
        json.dumps({"version": "1.4.0"}),
        db=db_url,
        env=env,
    )
    assert run.returncode == 3, run.stdout + run.stderr
    assert f"thread {thread} is paused (waiting_external)" in run.stdout
    assert continue_lines(run.stdout) == [f"longtask signal {thread} ci --payload JSON"]
    assert counter.counts(calls_db) == {"build": 1}

    # 2. a new process delivers the CI result, using the printed command: it pauses again,
    #    at the approval, and prints the exact approve command.
    signal_args = shlex.split(continue_lines(run.stdout)[0])[1:]
    signal_args[signal_args.index("JSON")] = json.dumps(CI_PAYLOAD)
    signal = run_cli(*signal_args, db=db_url, env=env)
    assert signal.returncode == 3, signal.stdout + signal.stderr
    assert f"thread {thread} is paused (waiting_user)" in signal.stdout
    assert continue_lines(signal.stdout) == [f"longtask approve {thread} {STEP} --by alice"]
    assert counter.counts(calls_db) == {"build": 1, "verify": 1}

    # 3. pending --json shows what is to be approved.
    pending = run_cli("pending", thread, "--json", db=db_url)
    assert pending.returncode == 0, pending.stderr
    items = json.loads(pending.stdout)
    assert [(p["step"], p["kind"]) for p in items] == [(STEP, "approval")]
    request: dict[str, Any] = items[0]["request"]
    assert request["plan"] == {"artifact": "dist/app-1.4.0.tar.gz", "ci": "https://ci/1"}
    assert re.fullmatch(r"[0-9a-f]{16}", request["plan_hash"]), request
    assert request["approvers"] == ["alice", "bob"]
    deadline = datetime.fromisoformat(request["deadline"])
    requested = datetime.fromisoformat(request["requested_at"])
    assert deadline - requested == timedelta(seconds=approval_task.APPROVAL_TIMEOUT)
    waiting = status(db_url, thread).waiting
    assert [(w["step"], w["plan_hash"], w["interrupt_id"]) for w in waiting] == [
        (STEP, request["plan_hash"], items[0]["interrupt_id"])
    ]

    # 4. a new process approves with the printed command: the thread completes.
    approve_args = shlex.split(continue_lines(signal.stdout)[0])[1:]
    approve = run_cli(*approve_args, "--comment", "ship it", db=db_url, env=env)
    assert approve.returncode == 0, approve.stdout + approve.stderr
    assert f"thread {thread} completed" in approve.stdout

    # Every step ran exactly once, each in the process that reached it.
    assert counter.counts(calls_db) == {"build": 1, "verify": 1, "publish": 1}
    pids = {step: pid for step, pid in counter.calls(calls_db)}
    assert len(set(pids.values())) == 3, pids
    with Runner(db_url) as runner:
        assert runner.status(thread).status == "completed"
        decision = runner.result(thread, STEP)
        assert (decision["approved"], decision["by"], decision["comment"]) == (
            True,
            "alice",
            "ship it",
        )
        assert decision["plan_hash"] == request["plan_hash"]
        assert runner.result(thread, "publish") == (
            "published dist/app-1.4.0.tar.gz (approved by alice)"
        )


def test_bad_answers_exit_1_and_change_nothing(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls_db = tmp_path / "calls.db"
    monkeypatch.setenv(counter.ENV_VAR, str(calls_db))
    thread = "cli-bad"
    paused_at_approval(db_url, thread)
    plan_hash = status(db_url, thread).waiting[0]["plan_hash"]

    cli_refused(
        db_url,
        thread,
        "approve",
        thread,
        STEP,
        "--by",
        "mallory",
        expect=[f"'mallory' may not decide approval '{STEP}'; allowed: alice, bob"],
    )
    cli_refused(
        db_url,
        thread,
        "approve",
        thread,
        STEP,
        "--by",
        "alice",
        "--plan-hash",
        "0123456789abcdef",
        expect=[
            "approves plan 0123456789abcdef",
            f"the plan waiting for approval is {plan_hash}",
        ],
    )

    # A wait's payload that fails its schema (a second thread, waiting for CI).
    task = load_task(TASK_REF)
    with Runner(db_url) as runner:
        runner.start(task, {"version": "2.0.1"}, thread_id="cli-ci")
    cli_refused(
        db_url,
        "cli-ci",
        "signal",
        "cli-ci",
        "ci",
        "--payload",
        json.dumps({"status": "meh"}),
        expect=["the payload for 'ci' does not match CiResult: status:"],
    )

    # The refused answers changed nothing: the right approval still completes the thread.
    ok = run_cli("approve", thread, STEP, "--by", "bob", db=db_url)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert status(db_url, thread).status == "completed"

    cli_refused(
        db_url,
        thread,
        "approve",
        thread,
        STEP,
        "--by",
        "alice",
        expect=[f"thread '{thread}' is not waiting for an approval (status: completed)"],
    )
    assert counter.counts(calls_db) == {"build": 2, "verify": 1, "publish": 1}


def test_malformed_decision_exits_1_with_one_line(db_url: str) -> None:
    thread = "cli-malformed"
    paused_at_approval(db_url, thread)
    cli_refused(
        db_url,
        thread,
        "resume",
        thread,
        "--resume",
        json.dumps({"approved": "maybe"}),
        "--interrupt",
        STEP,
        expect=[f"the answer to approval '{STEP}' is not a decision"],
    )


def test_tick_command_applies_a_passed_deadline(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLI has no clock to inject: the overdue thread is started in this process with a
    clock 30 days back, so its 7-day deadline has passed in real time."""
    calls_db = tmp_path / "calls.db"
    monkeypatch.setenv(counter.ENV_VAR, str(calls_db))
    paused_at_approval(db_url, "late", FakeClock(datetime.now(UTC) - timedelta(days=30)))
    paused_at_approval(db_url, "on-time")  # real clock: its deadline is a week away
    on_time = status(db_url, "on-time")

    tick = run_cli("tick", "--json", db=db_url, env={counter.ENV_VAR: str(calls_db)})
    assert tick.returncode == 0, tick.stdout + tick.stderr
    assert json.loads(tick.stdout) == [{"thread_id": "late", "step": STEP, "outcome": "failed"}]

    late = status(db_url, "late")
    assert late.status == "failed"
    assert late.error is not None and late.error["step"] == STEP
    assert f"approval '{STEP}' timed out at" in late.error["message"]
    after = status(db_url, "on-time")
    assert (after.status, after.checkpoint_id) == ("waiting_user", on_time.checkpoint_id)
    assert counter.counts(calls_db) == {"build": 2, "verify": 2}
