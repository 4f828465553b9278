"""A LongTask with a 40-item map step that can kill its own process inside a chosen item
(acceptance tests for map steps).

Stages: ``prepare`` (``numbers``: the list ``0 .. count-1``), ``fan`` (``square``: a map
step over that list, item ``i`` returns ``{"i": i, "square": i * i}``) and ``total``
(``total``: the sum of the squares). Two tasks with the same steps: ``task`` maps with
``max_parallel=4``, ``wide`` with ``max_parallel=8``.

Environment (none of it is part of the definition):

- ``LT_MAP_COUNTER_DB``: an SQLite file outside the database under test. Every item call
  inserts ``(item, pid)`` into ``calls`` and every plain step call ``(step, pid)`` into
  ``steps``, first thing, one commit per insert, so a row survives an ``os._exit``.
- ``LT_CRASH_ITEM``: the index of the item inside which the process dies with
  ``os._exit(1)``, once: the crash creates ``LT_CRASH_MARKER`` and an item that finds it
  does not crash again.
- ``LT_ITEM_SLEEP``: when set, item ``i`` sleeps ``SLEEPS[i % 4]`` seconds (0.05 to 0.2),
  so that several siblings are in flight when one of them crashes; the crashing
  item sleeps ``CRASH_AFTER`` seconds first, so that some siblings finish before it and
  some are still running.
- ``LT_CRASH_WAIT_DONE``: when set, the crashing item also waits (at most 10 s) until that
  many items of the map have a stored outcome, so "some siblings finished first" does not
  depend on timing.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from longtask import ItemContext, LongTask, Stage, StepContext, function_step, map_step

COUNTER_ENV = "LT_MAP_COUNTER_DB"
SLEEPS = (0.05, 0.2, 0.1, 0.15)
CRASH_AFTER = 0.12


def _connect(path: str | Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), timeout=30, isolation_level=None)
    conn.execute("PRAGMA busy_timeout=30000")
    conn.execute("CREATE TABLE IF NOT EXISTS calls (item INTEGER NOT NULL, pid INTEGER NOT NULL)")
    conn.execute("CREATE TABLE IF NOT EXISTS steps (step TEXT NOT NULL, pid INTEGER NOT NULL)")
    return conn


def _record(table: str, column: str, value: object) -> None:
    path = os.environ.get(COUNTER_ENV)
    if not path:
        return
    conn = _connect(path)
    try:
        conn.execute(f"INSERT INTO {table} ({column}, pid) VALUES (?, ?)", (value, os.getpid()))
    finally:
        conn.close()


def item_calls(path: str | Path) -> list[tuple[int, int]]:
    """Every recorded item call, in order: (item, pid)."""
    if not Path(path).exists():
        return []
    conn = _connect(path)
    try:
        return [
            (int(i), int(p)) for i, p in conn.execute("SELECT item, pid FROM calls ORDER BY rowid")
        ]
    finally:
        conn.close()


def step_calls(path: str | Path) -> list[tuple[str, int]]:
    """Every recorded plain step call, in order: (step, pid)."""
    if not Path(path).exists():
        return []
    conn = _connect(path)
    try:
        return [(s, int(p)) for s, p in conn.execute("SELECT step, pid FROM steps ORDER BY rowid")]
    finally:
        conn.close()


def _sleep_for(index: int) -> float:
    return SLEEPS[index % len(SLEEPS)] if os.environ.get("LT_ITEM_SLEEP") else 0.0


def _wait_done(ctx: StepContext, count: int, timeout: float = 10.0) -> None:
    """Block until ``count`` items of this map step have a stored outcome."""
    from longtask import Runner

    deadline = time.monotonic() + timeout
    with Runner(os.environ["LONGTASK_DB"]) as runner:
        while time.monotonic() < deadline:
            view = next(s for s in runner.status(ctx.thread_id).steps if s.name == ctx.step)
            if (view.items_done or 0) >= count:
                return
            time.sleep(0.02)


def numbers(ctx: StepContext) -> list[int]:
    _record("steps", "step", ctx.step)
    return list(range(int(ctx.inputs.get("count", 40))))


def _items(ctx: StepContext) -> list[int]:
    return list(ctx.result("numbers"))


def square(ctx: ItemContext, item: int) -> dict[str, int]:
    index = ctx.item_index
    assert item == ctx.item == index, (item, ctx.item, index)
    _record("calls", "item", index)
    if os.environ.get("LT_CRASH_ITEM") == str(index):
        marker = Path(os.environ["LT_CRASH_MARKER"])
        if not marker.exists():
            if os.environ.get("LT_ITEM_SLEEP"):
                time.sleep(CRASH_AFTER)
            if os.environ.get("LT_CRASH_WAIT_DONE"):
                _wait_done(ctx, int(os.environ["LT_CRASH_WAIT_DONE"]))
            marker.write_text(str(os.getpid()))
            os._exit(1)
    time.sleep(_sleep_for(index))
    return {"i": index, "square": index * index}


def total(ctx: StepContext) -> int:
    _record("steps", "step", ctx.step)
    results: list[dict[str, Any]] = ctx.result("square")
    return sum(r["square"] for r in results)


def _task(name: str, max_parallel: int) -> LongTask:
    return LongTask(
        name=name,
        version="1",
        stages=[
            Stage("prepare", [function_step(numbers)]),
            Stage("fan", [map_step(square, over=_items, max_parallel=max_parallel)]),
            Stage("sum", [function_step(total)]),
        ],
    )


task = _task("map_crash", 4)
wide = _task("map_crash_wide", 8)
