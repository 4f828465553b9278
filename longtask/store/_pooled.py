"""One statement (or transaction) on a pooled PostgreSQL connection, surviving connections
the server closed while they sat idle in the pool."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def on_pooled(pool: Any, fn: Callable[[Any], T]) -> T:
    """``fn(conn)`` on a connection of ``pool``. A connection the server closed while it
    sat idle (``idle_session_timeout``, a restart, ``pg_terminate_backend``) fails on first
    use; then the pool tests its other idle connections, which were most likely closed
    with it, drops the dead ones, and ``fn`` runs once more on a live one. ``fn`` must be
    safe to repeat (every longtask write is idempotent: conflicts are ignored or replace
    the same row), since the answer to a COMMIT may be what was lost."""
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
