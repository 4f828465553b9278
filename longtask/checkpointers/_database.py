"""A database: longtask's saver, our store and the per-thread writer lock, over a backend.

The base class the backends (``_sqlite``, ``_postgres``) subclass. It imports none of them:
``Database.open`` hands the URL to the factory the package passes in (``_open``), which
imports the backends, so the imports run one way (factory -> backends -> this base).
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

from longtask.checkpointers._url import DatabaseURL

if TYPE_CHECKING:
    from longtask.checkpointers._graphstore import GraphStore
    from longtask.checkpointers._reader import CheckpointReader
    from longtask.checkpointers._saver import LongTaskSaver
    from longtask.store import EventWriter, Store
    from longtask.store._fence import Fence


class Opener(Protocol):
    """What ``Database.open`` hands a URL to (``_open.open_database``)."""

    def __call__(
        self, url: str | None, *, upgrade: bool | None, verify: bool, create: bool
    ) -> Database: ...


#: the factory ``Database.open`` delegates to, passed in by the package's ``__init__``
#: (see ``set_opener``): it imports the backends, which import this module
_opener: Opener | None = None


def set_opener(opener: Opener) -> None:
    """Make ``opener`` the factory behind ``Database.open``."""
    global _opener
    _opener = opener


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
        if _opener is None:  # the package sets it on import, before anything can get here
            raise RuntimeError("longtask.checkpointers was not imported")
        return _opener(url, upgrade=upgrade, verify=verify, create=create)

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
        self._graph_store: GraphStore | None = None
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

    @property
    def graph_store(self) -> GraphStore:
        """LangGraph's store on this database, as graphs and the Server API's ``/store``
        routes use it (opened on its first operation: see ``_graphstore``)."""
        if self._graph_store is None:
            from longtask.checkpointers._graphstore import GraphStore

            with self._saver_lock:
                if self._graph_store is None:
                    self._graph_store = GraphStore(self.url)
        return self._graph_store

    def _close_saver(self) -> None:
        if self._graph_store is not None:
            self._graph_store.close()
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


def _lock_key(thread_id: str) -> bytes:
    return hashlib.blake2b(thread_id.encode(), digest_size=8).digest()
