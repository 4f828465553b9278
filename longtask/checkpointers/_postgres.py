"""PostgreSQL: longtask's saver and our store on one psycopg pool."""

from __future__ import annotations

import contextlib
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from longtask.checkpointers._bounded import (
    TIMEOUT_VAR,
    BoundedConnection,
    BoundedPool,
    Outage,
    connect_kwargs,
    db_timeout,
)
from longtask.checkpointers._database import Database, EventWaiter, _lock_key
from longtask.checkpointers._saver_sql import PostgresBackend
from longtask.checkpointers._url import DatabaseURL, scrub
from longtask.errors import DatabaseError, ThreadBusy
from longtask.store import PostgresStore
from longtask.store._store import EVENTS_CHANNEL


class PgEventWaiter(EventWaiter):
    """LISTENs on its own connection (a pooled one would be handed to others while idle):
    a follower wakes as soon as the writer has stored a thread's events."""

    def __init__(self, raw_url: str, poll: float, bound: float) -> None:
        super().__init__(poll)
        self._conn = psycopg.connect(raw_url, autocommit=True, **connect_kwargs(bound, raw_url))
        self._conn.execute(f"LISTEN {EVENTS_CHANNEL}")

    def wait(self, thread_id: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            for note in self._conn.notifies(timeout=left, stop_after=1):
                if note.payload == thread_id:
                    return

    def close(self) -> None:
        self._conn.close()


def _reason(exc: Exception, url: DatabaseURL) -> str:
    """The driver's reason on one line, ending as a sentence (psycopg's may span lines and
    end with a question: "...accepting TCP/IP connections?")."""
    lines = [" ".join(ln.split()) for ln in scrub(str(exc), url.raw).splitlines()]
    sentences = [ln if ln.endswith((".", "?", "!")) else ln + "." for ln in lines if ln]
    return " ".join(sentences) or "no reason given."


class PostgresDatabase(Database):
    def __init__(
        self, url: DatabaseURL, *, upgrade: bool, verify: bool = True, max_size: int = 10
    ) -> None:
        self.url = url
        # $LONGTASK_DB_TIMEOUT bounds every call: connecting, checkouts, statements,
        # commits and the lock connection's calls (see _bounded)
        self.outage = Outage(db_timeout())
        self._connect = connect_kwargs(self.outage.bound, url.raw)
        try:
            # One plain connection first: it fails fast with the server's own reason,
            # where the pool would retry quietly until its timeout.
            psycopg.connect(url.raw, **self._connect).close()
        except Exception as exc:
            raise DatabaseError(
                f"cannot connect to PostgreSQL at {url.redacted}: {_reason(exc, url)} Check "
                "that the server is running and the URL (--db / $LONGTASK_DB) is right."
            ) from exc
        try:
            # The saver needs autocommit and dict rows. prepare_threshold=0 prepares each
            # statement on first use, as LangGraph's own from_conn_string does.
            self.pool: ConnectionPool[Any] = BoundedPool(
                url.raw,
                min_size=1,
                max_size=max_size,
                kwargs={
                    "autocommit": True,
                    "prepare_threshold": 0,
                    "row_factory": dict_row,
                    **self._connect,
                },
                connection_class=BoundedConnection,
                configure=lambda conn: conn.bind(self.outage),
                # how long a statement waits for a connection (the server gone away, every
                # connection busy) before the command fails
                timeout=self.outage.bound,
                open=False,
                outage=self.outage,
            )
            self.pool.open(wait=True, timeout=max(self.outage.bound, 2.0))
        except Exception as exc:
            raise DatabaseError(
                f"cannot connect to PostgreSQL at {url.redacted}: {_reason(exc, url)} Check "
                "that the server is running and the URL (--db / $LONGTASK_DB) is right."
            ) from exc
        self._wire(PostgresBackend(self.pool))
        self.store = PostgresStore(self.pool, self.fence)
        # One connection holds this process's thread locks (session advisory locks), opened
        # on first use and replaced if the server closed it (fencing covers the gap).
        self._lock_conn: psycopg.Connection[Any] | None = None
        self._lock_guard = threading.Lock()
        self._held: set[int] = set()
        if upgrade:
            self.upgrade()
        elif verify:
            self._check()

    def event_waiter(self, poll: float = 0.2) -> EventWaiter:
        return PgEventWaiter(self.url.raw, poll, self.outage.bound)

    def _check(self) -> None:
        self.store.check_schema(self.url.redacted)

    def upgrade(self) -> list[str]:
        def legacy() -> Any:
            from langgraph.checkpoint.postgres import PostgresSaver

            saver = PostgresSaver(self.pool)
            saver.setup()  # its own migrations, so that it reads any 0.1 database
            return saver

        # Not safe to run from two processes at once: hold a session lock on a connection
        # of its own across the migrations and the copy.
        with psycopg.connect(self.url.raw, autocommit=True, **self._connect) as lock_conn:
            lock_conn.execute("SELECT pg_advisory_lock(7428061905412)")
            try:
                queue = self._queue_schema(lock_conn)
                done = self._migrate(legacy, "checkpoints")
            finally:
                lock_conn.execute("SELECT pg_advisory_unlock(7428061905412)")
        if queue:
            done.append("procrastinate's job queue tables created")
        return done

    @staticmethod
    def _queue_schema(conn: psycopg.Connection[Any]) -> bool:
        """procrastinate's tables (the workers' job queue), if they are not there yet."""
        row = conn.execute("SELECT to_regclass('procrastinate_jobs') IS NULL").fetchone()
        if not row or not row[0]:
            return False
        from procrastinate.schema import SchemaManager

        conn.execute(SchemaManager.get_schema())
        return True

    @staticmethod
    def _key(thread_id: str) -> int:
        return int(struct.unpack(">q", _lock_key(thread_id))[0])

    def _lock_connection(self) -> psycopg.Connection[Any]:
        conn = self._lock_conn
        if conn is None or conn.closed or conn.broken:
            if self.outage.budget() < self.outage.bound:
                # the database just gave no answer: do not wait a whole bound again
                raise psycopg.OperationalError(
                    f"the database server did not answer within {self.outage.bound:g} s "
                    f"(${TIMEOUT_VAR})"
                )
            try:
                conn = BoundedConnection.connect(self.url.raw, autocommit=True, **self._connect)
                conn.bind(self.outage)
            except psycopg.OperationalError:
                self.outage.failed()
                raise
            self._lock_conn = conn
        return conn

    @contextlib.contextmanager
    def lock(self, thread_id: str) -> Iterator[None]:
        # A session-level advisory lock: it lasts as long as the connection, so a process
        # that dies releases it with its socket. If the server closes the connection while
        # the thread runs (idle_session_timeout), another process may take the thread: the
        # lease epoch it takes then fences this one's writes.
        key = self._key(thread_id)
        with self._lock_guard:
            # A session lock is re-entrant: a second holder in this process is refused here.
            if key in self._held:
                raise ThreadBusy(thread_id)
            for attempt in (1, 2):
                conn = self._lock_connection()
                try:
                    row = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
                    break
                except psycopg.OperationalError:
                    if attempt == 2 or not conn.broken:
                        raise
            if not row or not row[0]:
                raise ThreadBusy(thread_id)
            self._held.add(key)
        try:
            yield
        finally:
            with self._lock_guard:
                self._held.discard(key)
                # Unlock explicitly: closing alone releases the lock only once the server
                # has noticed the disconnect.
                if not conn.closed:
                    with contextlib.suppress(psycopg.Error):
                        conn.execute("SELECT pg_advisory_unlock(%s)", (key,))

    def is_locked(self, thread_id: str) -> bool:
        key = self._key(thread_id)
        with self.pool.connection() as conn:
            row = conn.execute(
                "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND granted "
                "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
                "AND objsubid = 1 AND ((classid::bigint << 32) | objid::bigint) = %s",
                (key,),
            ).fetchone()
        return bool(row and row["n"])

    def close(self) -> None:
        self.events.stop_live()
        self._close_saver()
        if self._lock_conn is not None:
            self._lock_conn.close()
        # The pool's workers may be connecting to a database that does not answer: wait
        # for them no longer than a call would (they are daemon threads).
        self.pool.close(timeout=min(5.0, self.outage.budget()))
