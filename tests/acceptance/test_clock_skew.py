"""A process whose clock is behind (or ahead of) the one that wrote a thread advances it
like any other: every step runs once. Checkpoint ids come from the writer's clock
(LangGraph's uuid6); the head of a thread used to be the greatest id, so a resume, an
approval or a signal from a process a few seconds slow started each super-step again from
the stale head and re-ran finished steps (a 1, b 2, c 4, d 6).

The clocks are moved with ``faketime`` (Debian's package, installed by ``.ci/run``): the
wall clock only, as an NTP step or a slow machine moves it (monotonic time is left alone).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from longtask import Runner

HERE = Path(__file__).resolve().parent
TASKS = HERE / "clock_task.py"

#: behind by 5 s, 30 s and 20 min, and ahead by an hour
OFFSETS = ["-5s", "-30s", "-20m", "+1h"]
#: how each kind of pause is answered from the command line
OPS = {
    "resume": ("chain", lambda t: ["resume", t]),
    "approve": ("gated", lambda t: ["approve", t, "gate", "--by", "alice"]),
    "signal": ("waiting", lambda t: ["signal", t, "ci", "--payload", '{"status": "passed"}']),
}
#: what each task's log holds once it completed: b ran twice (its failed attempt, then once)
EXPECTED = {
    "chain": {"a": 1, "b": 2, "c": 1, "d": 1},
    "gated": {"a": 1, "c": 1, "d": 1},
    "waiting": {"a": 1, "c": 1, "d": 1},
}


@pytest.fixture(scope="module")
def faketime() -> str:
    found = shutil.which("faketime")
    if found is None:
        message = "faketime is not installed (apt-get install faketime; .ci/run does)"
        if os.environ.get("CI"):
            pytest.fail(message + " (CI is set: the clock tests must run)")
        pytest.skip(message)
    return found


def _cli(
    args: list[str],
    *,
    db: str,
    log: Path,
    offset: str | None = None,
    faketime: str = "faketime",
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    prefix = [faketime, "-f", offset] if offset else []
    return subprocess.run(
        [*prefix, sys.executable, "-m", "longtask", *args],
        env={
            **os.environ,
            "LONGTASK_DB": db,
            "LT_RUNS_LOG": str(log),
            # the wall clock only: an NTP step leaves monotonic time alone
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            **(env or {}),
        },
        capture_output=True,
        text=True,
        timeout=120,
    )


def _runs(log: Path) -> dict[str, int]:
    return dict(Counter(log.read_text().split())) if log.exists() else {}


def _check_completed(db: str, thread: str, task: str, log: Path) -> None:
    assert _runs(log) == EXPECTED[task]
    with Runner(db) as runner:
        assert runner.status(thread).status == "completed"
        assert runner.result(thread, "d") == "d"
        # one line of checkpoints, whose head is the latest: nothing forked on the way
        branches = runner.branches(thread)
        assert len(branches) == 1 and branches[0].current
        # ... and each function step completed once along it, the last at its head
        history = runner.history(thread)
        assert history[0].checkpoint_id == branches[0].head and history[0].completed == ["d"]
        completed = Counter(step for h in history for step in h.completed if step in "abcd")
        assert completed == dict.fromkeys(EXPECTED[task], 1)


def _pause(db: str, task: str, thread: str, log: Path, offset: str | None, ft: str) -> None:
    """Run the task until it stops: b fails (chain), or it waits for a person or CI."""
    env = {"LT_FAIL": "1"} if task == "chain" else {}
    proc = _cli(
        ["run", f"{TASKS}:{task}", "--thread", thread],
        db=db,
        log=log,
        offset=offset,
        faketime=ft,
        env=env,
    )
    assert proc.returncode == (1 if task == "chain" else 3), proc.stdout + proc.stderr
    assert _runs(log) == ({"a": 1, "b": 1} if task == "chain" else {"a": 1})


@pytest.mark.parametrize("offset", OFFSETS)
@pytest.mark.parametrize("op", sorted(OPS))
def test_a_skewed_clock_runs_every_step_once(
    db_url: str, tmp_path: Path, faketime: str, op: str, offset: str
) -> None:
    task, args = OPS[op]
    log = tmp_path / "runs.log"
    _pause(db_url, task, "r1", log, None, faketime)
    proc = _cli(args("r1"), db=db_url, log=log, offset=offset, faketime=faketime)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _check_completed(db_url, "r1", task, log)


@pytest.mark.parametrize("op", sorted(OPS))
def test_a_thread_written_ahead_is_continued_by_a_true_clock(
    db_url: str, tmp_path: Path, faketime: str, op: str
) -> None:
    """The other way round: the thread was written by a clock an hour ahead (then set
    right), and the process that continues it has the true time."""
    task, args = OPS[op]
    log = tmp_path / "runs.log"
    _pause(db_url, task, "r1", log, "+1h", faketime)
    proc = _cli(args("r1"), db=db_url, log=log)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _check_completed(db_url, "r1", task, log)


@pytest.mark.postgres
def test_a_worker_whose_clock_is_behind_continues_a_thread(
    pg_url: str, tmp_path: Path, faketime: str
) -> None:
    """A worker with the true time runs the thread to its approval; a worker 30 s behind
    continues it after the approval."""
    log = tmp_path / "runs.log"
    procs: list[subprocess.Popen[str]] = []

    def worker(name: str, offset: str | None) -> subprocess.Popen[str]:
        prefix = [faketime, "-f", offset] if offset else []
        out = open(tmp_path / f"{name}.log", "w")  # noqa: SIM115 (closed with the process)
        proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", "longtask", "worker", "--name", name],
            env={
                **os.environ,
                "LONGTASK_DB": pg_url,
                "LT_RUNS_LOG": str(log),
                "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            },
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )
        procs.append(proc)
        return proc

    def until(what: str, ok: object) -> None:
        deadline = time.monotonic() + 90
        while not ok():  # type: ignore[operator]
            if time.monotonic() > deadline:
                logs = {p.name: p.read_text() for p in tmp_path.glob("w-*.log")}
                pytest.fail(f"timed out waiting for {what}: {json.dumps(logs)[-3000:]}")
            time.sleep(0.05)

    sys.path.insert(0, str(HERE))
    try:
        from clock_task import gated

        with Runner(pg_url) as runner:
            first = worker("w-true", None)
            runner.submit(gated, thread_id="w1", task_ref=f"{TASKS}:gated")
            until("the approval", lambda: runner.status("w1").status == "waiting_user")
            first.send_signal(signal.SIGTERM)
            first.wait(30)
            worker("w-behind", "-30s")
            runner.approve("w1", "gate", by="alice")  # queued for the worker
            until("the thread to complete", lambda: runner.status("w1").status == "completed")
        _check_completed(pg_url, "w1", "gated", log)
    finally:
        sys.path.remove(str(HERE))
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


# -- whose clock decides time (issue 28, item 11) ------------------------------------------
# On PostgreSQL the database server's clock decides deadlines and schedule fires for every
# process, so one whose clock is fast acts on nothing early. (On SQLite every process is on
# one machine, and its clock decides.)


@pytest.mark.postgres
def test_a_tick_two_hours_fast_does_not_time_out_an_approval_early(
    pg_url: str, tmp_path: Path, faketime: str
) -> None:
    log = tmp_path / "runs.log"
    proc = _cli(["run", f"{TASKS}:timed", "--thread", "t1"], db=pg_url, log=log)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    # the approval has an hour; this tick's clock says two have passed
    proc = _cli(["tick"], db=pg_url, log=log, offset="+2h", faketime=faketime)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 deadline(s) processed" in proc.stdout, proc.stdout
    with Runner(pg_url) as runner:
        assert runner.status("t1").status == "waiting_user"
        assert not [e for e in runner.events("t1") if e.kind == "approval.expired"]
    # ... and the approval is still answered as usual
    proc = _cli(["approve", "t1", "gate", "--by", "alice"], db=pg_url, log=log)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _runs(log) == EXPECTED["gated"]


@pytest.mark.postgres
def test_a_tick_an_hour_fast_does_not_fire_an_hourly_schedule_early(
    pg_url: str, tmp_path: Path, faketime: str
) -> None:
    log = tmp_path / "runs.log"
    add = ["schedule", "add", f"{TASKS}:chain", "--cron", "0 * * * *", "--name", "hourly"]
    proc = _cli(add, db=pg_url, log=log)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with Runner(pg_url) as runner:
        due = runner.schedule("hourly").next_fire_at
    proc = _cli(["tick", "--json"], db=pg_url, log=log, offset="+1h", faketime=faketime)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    fired = [r for r in json.loads(proc.stdout) if "schedule" in r]
    with Runner(pg_url) as runner:
        now = runner.clock()  # the database server's
        record = runner.schedule("hourly")
    # nothing fired before its time by the database's clock (a test run across the hour
    # may fire the tick that is really due)
    if now < due:
        assert fired == [], fired
        assert record.next_fire_at == due and record.last_tick_at is None
    assert record.last_tick_at is None or record.last_tick_at <= now
