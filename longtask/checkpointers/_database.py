"""Open a database by URL: longtask's saver, our store and the per-thread writer lock.

Backends are imported lazily, so the SQLite default never imports psycopg and the CLI's
``--help`` imports neither.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from longtask.checkpointers._url import DatabaseURL, parse_url, resolve_url
from longtask.errors import DatabaseError, ThreadBusy

if TYPE_CHECKING:
    from longtask.checkpointers._reader import CheckpointReader
    from longtask.checkpointers._saver import LongTaskSaver
    from longtask.store import EventWriter, Store
    from longtask.store._fence import Fence


class Database(ABC):
    """One open database: ``saver`` (the checkpoints, a LangGraph ``BaseCheckpointSaver``;
    ``reader`` reads them without LangGraph), ``store`` (our tables), ``events`` (events
    waiting to commit with the thread's next checkpoint) and ``fence`` (the lease epochs
    this process holds)."""

    url: DatabaseURL
    store: Store
    events: EventWriter
    fence: Fence

    @classmethod
    def open(
        cls,
        url: str | None = None,
        *,
        upgrade: bool | None = None,
        verify: bool = True,
        create: bool = True,
    ) -> Database:
        """Open ``url`` (else ``$LONGTASK_DB``, else ``sqlite:///.longtask/longtask.db``).

        ``upgrade``: apply missing migrations. Defaults to True for SQLite (embedded, one
        user) and False for PostgreSQL, where ``longtask db upgrade`` is an explicit step.
        ``verify``: without ``upgrade``, check that the schema is current (else
        :class:`SchemaVersionError` naming the command that fixes it).
        ``create``: False for read-only use: a missing SQLite file is an error, not created.
        """
        parsed = parse_url(resolve_url(url))
        if parsed.scheme == "sqlite":
            assert parsed.path is not None
            if not create and not parsed.path.exists():
                raise DatabaseError(
                    f"there is no longtask database at {parsed.path.resolve()}; start a task "
                    "to create it (`longtask run FILE.py:TASK`), create it empty with "
                    "`longtask db upgrade`, or point --db / $LONGTASK_DB at another one"
                )
            return SqliteDatabase(
                parsed, upgrade=True if upgrade is None else upgrade, verify=verify
            )
        from longtask.checkpointers._postgres import PostgresDatabase

        return PostgresDatabase(parsed, upgrade=bool(upgrade), verify=verify)

    @abstractmethod
    def upgrade(self) -> list[str]:
        """Create or migrate every table. Returns what was done."""

    def _wire(self, backend: Any) -> None:
        """The event outbox the saver drains and the fence it checks; the saver itself is
        made on first use (it imports LangGraph, which a process that only reads does not
        need: see ``reader``)."""
        from longtask.store import EventWriter
        from longtask.store._fence import Fence

        self._backend = backend
        self._saver: LongTaskSaver | None = None
        self._reader: CheckpointReader | None = None
        self._saver_lock = threading.Lock()
        self.fence = Fence()
        self.events = EventWriter(
            lambda thread_id, statements: self.saver.flush_events(thread_id, statements),
            lambda thread_id: self.saver.store_live(thread_id),
        )

    @property
    def saver(self) -> LongTaskSaver:
        """The checkpoint saver (a LangGraph ``BaseCheckpointSaver``)."""
        if self._saver is None:
            from longtask.checkpointers._saver import LongTaskSaver

            with self._saver_lock:
                if self._saver is None:
                    self._saver = LongTaskSaver(self._backend, fence=self.fence, outbox=self.events)
        return self._saver

    @property
    def reader(self) -> CheckpointReader:
        """Reads checkpoints: the saver once there is one (it commits the writes it holds
        before a read), else a reader that needs no LangGraph."""
        if self._saver is not None:
            return self._saver
        if self._reader is None:
            from longtask.checkpointers._reader import CheckpointReader

            self._reader = CheckpointReader(self._backend)
        return self._reader

    def _close_saver(self) -> None:
        if self._saver is not None:
            self._saver.close()

    def _migrate(self, legacy: Any, legacy_table: str) -> list[str]:
        """Our migrations, then the threads longtask 0.1 left in LangGraph's tables."""
        from longtask.checkpointers._legacy import copy_legacy

        done = []
        applied = self.store.upgrade()
        if applied:
            done.append(migrated(applied))
        # (checked here first: the saver it writes with imports LangGraph)
        has_legacy = self.store._table_exists(legacy_table)
        copied = copy_legacy(self.store, legacy, self.saver, legacy_table) if has_legacy else 0
        if copied:
            done.append(f"{copied} thread(s) copied from LangGraph's checkpoint tables")
        return done

    @abstractmethod
    @contextlib.contextmanager
    def lock(self, thread_id: str) -> Iterator[None]:
        """Hold the writer lock of ``thread_id``; raise :class:`ThreadBusy` if it is taken.
        The lock is released when the holder exits, or when its process dies."""
        yield

    @abstractmethod
    def is_locked(self, thread_id: str) -> bool: ...

    def event_waiter(self, poll: float = 0.2) -> EventWaiter:
        """Something to block on until a thread may have new events (SQLite: a short sleep;
        PostgreSQL: LISTEN/NOTIFY)."""
        return EventWaiter(poll)

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class EventWaiter:
    """Waits for new events by sleeping ``poll`` seconds at a time."""

    def __init__(self, poll: float) -> None:
        self.poll = poll

    def wait(self, thread_id: str, timeout: float) -> None:
        time.sleep(max(0.0, min(timeout, self.poll)))

    def close(self) -> None:
        pass


def migrated(applied: list[int]) -> str:
    """What applying the longtask migrations ``applied`` did, as ``db upgrade`` reports it."""
    if applied[0] == 1:
        return f"longtask tables created (schema version {applied[-1]})"
    return f"longtask tables migrated to version {applied[-1]}"


def _full_disk(path: Path) -> str:
    """What to add to an error opening the SQLite file ``path`` when its disk is full:
    SQLite reports the WAL index it could not create as a bare "disk I/O error"."""
    import shutil

    try:
        free = shutil.disk_usage(path.parent).free
    except OSError:
        return ""
    if free >= _ROOM_TO_OPEN:
        return ""
    return (
        f" (the disk holding it is full: {free} bytes free); free some space, then run the "
        "command again"
    )


#: below this many free bytes, a failure to open is put down to a full disk: the WAL index
#: alone takes 32 KiB
_ROOM_TO_OPEN = 64 * 1024


def _lock_key(thread_id: str) -> bytes:
    return hashlib.blake2b(thread_id.encode(), digest_size=8).digest()


class SqliteDatabase(Database):
    def __init__(self, url: DatabaseURL, *, upgrade: bool, verify: bool = True) -> None:
        from longtask.checkpointers._saver_sql import SqliteBackend
        from longtask.store import SqliteStore

        assert url.path is not None
        self.url = url
        self.path = url.path
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, check_same_thread=False, timeout=30)
            # WAL lets `status` and `events` read while another process writes.
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA busy_timeout=30000")
            conn.execute("PRAGMA synchronous=NORMAL")
        except (sqlite3.Error, OSError) as exc:
            raise DatabaseError(
                f"cannot open SQLite database {self.path}: {exc}{_full_disk(self.path)}"
            ) from exc
        # One connection and one lock for the saver and our tables: SQLite has one writer
        # at a time, and a second connection would queue parallel steps' writes behind
        # each other's busy timeouts.
        lock = threading.Lock()
        self._wire(SqliteBackend(conn, lock))
        self._conn = conn
        self.store = SqliteStore(conn, lock)
        self.store.artifact_dir = self.path.parent / (self.path.name + ".artifacts")
        # Locks are by the file's real path: two names of one file (a symlink) are one lock.
        real = self.path.resolve()
        self._lock_dir = real.parent / (real.name + ".locks")
        if upgrade:
            self.upgrade()
        elif verify:
            self.store.check_schema(self.url.redacted)

    def upgrade(self) -> list[str]:
        def legacy() -> Any:
            from langgraph.checkpoint.sqlite import SqliteSaver

            return SqliteSaver(self._conn)

        return self._migrate(legacy, "checkpoints")

    def _lock_path(self, thread_id: str) -> Path:
        return self._lock_dir / (_lock_key(thread_id).hex() + ".lock")

    @contextlib.contextmanager
    def lock(self, thread_id: str) -> Iterator[None]:
        # flock is released by the kernel when the process dies, so a crash never leaves a
        # thread locked. SQLite is single-machine, so a local lock is enough.
        self._lock_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._lock_path(thread_id), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            # A moment's retry: `is_locked` (status) takes the lock shared for an instant,
            # which must not make a real writer give up.
            for attempt in range(20):
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError as exc:
                    if attempt == 19:
                        raise ThreadBusy(thread_id) from exc
                    time.sleep(0.01)
            os.ftruncate(fd, 0)
            os.write(fd, str(os.getpid()).encode())
            yield
        finally:
            os.close(fd)

    def is_locked(self, thread_id: str) -> bool:
        path = self._lock_path(thread_id)
        if not path.exists():
            return False
        fd = os.open(path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    def close(self) -> None:
        self.events.stop_live()
        self._close_saver()
        self.store.close()
