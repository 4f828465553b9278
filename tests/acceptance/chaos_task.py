"""The task of the chaos test of the side-effect ledger (``test_chaos.py``): 10 steps, each
doing exactly one effect against an outside "service".

Shape: 5 stages of 2 parallel steps (``step0 ∥ step1``, ``step2 ∥ step3``, ...). Parallel
pairs rather than a chain because a kill then often lands while *two* effects are in
flight at once, one of each kind: every stage pairs an even step (its effect has a
reconciler) with an odd step (no reconciler), so one kill can leave a cut-off call to
reconcile and one for a person in the same LangGraph super-step, and a step that pauses
for a person has a sibling whose result must survive as a pending write. It also halves a
run's wall time against a chain of 10, which makes 100 kills affordable.

The service is an SQLite file independent of the database under test (path in
``$LT_CHAOS_SERVICE``): table ``calls(key, step, pid, ts)``, one autocommitted insert per
call, so the row is durable before the effect returns (and survives a SIGKILL right after
it). :func:`service_call` sleeps a little before and after its insert and the step sleeps a
little before and after the effect, so that random kills land before, during (on either
side of the insert) and after effects. A run of all 10 steps takes about 0.3 s.

An effect's result is ``{"call": <the service's row id>, "key": ..., "step": ...,
"value": ...}``; the reconciler :func:`find_call` rebuilds exactly that from the service's
row, and so does the driver when it settles a cut-off call as the person. A step returns
``{"step": name, "effect": <effect result>}``.
"""

from __future__ import annotations

import os
import random
import sqlite3
import time
from pathlib import Path
from typing import Any

from longtask import EffectCall, LongTask, Stage, StepContext, function_step

SERVICE_ENV = "LT_CHAOS_SERVICE"
STEPS = [f"step{i}" for i in range(10)]
#: steps whose effect passes ``reconcile=``
RECONCILED = frozenset(s for i, s in enumerate(STEPS) if i % 2 == 0)

# sleeps in seconds (uniform ranges), see the module docstring
BEFORE_EFFECT = (0.008, 0.025)
IN_CALL_BEFORE_INSERT = (0.008, 0.02)
IN_CALL_AFTER_INSERT = (0.008, 0.02)
AFTER_EFFECT = (0.005, 0.015)


def connect(path: str | Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), timeout=30, isolation_level=None)
    conn.execute("PRAGMA busy_timeout=30000")
    # WAL without fsync per commit: a committed row survives SIGKILL (it is in the OS's
    # hands), and two parallel steps do not queue behind each other's fsync.
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS calls (key TEXT NOT NULL, step TEXT NOT NULL, "
        "pid INTEGER NOT NULL, ts REAL NOT NULL)"
    )
    return conn


def _service() -> str:
    path = os.environ.get(SERVICE_ENV)
    if not path:
        raise RuntimeError(f"${SERVICE_ENV} is not set")
    return path


def _nap(bounds: tuple[float, float]) -> None:
    time.sleep(random.uniform(*bounds))


def record(call_id: int, key: str, step: str) -> dict[str, Any]:
    """The effect's result for the service's row ``call_id`` (what the call returns, what
    the reconciler and the person report)."""
    return {"call": call_id, "key": key, "step": step, "value": int(step.removeprefix("step"))}


def service_call(step: str, idempotency_key: str) -> dict[str, Any]:
    """The outside call: the service records it (committed before this returns)."""
    _nap(IN_CALL_BEFORE_INSERT)
    conn = connect(_service())
    try:
        cur = conn.execute(
            "INSERT INTO calls (key, step, pid, ts) VALUES (?, ?, ?, ?)",
            (idempotency_key, step, os.getpid(), time.time()),
        )
        call_id = int(cur.lastrowid or 0)
    finally:
        conn.close()
    _nap(IN_CALL_AFTER_INSERT)
    return record(call_id, idempotency_key, step)


def lookup(path: str | Path, key: str) -> dict[str, Any] | None:
    """What the service knows about ``key``: the result of its first call, or None."""
    conn = connect(path)
    try:
        row = conn.execute(
            "SELECT rowid, step FROM calls WHERE key = ? ORDER BY rowid LIMIT 1", (key,)
        ).fetchone()
    finally:
        conn.close()
    return None if row is None else record(int(row[0]), key, str(row[1]))


def find_call(call: EffectCall) -> dict[str, Any] | None:
    """The reconciler of the even steps: the service knows the key the call was given."""
    return lookup(_service(), call.idempotency_key)


def service_calls(path: str | Path) -> list[tuple[int, str, str, int]]:
    """Every call the service recorded, in order: (row id, key, step, pid)."""
    if not Path(path).exists():
        return []
    conn = connect(path)
    try:
        return [
            (int(r), str(k), str(s), int(p))
            for r, k, s, p in conn.execute("SELECT rowid, key, step, pid FROM calls ORDER BY rowid")
        ]
    finally:
        conn.close()


def _make(name: str) -> Any:
    reconcile = find_call if name in RECONCILED else None

    def run(ctx: StepContext) -> dict[str, Any]:
        _nap(BEFORE_EFFECT)
        result = ctx.effect("call", service_call, name, reconcile=reconcile)
        _nap(AFTER_EFFECT)
        return {"step": name, "effect": result}

    run.__name__ = run.__qualname__ = f"chaos_{name}"
    return function_step(run, name=name)


task = LongTask(
    name="chaos",
    version="1",
    stages=[Stage(f"stage{i}", [_make(STEPS[2 * i]), _make(STEPS[2 * i + 1])]) for i in range(5)],
)
