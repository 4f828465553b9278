"""A payment LongTask whose step charges an outside "service" through ``ctx.effect`` and can
kill its own process around that call (acceptance tests for the side-effect ledger).

Stages: ``pay`` (step ``pay``: ``ctx.effect("charge", charge, amount, ...)``) and ``done``
(step ``receipt``: ``{"charged": pay["charged"], "pay": pay}``, so a test sees exactly which
result the effect handed on). Two tasks with the same steps: ``reconciled`` passes
``reconcile=find`` (it looks the key up in the service), ``manual`` passes no reconciler, so
a cut-off call waits for a person (``longtask effects resolve``).

Environment (none of it is part of the definition):

- ``LT_SERVICE_DB``: the outside service, an SQLite file independent of the database under
  test. :func:`charge` inserts ``(key, amount)`` into ``calls`` (one commit per insert, so
  the row survives an ``os._exit`` right after it); :func:`find` reads it back. Every run of
  the ``pay`` step also inserts ``(step, pid)`` into ``steps`` first thing.
- ``LT_CRASH_IN_EFFECT``: ``charge`` dies with ``os._exit(1)`` right after the service
  recorded the call, before the ledger can record the success (the worst case).
- ``LT_CRASH_BEFORE_EFFECT``: the ``pay`` step dies before it reaches ``ctx.effect``.
- ``LT_CRASH_MARKER``: a crash happens once: it creates this file first, and a process that
  finds it does not crash again.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from longtask import EffectCall, LongTask, Stage, StepContext, function_step

SERVICE_ENV = "LT_SERVICE_DB"
CRASH_IN_EFFECT = "LT_CRASH_IN_EFFECT"
CRASH_BEFORE_EFFECT = "LT_CRASH_BEFORE_EFFECT"
MARKER_ENV = "LT_CRASH_MARKER"


class Inputs(BaseModel):
    amount: int


def _connect(path: str | Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), timeout=30, isolation_level=None)
    conn.execute("PRAGMA busy_timeout=30000")
    conn.execute("CREATE TABLE IF NOT EXISTS calls (key TEXT NOT NULL, amount INT NOT NULL)")
    conn.execute("CREATE TABLE IF NOT EXISTS steps (step TEXT NOT NULL, pid INTEGER NOT NULL)")
    return conn


def _service() -> str:
    path = os.environ.get(SERVICE_ENV)
    if not path:
        raise RuntimeError(f"${SERVICE_ENV} is not set")
    return path


def _crash_once(flag: str) -> None:
    """``os._exit(1)`` if ``flag`` is set and the marker does not exist yet (creating it)."""
    if not os.environ.get(flag):
        return
    marker = Path(os.environ[MARKER_ENV])
    if marker.exists():
        return
    marker.write_text(str(os.getpid()))
    os._exit(1)


def charge(amount: int, idempotency_key: str) -> dict[str, Any]:
    """The outside call: the service records it (committed), then the process may die."""
    conn = _connect(_service())
    try:
        conn.execute("INSERT INTO calls (key, amount) VALUES (?, ?)", (idempotency_key, amount))
    finally:
        conn.close()
    _crash_once(CRASH_IN_EFFECT)
    return {"charged": amount, "key": idempotency_key}


def find(call: EffectCall) -> dict[str, Any] | None:
    """The reconciler: what the service knows of the key the call was given (None if it
    never saw it)."""
    key = call.idempotency_key
    conn = _connect(_service())
    try:
        row = conn.execute("SELECT amount FROM calls WHERE key = ? LIMIT 1", (key,)).fetchone()
    finally:
        conn.close()
    return None if row is None else {"charged": int(row[0]), "key": key, "reconciled": True}


def service_calls(path: str | Path) -> list[tuple[str, int]]:
    """Every call the service recorded, in order: (key, amount)."""
    if not Path(path).exists():
        return []
    conn = _connect(path)
    try:
        return [
            (k, int(a)) for k, a in conn.execute("SELECT key, amount FROM calls ORDER BY rowid")
        ]
    finally:
        conn.close()


def step_runs(path: str | Path) -> list[tuple[str, int]]:
    """Every run of the ``pay`` step, in order: (step, pid)."""
    if not Path(path).exists():
        return []
    conn = _connect(path)
    try:
        return [(s, int(p)) for s, p in conn.execute("SELECT step, pid FROM steps ORDER BY rowid")]
    finally:
        conn.close()


def _record_run(step: str) -> None:
    conn = _connect(_service())
    try:
        conn.execute("INSERT INTO steps (step, pid) VALUES (?, ?)", (step, os.getpid()))
    finally:
        conn.close()


@function_step(name="pay")
def pay_reconciled(ctx: StepContext) -> Any:
    _record_run("pay")
    _crash_once(CRASH_BEFORE_EFFECT)
    return ctx.effect("charge", charge, ctx.inputs.amount, reconcile=find)


@function_step(name="pay")
def pay_manual(ctx: StepContext) -> Any:
    _record_run("pay")
    _crash_once(CRASH_BEFORE_EFFECT)
    return ctx.effect("charge", charge, ctx.inputs.amount)


@function_step
def receipt(ctx: StepContext) -> dict[str, Any]:
    pay = ctx.result("pay")
    return {"charged": pay["charged"], "pay": pay}


reconciled = LongTask(
    name="pay_reconciled",
    version="1",
    inputs=Inputs,
    stages=[Stage("pay", [pay_reconciled]), Stage("done", [receipt])],
)

manual = LongTask(
    name="pay_manual",
    version="1",
    inputs=Inputs,
    stages=[Stage("pay", [pay_manual]), Stage("done", [receipt])],
)
