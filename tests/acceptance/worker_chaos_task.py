"""The task of the worker chaos test (``test_worker_chaos.py``): a chain of 10 steps, each
doing exactly one effect (with a reconciler) against an outside "service".

Worker processes (``longtask worker``) import this file by path, so it reads everything it
needs from the environment:

- ``$LT_WCHAOS_SERVICE``: the service, an SQLite file independent of the database under
  test: table ``calls(key, thread, step, pid, ts)``, one autocommitted insert per call, so a
  row is durable before the effect returns (and survives a SIGKILL right after it).
- ``$LT_WCHAOS_TRACE``: where every run of a step records itself: table ``runs(thread,
  step, pid, start, end)``, a row inserted (committed) when the step starts and its ``end``
  set when it returns. A run cut off by a SIGKILL keeps ``end`` NULL (the test takes the
  time of the kill for it). This attributes each run of a step to a worker process, which
  the events alone cannot do (a killed worker's last events may never be written).

A step sleeps a little before the effect, inside the call (on both sides of the service's
insert) and after it, about 50 ms in all (34 of them in the call), so that kills land
before, during and after effects. An effect's result is ``{"call": <the service's row
id>, "key", "step"}``; the reconciler :func:`find_call` rebuilds exactly that from the
service's row.
"""

from __future__ import annotations

import os
import random
import sqlite3
import time
from pathlib import Path
from typing import Any

from longtask import EffectCall, LongTask, Stage, StepContext, function_step

SERVICE_ENV = "LT_WCHAOS_SERVICE"
TRACE_ENV = "LT_WCHAOS_TRACE"
STEPS = [f"s{i}" for i in range(10)]

# sleeps in seconds (uniform ranges): about 50 ms per step in all, 34 of them in the call
BEFORE_EFFECT = (0.006, 0.012)
IN_CALL_BEFORE_INSERT = (0.012, 0.022)
IN_CALL_AFTER_INSERT = (0.012, 0.022)
AFTER_EFFECT = (0.006, 0.012)


def _connect(path: str | Path, schema: str) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), timeout=30, isolation_level=None)
    conn.execute("PRAGMA busy_timeout=30000")
    # WAL without fsync per commit: a committed row survives SIGKILL (it is in the OS's
    # hands), and workers do not queue behind each other's fsync.
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute(schema)
    return conn


def service(path: str | Path) -> sqlite3.Connection:
    return _connect(
        path,
        "CREATE TABLE IF NOT EXISTS calls (key TEXT NOT NULL, thread TEXT NOT NULL, "
        "step TEXT NOT NULL, pid INTEGER NOT NULL, ts REAL NOT NULL)",
    )


def trace(path: str | Path) -> sqlite3.Connection:
    return _connect(
        path,
        "CREATE TABLE IF NOT EXISTS runs (thread TEXT NOT NULL, step TEXT NOT NULL, "
        "pid INTEGER NOT NULL, start REAL NOT NULL, end REAL)",
    )


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise RuntimeError(f"${name} is not set")
    return value


def _nap(bounds: tuple[float, float]) -> None:
    time.sleep(random.uniform(*bounds))


def record(call_id: int, key: str, step: str) -> dict[str, Any]:
    """The effect's result for the service's row ``call_id``."""
    return {"call": call_id, "key": key, "step": step}


def service_call(thread: str, step: str, idempotency_key: str) -> dict[str, Any]:
    """The outside call: the service records it (committed before this returns)."""
    _nap(IN_CALL_BEFORE_INSERT)
    conn = service(_env(SERVICE_ENV))
    try:
        cur = conn.execute(
            "INSERT INTO calls (key, thread, step, pid, ts) VALUES (?, ?, ?, ?, ?)",
            (idempotency_key, thread, step, os.getpid(), time.time()),
        )
        call_id = int(cur.lastrowid or 0)
    finally:
        conn.close()
    _nap(IN_CALL_AFTER_INSERT)
    return record(call_id, idempotency_key, step)


def lookup(path: str | Path, key: str) -> dict[str, Any] | None:
    """What the service knows about ``key``: the result of its first call, or None."""
    conn = service(path)
    try:
        row = conn.execute(
            "SELECT rowid, step FROM calls WHERE key = ? ORDER BY rowid LIMIT 1", (key,)
        ).fetchone()
    finally:
        conn.close()
    return None if row is None else record(int(row[0]), key, str(row[1]))


def find_call(call: EffectCall) -> dict[str, Any] | None:
    """The reconciler: a call cut off mid-way is found in the service (or not)."""
    return lookup(_env(SERVICE_ENV), call.idempotency_key)


def _make(name: str) -> Any:
    def run(ctx: StepContext) -> dict[str, Any]:
        conn = trace(_env(TRACE_ENV))
        try:
            cur = conn.execute(
                "INSERT INTO runs (thread, step, pid, start) VALUES (?, ?, ?, ?)",
                (ctx.thread_id, name, os.getpid(), time.time()),
            )
            run_id = cur.lastrowid
            try:
                _nap(BEFORE_EFFECT)
                result = ctx.effect("call", service_call, ctx.thread_id, name, reconcile=find_call)
                _nap(AFTER_EFFECT)
            finally:  # a run that raises ends too; only a killed one keeps end NULL
                conn.execute("UPDATE runs SET end = ? WHERE rowid = ?", (time.time(), run_id))
        finally:
            conn.close()
        return {"step": name, "effect": result}

    run.__name__ = run.__qualname__ = f"wchaos_{name}"
    return function_step(run, name=name)


task = LongTask(
    name="worker_chaos",
    version="1",
    stages=[Stage(f"stage_{s}", [_make(s)]) for s in STEPS],
)
