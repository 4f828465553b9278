"""PostgreSQL: LangGraph's PostgresSaver and our store on one psycopg pool."""

from __future__ import annotations

import contextlib
import struct
import time
from collections.abc import Iterator
from typing import Any

import psycopg
from langgraph.checkpoint.postgres import PostgresSaver
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from longtask.checkpointers._database import Database, EventWaiter, _lock_key, migrated
from longtask.checkpointers._url import DatabaseURL, scrub
from longtask.errors import DatabaseError, SchemaVersionError, ThreadBusy
from longtask.store import PostgresStore
from longtask.store._fence import Fence
from longtask.store._store import EVENTS_CHANNEL


class FencedPostgresSaver(PostgresSaver):
    """LangGraph's PostgresSaver whose connections carry this process's lease epochs (see
    longtask.store._fence); without held leases it behaves exactly like its parent."""

    fence: Fence

    @contextlib.contextmanager
    def _cursor(self, *, pipeline: bool = False) -> Iterator[Any]:
        with super()._cursor(pipeline=pipeline) as cur:
            self.fence.apply(cur.connection, cur)
            yield cur


class PgEventWaiter(EventWaiter):
    """LISTENs on its own connection (a pooled one would be handed to others while idle):
    a follower wakes as soon as the writer has stored a thread's events."""

    def __init__(self, raw_url: str, poll: float) -> None:
        super().__init__(poll)
        self._conn = psycopg.connect(raw_url, autocommit=True, connect_timeout=10)
        self._conn.execute(f"LISTEN {EVENTS_CHANNEL}")

    def wait(self, thread_id: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            for note in self._conn.notifies(timeout=left, stop_after=1):
                if note.payload == thread_id:
                    return

    def close(self) -> None:
        self._conn.close()


class PostgresDatabase(Database):
    def __init__(
        self, url: DatabaseURL, *, upgrade: bool, verify: bool = True, max_size: int = 10
    ) -> None:
        self.url = url
        try:
            # One plain connection first: it fails fast with the server's own reason,
            # where the pool would retry quietly until its timeout.
            psycopg.connect(url.raw, connect_timeout=10).close()
        except Exception as exc:
            raise DatabaseError(
                f"cannot connect to PostgreSQL at {url.redacted}: "
                f"{scrub(str(exc), url.raw).strip()}. Check that the server is running and "
                "the URL (--db / $LONGTASK_DB) is right."
            ) from exc
        try:
            # The saver needs autocommit and dict rows. prepare_threshold=0 prepares each
            # statement on first use, as LangGraph's own from_conn_string does.
            self.pool: ConnectionPool[Any] = ConnectionPool(
                url.raw,
                min_size=1,
                max_size=max_size,
                kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
                open=False,
            )
            self.pool.open(wait=True, timeout=15)
        except Exception as exc:
            raise DatabaseError(
                f"cannot connect to PostgreSQL at {url.redacted}: {scrub(str(exc), url.raw)}. "
                "Check that the server is running and the URL (--db / $LONGTASK_DB) is right."
            ) from exc
        self.fence = Fence()
        self.pg_saver = FencedPostgresSaver(self.pool)
        self.pg_saver.fence = self.fence
        self.saver = self.pg_saver
        self.store = PostgresStore(self.pool, self.fence)
        if upgrade:
            self.upgrade()
        elif verify:
            self._check()

    def event_waiter(self, poll: float = 0.2) -> EventWaiter:
        return PgEventWaiter(self.url.raw, poll)

    def _checkpoint_migration(self) -> int:
        """The last LangGraph checkpoint migration applied here (-1: no tables)."""
        with self.pool.connection() as conn:
            row = conn.execute(
                "SELECT to_regclass('checkpoint_migrations') IS NULL AS no"
            ).fetchone()
            if row is None or row["no"]:
                return -1
            row = conn.execute(
                "SELECT coalesce(max(v), -1) AS v FROM checkpoint_migrations"
            ).fetchone()
        return int(row["v"]) if row else -1

    def _check(self) -> None:
        self.store.check_schema(self.url.redacted)
        have = self._checkpoint_migration()
        need = len(self.pg_saver.MIGRATIONS) - 1
        if have < need:
            raise SchemaVersionError(
                f"the LangGraph checkpoint tables in {self.url.redacted} are at migration "
                f"{have}, this version needs {need}. Run `longtask db upgrade --db "
                f"{self.url.redacted}` to migrate."
            )

    def upgrade(self) -> list[str]:
        done = []
        # PostgresSaver.setup() is not safe to run from two processes at once: hold a
        # session lock on a connection of its own across both migrations.
        with psycopg.connect(self.url.raw, autocommit=True) as lock_conn:
            lock_conn.execute("SELECT pg_advisory_lock(7428061905412)")
            try:
                have = self._checkpoint_migration()
                self.pg_saver.setup()
                need = len(self.pg_saver.MIGRATIONS) - 1
                if have < 0:
                    done.append("LangGraph checkpoint tables created")
                elif have < need:
                    done.append(f"LangGraph checkpoint tables migrated to migration {need}")
                applied = self.store.upgrade()
                if self._queue_schema(lock_conn):
                    done.append("procrastinate's job queue tables created")
            finally:
                lock_conn.execute("SELECT pg_advisory_unlock(7428061905412)")
        if applied:
            done.append(migrated(applied))
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

    @contextlib.contextmanager
    def lock(self, thread_id: str) -> Iterator[None]:
        # A session-level advisory lock on a connection of its own: it lasts exactly as
        # long as the connection, so a process that dies releases it with its socket.
        try:
            conn = psycopg.connect(self.url.raw, autocommit=True)
        except Exception as exc:
            raise DatabaseError(f"cannot connect to PostgreSQL at {self.url.redacted}") from exc
        try:
            row = conn.execute(
                "SELECT pg_try_advisory_lock(%s)", (self._key(thread_id),)
            ).fetchone()
            if not row or not row[0]:
                raise ThreadBusy(thread_id)
            try:
                yield
            finally:
                # Unlock explicitly: closing alone releases the lock only once the server
                # has noticed the disconnect.
                conn.execute("SELECT pg_advisory_unlock(%s)", (self._key(thread_id),))
        finally:
            conn.close()

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
        self.pool.close()
