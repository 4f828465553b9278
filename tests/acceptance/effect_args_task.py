"""A LongTask whose one effect takes arguments that Python prints differently from one
process to the next (acceptance test of canonical effect keys).

Step ``pay`` calls ``ctx.effect("charge", charge, tags, order, item)`` with a set of
strings (its iteration order follows ``PYTHONHASHSEED``), a dict whose insertion order
follows ``LT_REVERSE`` and a pydantic model holding both; then, with ``LT_CRASH_MARKER``
set, the process dies once (``os._exit``) after the ledger recorded the success but before
the step's checkpoint, so a resumed process runs the step again and must find the same key.

``LT_SERVICE_DB`` is the outside service (an SQLite file): :func:`charge` records each call's
idempotency key in ``calls``.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from longtask import LongTask, Stage, StepContext, function_step

TAGS = [f"tag-{i}" for i in range(24)]


class Item(BaseModel):
    sku: str
    tags: set[str]
    extra: dict[str, int]


def _order() -> dict[str, int]:
    pairs = [(f"k{i}", i) for i in range(12)]
    return dict(reversed(pairs) if os.environ.get("LT_REVERSE") else pairs)


def _connect(path: str | Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), timeout=30, isolation_level=None)
    conn.execute("CREATE TABLE IF NOT EXISTS calls (key TEXT NOT NULL)")
    return conn


def charge(
    tags: set[str], order: dict[str, int], item: Item, idempotency_key: str
) -> dict[str, Any]:
    conn = _connect(os.environ["LT_SERVICE_DB"])
    try:
        conn.execute("INSERT INTO calls (key) VALUES (?)", (idempotency_key,))
    finally:
        conn.close()
    return {"key": idempotency_key, "tags": len(tags), "order": len(order), "sku": item.sku}


def service_calls(path: str | Path) -> list[str]:
    conn = _connect(path)
    try:
        return [k for (k,) in conn.execute("SELECT key FROM calls ORDER BY rowid")]
    finally:
        conn.close()


@function_step
def pay(ctx: StepContext) -> Any:
    item = Item(sku="A-1", tags=set(TAGS), extra=_order())
    result = ctx.effect("charge", charge, set(TAGS), _order(), item)
    marker = os.environ.get("LT_CRASH_MARKER")
    if marker and not Path(marker).exists():
        Path(marker).write_text(str(os.getpid()))
        os._exit(1)
    return result


task = LongTask(name="pay_args", version="1", stages=[Stage("pay", [pay])])
