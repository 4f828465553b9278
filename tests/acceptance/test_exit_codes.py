"""Exit codes and error output of the CLI: a failed run exits 1 with an ``error:`` message
and no traceback; ``--debug`` adds the traceback; usage errors exit 2."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli

from longtask import Runner

FAILING = """\
from longtask import LongTask, Stage, function_step


@function_step
def fine(ctx):
    return 1


@function_step
def explode(ctx):
    raise ValueError("bad value " + str(ctx.result("fine") + 41))


task = LongTask("failing", stages=[Stage("one", [fine]), Stage("two", [explode])])
"""


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def test_failed_run_exits_1_with_a_message_and_no_traceback(
    sqlite_url: str, tmp_path: Path
) -> None:
    task_file = tmp_path / "failing.py"
    task_file.write_text(FAILING)
    ref = f"{task_file}:task"

    failed = run_cli("run", ref, "--thread", "quiet", db=sqlite_url)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "Traceback" not in failed.stderr
    assert "Traceback" not in failed.stdout
    assert _error_lines(failed.stderr) == [
        "error: step 'explode' failed: ValueError: bad value 42"
    ], failed.stderr
    assert failed.stderr.startswith("error: ")
    assert "longtask resume quiet" in failed.stderr  # how to continue

    loud = run_cli("--debug", "run", ref, "--thread", "loud", db=sqlite_url)
    assert loud.returncode == 1, loud.stdout + loud.stderr
    assert "Traceback" in loud.stderr
    assert "explode" in loud.stderr  # the failing step function is in the traceback
    assert "ValueError" in loud.stderr
    assert _error_lines(loud.stderr) == ["error: step 'explode' failed: ValueError: bad value 42"]

    # the thread is kept, failed, and its status is readable (a read command exits 0)
    status = run_cli("status", "quiet", db=sqlite_url)
    assert status.returncode == 0, status.stderr
    assert "failed" in status.stdout


def test_unknown_thread_and_usage_errors(sqlite_url: str) -> None:
    assert run_cli("db", "upgrade", db=sqlite_url).returncode == 0
    missing = run_cli("status", "no-such-thread", db=sqlite_url)
    assert missing.returncode == 1
    assert missing.stderr.startswith("error: no thread 'no-such-thread'"), missing.stderr
    assert "Traceback" not in missing.stderr

    usage = run_cli("run", "--no-such-option", db=sqlite_url)
    assert usage.returncode == 2, usage.stdout + usage.stderr
    assert "Traceback" not in usage.stderr


EXITS = f"{Path(__file__).resolve().parent / 'exits_task.py'}:task"


@pytest.mark.parametrize(
    ("how", "shown"),
    [
        ("exit0", "SystemExit: sys.exit(0) was called in step 'leave'"),
        ("exit1", "SystemExit: sys.exit(1) was called in step 'leave'"),
        ("exitmsg", "SystemExit: sys.exit('bye') was called in step 'leave'"),
        ("base", "Odd: odd (Odd is a BaseException, not an Exception"),
    ],
)
def test_a_step_that_exits_fails_the_step(db_url: str, how: str, shown: str) -> None:
    failed = run_cli("run", EXITS, "--thread", "t", db=db_url, env={"LT_HOW": how})
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "Traceback" not in failed.stderr + failed.stdout
    [line] = _error_lines(failed.stderr)
    assert line.startswith(f"error: step 'leave' failed: {shown}"), failed.stderr
    assert "longtask resume t" in failed.stderr
    with Runner(db_url) as runner:
        st = runner.status("t")
        assert (st.status, st.error and st.error["step"]) == ("failed", "leave")
        [event] = runner.events("t", kinds=["step.failed"])
        assert event.step == "leave" and event.data["type"] == shown.split(":")[0]
    # once the cause is gone, the thread continues from the failed step
    resumed = run_cli("resume", "t", db=db_url)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr


def _interrupted(db: str, result: subprocess.CompletedProcess[str] | Any) -> None:
    assert result.returncode == 130, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "interrupted; the thread keeps every step it finished; continue with "
        f"`longtask resume t --db {db}`"
    ), result.stderr
    with Runner(db) as runner:
        # PostgreSQL frees the dead process's lock when it notices the closed connection
        deadline = time.monotonic() + 10
        while runner.status("t").active and time.monotonic() < deadline:
            time.sleep(0.05)
        st = runner.status("t")
        assert (st.status, st.active) == ("running", False)
        assert {s.name: s.state for s in st.steps}["first"] == "completed"
    resumed = run_cli("resume", "t", "--db", db, db=db)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "thread t completed" in resumed.stdout


def test_a_keyboard_interrupt_in_a_step_leaves_the_thread_resumable(db_url: str) -> None:
    stopped = run_cli(
        "run", EXITS, "--thread", "t", "--db", db_url, db=db_url, env={"LT_HOW": "kbd"}
    )
    _interrupted(db_url, stopped)


@pytest.mark.parametrize("task", ["task", "parallel"])
def test_ctrl_c_leaves_the_thread_resumable(db_url: str, tmp_path: Path, task: str) -> None:
    """Ctrl-C during a step of a minute stops the run within seconds, exit 130 (issue 29,
    point 4): ``parallel`` naps beside another step, so on LangGraph's executor threads,
    which LangGraph waits for before the interrupt gets out (a minute, without the CLI's
    own stop after a grace)."""
    marker = tmp_path / "napping"
    env = {**os.environ, "LONGTASK_DB": db_url, "LT_HOW": "nap", "LT_NAP_MARKER": str(marker)}
    ref = EXITS.rsplit(":", 1)[0] + ":" + task
    proc = subprocess.Popen(
        [sys.executable, "-m", "longtask", "run", ref, "--thread", "t", "--db", db_url],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert marker.exists(), proc.communicate(timeout=30)
        proc.send_signal(signal.SIGINT)
        # well before the step's minute is up (a bound that fails the test, not a timing)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    done = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    _interrupted(db_url, done)
