"""A checkpoint write that fails takes its events with it (issue 28, item 2).

When the transaction storing a step's result fails (the database stopped or the connection
dropped mid-run and the retry could not get through, a lock or statement timeout), the
step's ``step.completed`` goes back to the outbox. Before the fix the result itself was
dropped, and the next transaction of the thread — the end of the failing run, a flush before
a sibling's effect — stored the event alone: a ``step.completed`` for work no checkpoint
held, and on resume the step ran again and got a second one. Now what was to commit
together stays together: the event is only ever stored with the result.

The write is made to fail for real. On PostgreSQL, while the step runs another session
takes an EXCLUSIVE lock on the checkpoint table, so the checkpoint write after the step
waits and the server cancels it at the bound ($LONGTASK_DB_TIMEOUT sets its
``lock_timeout``); event inserts do not need that table and go through. On SQLite (one
connection, one writer) a trigger the step arms refuses the checkpoint row.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import psycopg
import pytest

from longtask import LongTask, Runner, Stage, function_step

CALLS: list[str] = []
LOCKS: list[psycopg.Connection[Any]] = []


def _arm(db_url: str) -> None:
    """Make the next checkpoint write of the run fail (see the module docstring)."""
    if db_url.startswith("postgres"):
        conn = psycopg.connect(db_url)
        conn.execute("LOCK TABLE longtask_cp_checkpoints IN EXCLUSIVE MODE")
        LOCKS.append(conn)
        return
    path = db_url.removeprefix("sqlite:///")
    with sqlite3.connect(path, timeout=30) as conn:
        conn.execute(
            "CREATE TRIGGER fw_refuse BEFORE INSERT ON longtask_cp_checkpoints "
            "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
        )
    conn.close()


def _disarm(db_url: str) -> None:
    for conn in LOCKS:
        conn.close()
    LOCKS.clear()
    if not db_url.startswith("postgres"):
        with sqlite3.connect(db_url.removeprefix("sqlite:///"), timeout=30) as conn:
            conn.execute("DROP TRIGGER IF EXISTS fw_refuse")
        conn.close()


def test_a_failed_checkpoint_write_never_leaves_its_step_completed_behind(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LONGTASK_DB_TIMEOUT", "2")
    CALLS.clear()

    @function_step
    def first(ctx: Any) -> int:
        CALLS.append("first")
        if len(CALLS) == 1:
            _arm(db_url)  # the checkpoint that stores this result cannot be written
        return 1

    @function_step
    def second(ctx: Any) -> int:
        return 2

    task = LongTask("failed-write", stages=[Stage("a", [first]), Stage("b", [second])])
    try:
        with Runner(db_url) as runner, pytest.raises(Exception, match=r"(?i)timeout|refused"):
            runner.start(task, {}, thread_id="fw")
    finally:
        _disarm(db_url)
    with Runner(db_url) as runner:
        events = runner.events("fw", kinds=["step.completed"])
        stored = runner.db.saver.get_tuple({"configurable": {"thread_id": "fw"}})
        committed = stored is not None and (
            "out.first" in stored.checkpoint["channel_values"]
            or any(ch == "out.first" for _, ch, _ in stored.pending_writes or ())
        )
        # the event is stored only with the result it tells of
        assert [e.step for e in events] == (["first"] if committed else []), (events, committed)

        runner.resume("fw", task=task)
        assert runner.status("fw").status == "completed"
        assert runner.result("fw", "second") == 2
        events = runner.events("fw", kinds=["step.completed"])
        assert [e.step for e in events] == ["first", "second"]
        # a step whose result was stored did not run again
        ran = CALLS
        assert ran == (["first"] if committed else ["first", "first"])
