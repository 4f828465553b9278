"""LangGraph's own long-term memory store (``BaseStore``) on the thread database: its
``SqliteStore`` on the SQLite file, its ``PostgresStore`` on the PostgreSQL database, each
with the tables and migrations LangGraph gives it (``store``, ``store_migrations`` ...,
beside longtask's own). This is what the Server API's ``/store`` routes serve, as
LangGraph's server serves its store, TTL included.

Opened on a connection of its own (LangGraph's store wants autocommit and dict rows, and
locks its connection), so it never holds a connection longtask's saver is waiting for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from longtask.errors import DatabaseError

if TYPE_CHECKING:
    from langgraph.store.base import BaseStore

    from longtask.checkpointers._url import DatabaseURL

#: minutes between sweeps of expired items (LangGraph's sweeper thread)
SWEEP_MINUTES = 5.0


@dataclass
class KvStore:
    """An open LangGraph store and what closes it."""

    store: BaseStore
    _closers: list[Any] = field(default_factory=list)

    def close(self) -> None:
        for close in reversed(self._closers):
            close()
        self._closers.clear()


#: LangGraph's TTL settings unless told otherwise: items put with a ``ttl`` expire, reads
#: refresh it unless asked not to, expired items are swept every few minutes
TTL: dict[str, Any] = {"refresh_on_read": True, "sweep_interval_minutes": SWEEP_MINUTES}


def open_kv_store(
    url: DatabaseURL, *, sweep: bool = True, ttl: dict[str, Any] | None = None
) -> KvStore:
    """LangGraph's store on the database ``url`` names, its tables set up, with TTL on
    (``ttl``: LangGraph's TTL settings, default ``TTL``) and, with ``sweep``, a thread
    deleting expired items every few minutes."""
    settings: Any = dict(TTL if ttl is None else ttl)
    try:
        if url.scheme == "sqlite":
            import sqlite3

            from langgraph.store.sqlite import SqliteStore

            assert url.path is not None
            conn = sqlite3.connect(
                url.path, check_same_thread=False, isolation_level=None, timeout=30
            )
            opened = KvStore(SqliteStore(conn, ttl=settings), [conn.close])
        else:
            from langgraph.store.postgres import PostgresStore
            from psycopg.rows import dict_row
            from psycopg_pool import ConnectionPool

            from longtask.checkpointers._bounded import connect_kwargs, db_timeout

            # $LONGTASK_DB_TIMEOUT bounds connecting, a dead peer and waiting for a pooled
            # connection, as for longtask's own connections (graphs reach this store too)
            bound = db_timeout()
            pool: ConnectionPool[Any] = ConnectionPool(
                url.raw,
                min_size=1,
                max_size=4,
                kwargs={
                    "autocommit": True,
                    "prepare_threshold": 0,
                    "row_factory": dict_row,
                    **connect_kwargs(bound, url.raw),
                },
                timeout=bound,
                open=True,
            )
            opened = KvStore(PostgresStore(pool, ttl=settings), [pool.close])
        store: Any = opened.store
        store.setup()
        if sweep:
            store.start_ttl_sweeper()
            opened._closers.append(store.stop_ttl_sweeper)
        return opened
    except DatabaseError:
        raise
    except Exception as exc:
        raise DatabaseError(
            f"cannot open LangGraph's store on {url.redacted}: {type(exc).__name__}: {exc}"
        ) from exc
