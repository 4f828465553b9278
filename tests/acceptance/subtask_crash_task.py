"""A parent LongTask that fans out to one child thread per item (acceptance tests for
sub-task steps, issue 44), and a parent whose children each wait for an approval.

``parent``: ``plan`` (the list ``1 .. count``), ``fan`` (a sub-task step: one ``child`` per
number) and ``total`` (the sum of the children's results). ``child``: ``work`` returns
``n * n`` after a short sleep (so that kills land inside children too).

Environment (none of it is part of the definition): ``LT_SUB_COUNTER_DB``, an SQLite file
outside the database under test: every ``work`` call inserts ``(thread, n, pid)`` into
``calls`` and every ``total`` call ``(pid)`` into ``totals``, first thing, one commit per
insert, so a row survives a SIGKILL. ``LT_SUB_SLEEP``: how long each ``work`` sleeps.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from pydantic import BaseModel

from longtask import LongTask, Stage, StepContext, approval, function_step, subtask_step

COUNTER_ENV = "LT_SUB_COUNTER_DB"
#: seconds each child's work sleeps (default 0.05-0.14)
SLEEP_ENV = "LT_SUB_SLEEP"


def _connect(path: str | Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), timeout=30, isolation_level=None)
    conn.execute("PRAGMA busy_timeout=30000")
    conn.execute("CREATE TABLE IF NOT EXISTS calls (thread TEXT, n INTEGER, pid INTEGER)")
    conn.execute("CREATE TABLE IF NOT EXISTS totals (pid INTEGER)")
    return conn


def work_calls(path: str | Path) -> list[tuple[str, int, int]]:
    conn = _connect(path)
    try:
        return [(str(t), int(n), int(p)) for t, n, p in conn.execute("SELECT * FROM calls")]
    finally:
        conn.close()


def total_calls(path: str | Path) -> int:
    conn = _connect(path)
    try:
        return int(conn.execute("SELECT count(*) FROM totals").fetchone()[0])
    finally:
        conn.close()


class Count(BaseModel):
    count: int = 5


class N(BaseModel):
    n: int


@function_step
def work(ctx: StepContext) -> int:
    path = os.environ.get(COUNTER_ENV)
    if path:
        conn = _connect(path)
        try:
            conn.execute(
                "INSERT INTO calls VALUES (?, ?, ?)", (ctx.thread_id, ctx.inputs.n, os.getpid())
            )
        finally:
            conn.close()
    time.sleep(float(os.environ.get(SLEEP_ENV) or 0.05 + 0.03 * (ctx.inputs.n % 4)))
    return int(ctx.inputs.n) ** 2


child = LongTask("sub_child", inputs=N, stages=[Stage("work", [work])])


@function_step
def plan(ctx: StepContext) -> list[int]:
    return list(range(1, ctx.inputs.count + 1))


@function_step
def total(ctx: StepContext) -> int:
    path = os.environ.get(COUNTER_ENV)
    if path:
        conn = _connect(path)
        try:
            conn.execute("INSERT INTO totals VALUES (?)", (os.getpid(),))
        finally:
            conn.close()
    return int(sum(ctx.result("fan")))


def _numbers(ctx: StepContext) -> list[int]:
    return list(ctx.result("plan"))


def _inputs(ctx: StepContext, n: int) -> dict[str, int]:
    return {"n": n}


parent = LongTask(
    "sub_parent",
    inputs=Count,
    stages=[
        Stage("plan", [plan]),
        Stage("fan", [subtask_step("fan", child, over=_numbers, inputs=_inputs)]),
        Stage("total", [total]),
    ],
)

#: a child that waits for a person, and a parent of two of them
gated_child = LongTask(
    "sub_gated_child", inputs=N, stages=[Stage("ok", [approval("ok")]), Stage("work", [work])]
)
gated_parent = LongTask(
    "sub_gated_parent",
    stages=[
        Stage(
            "fan",
            [subtask_step("fan", gated_child, over=lambda ctx: [{"n": 2}, {"n": 3}])],
        ),
        Stage("total", [total]),
    ],
)
