"""Promise 5 when the lock is lost: a process whose writer lock went away while its step ran
(PostgreSQL: its lock connection closed by ``idle_session_timeout`` or by
``pg_terminate_backend``) lets a second ``longtask resume`` in, and then stops with "lease
lost" on its next write, writing nothing; the history does not fork. On SQLite the same
database file reached through a symlink is one lock: the second process is refused.

``lease_task.py``: ``first``, ``hold`` (blocks the first time until the test opens a gate),
``after1``, ``after2``; every call is counted with its pid.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import counter
import lease_task
import psycopg
import pytest
from conftest import PG_ADMIN_URL, _admin, run_cli

from longtask import Runner

HERE = Path(__file__).resolve().parent
TASK_REF = f"{HERE / 'lease_task.py'}:task"
BUSY = "is being advanced by another process"


def _lost(thread: str) -> str:
    return f"lease lost: thread {thread} is advanced by another process"


def _popen_cli(*args: str, db: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "longtask", *args],
        env={**os.environ, "LONGTASK_DB": db, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _until(what: str, cond: Callable[[], bool], limit: float = 60) -> None:
    """Poll (bounded) until ``cond()``; a bound, not a timing assertion."""
    deadline = time.monotonic() + limit
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


def _admin_rows(sql: str, params: tuple[object, ...]) -> list[tuple[object, ...]]:
    with psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=5) as conn:
        return list(conn.execute(sql, params).fetchall())  # type: ignore[arg-type]


def _advisory_holders(dbname: str) -> list[int]:
    """Backends holding an advisory lock in ``dbname`` (the writer locks)."""
    rows = _admin_rows(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND database = "
        "(SELECT oid FROM pg_database WHERE datname = %s)",
        (dbname,),
    )
    return [int(r[0]) for r in rows]  # type: ignore[call-overload]


@pytest.fixture
def lease_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    gate = tmp_path / "gate"
    env = {counter.ENV_VAR: str(tmp_path / "calls.db"), "LT_GATE": str(gate)}
    yield env
    gate.write_text("go")  # never leave a process blocked


def _start_holder(db: str, thread: str, env: dict[str, str]) -> subprocess.Popen[str]:
    """Process 1: runs the thread and blocks in ``hold``, holding it."""
    first = _popen_cli("run", TASK_REF, "--thread", thread, db=db, env=env)
    calls = Path(env[counter.ENV_VAR])
    _until("process 1 to be inside `hold`", lambda: counter.counts(calls)["hold"] == 1)
    return first


def _one_line_of_history(db: str, thread: str, env: dict[str, str]) -> None:
    shown = run_cli("branches", thread, db=db, env=env)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.strip().splitlines()
    assert len(lines) == 1 and "original" in lines[0], shown.stdout
    with Runner(db) as runner:
        assert len(runner.branches(thread)) == 1


@pytest.mark.parametrize("loss", ["idle_session_timeout", "pg_terminate_backend"])
def test_lock_lost_while_a_step_runs_the_stale_writer_stops(
    pg_url: str, lease_env: dict[str, str], loss: str
) -> None:
    thread = f"lost-{loss}"
    dbname = pg_url.rpartition("/")[2]
    env = lease_env
    calls = Path(env[counter.ENV_VAR])
    if loss == "idle_session_timeout":
        # New sessions of this database only: both processes start after it.
        _admin(f"ALTER DATABASE \"{dbname}\" SET idle_session_timeout = '2s'")

    first = _start_holder(pg_url, thread, env)
    try:
        assert _advisory_holders(dbname), "process 1 holds no writer lock"
        if loss == "idle_session_timeout":
            # the server closes process 1's idle lock connection
            _until("the lock connection to time out", lambda: not _advisory_holders(dbname))
        else:
            holders = _advisory_holders(dbname)
            # every connection of process 1 (the only client of this database now)
            _admin_rows(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                (dbname,),
            )
            _until(
                "the lock holder to go", lambda: not set(holders) & set(_advisory_holders(dbname))
            )

        # Process 2 gets the thread and finishes it while process 1 is still in `hold`.
        second = run_cli("resume", thread, db=pg_url, env=env)
        assert second.returncode == 0, second.stdout + second.stderr
        assert f"thread {thread} completed" in second.stdout
        with Runner(pg_url) as runner:
            tree = runner.db.store.checkpoint_tree(thread)
            assert runner.status(thread).status == "completed"

        # Process 1 wakes up: its next write is refused, it stops and says why.
        Path(env["LT_GATE"]).write_text("go")
        out, err = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode not in (0, None), (first.returncode, out, err)
    # one line: the reason, and nothing from the driver or a traceback
    assert err.strip().splitlines() == [
        f"error: {_lost(thread)}; this process's writes were "
        "refused and it stopped without changing the thread"
    ], err

    with Runner(pg_url) as runner:
        # nothing written by process 1 after the loss; not marked failed by it
        assert runner.db.store.checkpoint_tree(thread) == tree
        st = runner.status(thread)
        assert st.status == "completed"
        assert {s.state for s in st.steps} == {"completed"}
        results = runner.results(thread)
        assert results["first"] == {"pid": first.pid}
        completed = [e.step for e in runner.events(thread, kinds=["step.completed"])]
        assert sorted(completed) == sorted(lease_task.STEPS), completed  # each once
    # each step ran once, except `hold`, the one running when the lock was lost
    assert counter.counts(calls) == {"first": 1, "hold": 2, "after1": 1, "after2": 1}
    pids = dict(counter.calls(calls)[2:])  # after process 1's `first` and `hold`
    assert first.pid not in pids.values(), counter.calls(calls)
    assert {results[s]["pid"] for s in ("hold", "after1", "after2")} == set(pids.values())
    _one_line_of_history(pg_url, thread, env)


def test_sqlite_symlinked_name_is_the_same_lock(tmp_path: Path, lease_env: dict[str, str]) -> None:
    thread = "symlinked"
    env = lease_env
    calls = Path(env[counter.ENV_VAR])
    real_dir = tmp_path / "real"
    real_dir.mkdir()
    real = real_dir / "longtask.db"
    file_link = tmp_path / "link.db"
    dir_link = tmp_path / "linked-dir"
    real_url = f"sqlite:///{real}"

    first = _start_holder(real_url, thread, env)
    file_link.symlink_to(real)
    dir_link.symlink_to(real_dir, target_is_directory=True)
    try:
        for other in (file_link, dir_link / "longtask.db"):
            second = run_cli("resume", thread, db=f"sqlite:///{other}", env=env)
            assert second.returncode == 1, (other, second.stdout, second.stderr)
            assert BUSY in second.stderr, second.stderr
            with Runner(f"sqlite:///{other}") as runner:
                assert runner.status(thread).active
        Path(env["LT_GATE"]).write_text("go")
        out, err = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 0, (out, err)
    assert counter.counts(calls) == {"first": 1, "hold": 1, "after1": 1, "after2": 1}
    assert {pid for _, pid in counter.calls(calls)} == {first.pid}
    with Runner(f"sqlite:///{file_link}") as runner:
        assert runner.status(thread).status == "completed"
    _one_line_of_history(real_url, thread, env)
