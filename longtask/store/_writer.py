"""EventWriter: holds a thread's events until they commit with the write they describe.

An event is kept here until the next checkpoint write of its thread (``put`` or
``put_writes`` of longtask's saver), which inserts it in the same transaction as the
checkpoint: a checkpoint is never stored without its events, and an event never claims work
that no checkpoint holds. What no checkpoint carries (a pause, a retry's record before its
back-off) is written by ``flush``, fenced like a checkpoint; the end of a run commits with its
status, an effect's events with its ledger row, and a failed attempt's record with its
``step.retry`` (``commit_with``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from longtask.store._store import NewEvent

Statement = tuple[str, Sequence[Any]]
#: stores a thread's pending events that no checkpoint carried (taking them from here), in
#: one fenced transaction with the given statements
Sink = Callable[[str, Sequence[Statement]], None]


class EventWriter:
    def __init__(self, sink: Sink) -> None:
        self._sink = sink
        self._lock = threading.Lock()
        self._pending: dict[str, list[NewEvent]] = {}
        self._blobs: dict[str, dict[str, bytes]] = {}

    def put_blob(self, thread_id: str, digest: str, data: bytes) -> None:
        """A content-addressed blob a node's writes will refer to (see ValueCodec)."""
        with self._lock:
            self._blobs.setdefault(thread_id, {})[digest] = data

    def take_blobs(self, thread_id: str) -> dict[str, bytes]:
        with self._lock:
            return self._blobs.pop(thread_id, {})

    def restore_blobs(self, thread_id: str, blobs: dict[str, bytes]) -> None:
        with self._lock:
            self._blobs.setdefault(thread_id, {}).update(blobs)

    def put(self, event: NewEvent) -> None:
        with self._lock:
            self._pending.setdefault(event.thread_id, []).append(event)

    def take(self, thread_id: str) -> list[NewEvent]:
        """The thread's pending events, for the transaction about to store its checkpoint."""
        with self._lock:
            return self._pending.pop(thread_id, [])

    def restore(self, thread_id: str, events: list[NewEvent]) -> None:
        """Give back events whose transaction failed (ahead of any queued since)."""
        with self._lock:
            self._pending[thread_id] = events + self._pending.get(thread_id, [])

    def flush(self, thread_id: str | None = None) -> None:
        """Store the pending events (of one thread, or all) now."""
        with self._lock:
            threads = [thread_id] if thread_id is not None else list(self._pending)
            # nothing pending: no transaction (this is called before every ledger write)
            threads = [tid for tid in threads if self._pending.get(tid)]
        for tid in threads:
            self._sink(tid, ())

    def commit_with(self, thread_id: str, statements: Sequence[Statement]) -> None:
        """Run ``statements`` in one fenced transaction with the thread's pending events: a
        record and the event that tells of it are stored together or not at all."""
        self._sink(thread_id, statements)

    def close(self) -> None:
        self.flush()
