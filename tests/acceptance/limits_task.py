"""Tasks for the acceptance tests of retries, budgets and cancel across real process deaths.

- ``flaky``: step ``call`` fails with ConnectionError on its first two attempts and succeeds
  on the third (Retry: 5 attempts, 1.5 s apart), recording every attempt number it sees in
  the file ``$LT_ATTEMPTS``. A test kills the process during the wait before attempt 3.
- ``saga``: steps ``flight``, ``hotel``, ``charge`` (one per stage) each with a compensation
  that undoes it through ``ctx.effect("undo", ...)`` against an outside service (the SQLite
  file ``$LT_SERVICE_DB``, table ``calls``), then an approval ``confirm`` the thread pauses
  on. ``$LT_CRASH_AT`` makes the compensation of ``hotel`` kill its process once (marker file
  ``$LT_CRASH_MARKER``): ``after_undo`` right after its effect succeeded, ``in_undo`` inside
  the effect right after the service recorded the call (the ledger still says started; the
  reconciler finds the call).
- ``spend``: a budget of 100 tokens; ``first`` charges 150, so ``second`` pauses.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

from longtask import (
    Budget,
    EffectCall,
    LongTask,
    Retry,
    Stage,
    StepContext,
    approval,
    function_step,
)


def _record_attempt(attempt: int) -> None:
    with open(os.environ["LT_ATTEMPTS"], "a") as f:
        f.write(f"{attempt}\n")


def attempts_seen(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()] if path.exists() else []


@function_step(retry=Retry(max_attempts=5, initial_wait=1.5, backoff=1, jitter=False))
def call(ctx: StepContext) -> dict[str, int]:
    _record_attempt(ctx.attempt)
    if ctx.attempt < 3:
        raise ConnectionError(f"service unreachable (attempt {ctx.attempt})")
    return {"attempt": ctx.attempt}


@function_step
def done(ctx: StepContext) -> Any:
    return ctx.result("call")


flaky = LongTask("flaky", stages=[Stage("work", [call]), Stage("finish", [done])])


def _service() -> sqlite3.Connection:
    conn = sqlite3.connect(os.environ["LT_SERVICE_DB"], timeout=30, isolation_level=None)
    conn.execute("CREATE TABLE IF NOT EXISTS calls (what TEXT NOT NULL, key TEXT NOT NULL)")
    return conn


def service_calls(path: Path) -> list[tuple[str, str]]:
    if not path.exists():
        return []
    conn = sqlite3.connect(str(path))
    try:
        return [(w, k) for w, k in conn.execute("SELECT what, key FROM calls ORDER BY rowid")]
    finally:
        conn.close()


def _crash_once(point: str) -> None:
    if os.environ.get("LT_CRASH_AT") != point:
        return
    marker = Path(os.environ["LT_CRASH_MARKER"])
    if not marker.exists():
        marker.write_text(str(os.getpid()))
        os._exit(1)


def _call_service(what: str, idempotency_key: str) -> str:
    conn = _service()
    try:
        conn.execute("INSERT INTO calls (what, key) VALUES (?, ?)", (what, idempotency_key))
    finally:
        conn.close()
    if what == "undo hotel":
        _crash_once("in_undo")
    return what


def _find(call: EffectCall) -> str | None:
    conn = _service()
    try:
        row = conn.execute(
            "SELECT what FROM calls WHERE key = ?", (call.idempotency_key,)
        ).fetchone()
    finally:
        conn.close()
    return None if row is None else str(row[0])


def _booking(name: str) -> Any:
    def run(ctx: StepContext) -> str:
        return str(ctx.effect("do", _call_service, f"do {name}", reconcile=_find))

    def compensate(ctx: StepContext, result: Any) -> str:
        undone = str(ctx.effect("undo", _call_service, f"undo {name}", reconcile=_find))
        if name == "hotel":
            _crash_once("after_undo")
        return undone

    return function_step(run, name=name, compensate=compensate)


saga = LongTask(
    "saga",
    stages=[
        Stage("book_flight", [_booking("flight")]),
        Stage("book_hotel", [_booking("hotel")]),
        Stage("pay", [_booking("charge")]),
        Stage("confirm", [approval("confirm", plan=lambda ctx: {"trip": "booked"})]),
    ],
)


def _charge(tokens: int) -> Any:
    def run(ctx: StepContext) -> int:
        ctx.charge(tokens=tokens, cost=tokens / 1000)
        return tokens

    return run


spend = LongTask(
    "spend",
    stages=[
        Stage("one", [function_step(_charge(150), name="first")]),
        Stage("two", [function_step(_charge(10), name="second")]),
    ],
    budget=Budget(tokens=100),
)
