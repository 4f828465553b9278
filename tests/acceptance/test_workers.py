"""Workers on PostgreSQL, as real processes: fencing a worker that stalled past its lease,
and threads that wait for people holding no worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from longtask import Runner

HERE = Path(__file__).resolve().parent
STALLED_AFTER = "1.5"


def _until(what: str, ok: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def _silent(runner: Runner, thread: str) -> bool:
    return runner.status(thread).worker_silent_for is not None


def _cli(db: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "longtask", *args, "--db", db],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture
def workers(pg_url: str, tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []

    def start(
        name: str, env: dict[str, str] | None = None, stalled_after: str = STALLED_AFTER
    ) -> subprocess.Popen[str]:
        log = open(tmp_path / f"{name}.log", "w")  # noqa: SIM115 (closed with the process)
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "longtask",
                "worker",
                "--stalled-after",
                stalled_after,
                "--name",
                name,
            ],
            env={**os.environ, "LONGTASK_DB": pg_url, **(env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            proc.wait(10)


def test_a_stalled_worker_is_fenced_off(
    pg_url: str, tmp_path: Path, workers: Callable[..., subprocess.Popen[str]]
) -> None:
    env = {
        "LT_HOLD": str(tmp_path / "hold"),
        "LT_RELEASE": str(tmp_path / "release"),
        "LT_RUNS": str(tmp_path / "runs"),
    }
    os.environ.update(env)  # the task module reads them when the runner imports it
    first = workers("first", env)
    with Runner(pg_url) as runner:
        from worker_task import fenced

        thread = runner.submit(
            fenced, thread_id="t-fenced", task_ref=f"{HERE}/worker_task.py:fenced"
        )
        pid_file = tmp_path / "hold.pid"
        _until("s2 to start on the first worker", pid_file.exists)
        assert int(pid_file.read_text()) == first.pid
        assert runner.status(thread).worker == "first"
        first.send_signal(signal.SIGSTOP)  # a long GC pause, a network stall
        checkpoints_before = len(runner.db.store.checkpoint_tree(thread))
        # Issue 45: before a takeover, status says the holder is silent (its progress is
        # frozen), not merely "held by worker first".
        _until("status to see the first worker silent", lambda: _silent(runner, thread))
        shown = _cli(pg_url, "status", thread)
        assert "held by worker first, silent for" in shown, shown
        assert "takes the thread over after 1.5s of silence" in shown, shown

        second = workers("second", env)
        _until(
            "the second worker to finish the thread",
            lambda: runner.status(thread).status == "completed",
        )
        assert runner.result(thread, "s3") == {"after": second.pid}
        # The stopped worker's row still names the thread it ran at its last beat; it no
        # longer holds it. (Issue 45: `workers` said "holding" long after the takeover.)
        listed = _cli(pg_url, "workers")
        (line,) = [ln for ln in listed.splitlines() if ln.startswith("first ")]
        assert "running" not in line and f"taken over: {thread}" in line, listed
        assert "silent for" in line, listed
        done = runner.db.store.checkpoint_tree(thread)
        assert len(done) > checkpoints_before

        # The first worker wakes up and finishes its step: every write it tries is refused.
        (tmp_path / "release").write_text("go")
        first.send_signal(signal.SIGCONT)
        log = tmp_path / "first.log"
        _until(
            "the first worker to give the thread up",
            lambda: (
                f"lease lost: thread {thread} is advanced by another process" in log.read_text()
            ),
        )
        time.sleep(0.5)
        assert runner.db.store.checkpoint_tree(thread) == done  # nothing written since
        assert len(runner.branches(thread)) == 1  # one line of history, no fork
        assert runner.status(thread).status == "completed"
        assert runner.result(thread, "s2") == {"pid": second.pid}
        runs = [int(p) for p in (tmp_path / "runs").read_text().split()]
        assert runs == [first.pid, second.pid]

        # The takeover is told once, by the lease-lost line: procrastinate could not finish
        # a job the second worker had taken over ("Job was not found"), and the failed
        # acknowledgment was logged as an asyncio task exception never retrieved, with its
        # traceback (issue 39). Stopped gracefully, the worker has logged all it will.
        first.send_signal(signal.SIGTERM)
        first.wait(30)
        text = log.read_text()
        for noise in ("Task exception was never retrieved", "Job was not found", "Traceback"):
            assert noise not in text, text
        assert text.count(f"thread {thread}") == 1, text


def test_waiting_threads_hold_no_worker(
    pg_url: str, workers: Callable[..., subprocess.Popen[str]]
) -> None:
    import psycopg
    from worker_task import gated

    for name in ("w1", "w2"):
        workers(name)
    with Runner(pg_url) as runner:
        ref = f"{HERE}/worker_task.py:gated"
        threads = [
            runner.submit(gated, {"n": i}, thread_id=f"t-wait-{i}", task_ref=ref) for i in range(20)
        ]
        _until(
            "every thread to wait for its approval",
            lambda: all(runner.status(t).status == "waiting_user" for t in threads),
        )

        def jobs(status: str) -> int:
            with psycopg.connect(pg_url) as conn:
                row = conn.execute(
                    "SELECT count(*) FROM procrastinate_jobs WHERE status = %s "
                    "AND task_name = 'longtask.advance'",
                    (status,),
                ).fetchone()
            return int(row[0]) if row else -1

        _until("the workers to let go", lambda: jobs("doing") == 0 and jobs("todo") == 0)
        busy = [w for w in runner.db.store.workers(time.time() - 60) if w.current]
        assert busy == [] and all(runner.status(t).worker is None for t in threads)

        for t in threads:
            runner.approve(t, "go", by="ops")  # queued for the workers, returns at once
        _until(
            "every approved thread to complete",
            lambda: all(runner.status(t).status == "completed" for t in threads),
        )
        assert [runner.result(t, "finish") for t in threads] == [2 * i for i in range(20)]


def test_a_strict_worker_does_not_take_over_a_slow_beating_one(
    pg_url: str, tmp_path: Path, workers: Callable[..., subprocess.Popen[str]]
) -> None:
    """Workers with different --stalled-after values: each is judged by the largest
    threshold of the live workers, so a healthy worker that beats every 1.5 s (threshold
    6 s) keeps its thread while a worker with a 1 s threshold looks on."""
    env = {
        "LT_HOLD": str(tmp_path / "hold"),
        "LT_RELEASE": str(tmp_path / "release"),
        "LT_RUNS": str(tmp_path / "runs"),
    }
    os.environ.update(env)
    slow = workers("slow", env, stalled_after="6")
    with Runner(pg_url) as runner:
        from worker_task import fenced

        thread = runner.submit(
            fenced, thread_id="t-mixed", task_ref=f"{HERE}/worker_task.py:fenced"
        )
        _until("s2 to start on the slow-beating worker", (tmp_path / "hold.pid").exists)
        workers("strict", env, stalled_after="1")
        time.sleep(4)  # four times the strict worker's own threshold
        (tmp_path / "release").write_text("go")
        _until("the thread to complete", lambda: runner.status(thread).status == "completed")
        runs = [int(p) for p in (tmp_path / "runs").read_text().split()]
        assert runs == [slow.pid]  # s2 ran once, on the worker that held it
        assert "lease lost" not in (tmp_path / "slow.log").read_text()
