"""One statement (or transaction) on a pooled PostgreSQL connection, surviving connections
the server closed while they sat idle in the pool."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_failed = 0


def on_pooled(pool: Any, fn: Callable[[Any], T]) -> T:
    """``fn(conn)`` on a connection of ``pool``. A connection the server closed while it
    sat idle (``idle_session_timeout``, a restart, ``pg_terminate_backend``) fails on first
    use; then the pool tests its other idle connections, which were most likely closed
    with it, drops the dead ones, and ``fn`` runs once more on a live one. ``fn`` must be
    safe to repeat (every longtask write is idempotent: conflicts are ignored or replace
    the same row), since the answer to a COMMIT may be what was lost."""
    import psycopg

    try:
        return _on_pooled(pool, fn)
    except psycopg.OperationalError:
        # counted once a call failed for good (a connection replaced on the way is not)
        global _failed
        with _lock:
            _failed += 1
        raise


def failed_calls() -> int:
    """Calls of this process through ``on_pooled`` (our tables' statements and the
    saver's on PostgreSQL) that failed with a connection error (the server gone, the
    connection lost, no answer within ``$LONGTASK_DB_TIMEOUT``): /metrics'
    ``longtask_db_errors_total``."""
    return _failed


def _on_pooled(pool: Any, fn: Callable[[Any], T]) -> T:
    import psycopg

    with pool.connection() as conn:
        try:
            return fn(conn)
        except psycopg.OperationalError:
            if not conn.broken:
                raise
    # the broken one went back and was dropped; now the rest of the idle ones
    pool.check()
    with pool.connection() as conn:
        return fn(conn)
