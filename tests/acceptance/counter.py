"""An outside call counter for acceptance tests: one SQLite file, independent of the backend
under test, that step functions append to and tests read.

Step functions call :func:`record` (the file comes from ``$LT_COUNTER_DB``); every insert is
committed on its own, so a row survives an ``os._exit`` right after it.
"""

from __future__ import annotations

import os
import sqlite3
from collections import Counter
from pathlib import Path

ENV_VAR = "LT_COUNTER_DB"


def _connect(path: str | Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), timeout=30, isolation_level=None)
    conn.execute("PRAGMA busy_timeout=30000")
    conn.execute("CREATE TABLE IF NOT EXISTS calls (step TEXT NOT NULL, pid INTEGER NOT NULL)")
    return conn


def record(step: str) -> None:
    """Record one call of ``step`` by this process (a no-op without ``$LT_COUNTER_DB``)."""
    path = os.environ.get(ENV_VAR)
    if not path:
        return
    conn = _connect(path)
    try:
        conn.execute("INSERT INTO calls (step, pid) VALUES (?, ?)", (step, os.getpid()))
    finally:
        conn.close()


def calls(path: str | Path) -> list[tuple[str, int]]:
    """Every recorded call, in order: (step, pid)."""
    if not Path(path).exists():
        return []
    conn = _connect(path)
    try:
        return [(s, int(p)) for s, p in conn.execute("SELECT step, pid FROM calls ORDER BY rowid")]
    finally:
        conn.close()


def counts(path: str | Path) -> Counter[str]:
    """How often each step was called."""
    return Counter(step for step, _ in calls(path))


def has_calls(path: str | Path, steps: list[str]) -> bool:
    """True when every step of ``steps`` has at least one recorded call."""
    seen = counts(path)
    return all(seen[s] > 0 for s in steps)
