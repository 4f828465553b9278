"""EventWriter: appends events from a background thread, in batches, in order.

Steps must not wait for the event log: with one autocommitted insert per event, a step on
PostgreSQL paid ~0.45 ms per event (round trip plus WAL flush), several times per step.
Events are queued here and a single writer thread inserts whatever has accumulated in one
statement, so the inserts overlap with the step's own work and with the checkpoint writes,
and ids keep the order events were queued in.

Events are a record, not the state: the Runner flushes the queue before it reports an
outcome, and on the next run repairs the ``step.completed`` events that a crash may have
cut off (from the checkpoint, which is the source of truth).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from longtask.store._store import NewEvent, Store

log = logging.getLogger("longtask.events")

_BATCH = 500


class EventWriter:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._queue: deque[NewEvent] = deque()
        self._cond = threading.Condition()
        self._busy = False
        self._closed = False
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def put(self, event: NewEvent) -> None:
        with self._cond:
            if self._closed:
                raise RuntimeError("the event writer is closed")
            self._queue.append(event)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="longtask-events", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def flush(self) -> None:
        """Wait until every queued event is stored; re-raise a write error if one happened."""
        with self._cond:
            while self._queue or self._busy:
                self._cond.wait()
            error, self._error = self._error, None
        if error is not None:
            raise error

    def close(self) -> None:
        try:
            self.flush()
        finally:
            with self._cond:
                self._closed = True
                self._cond.notify_all()
            if self._thread is not None:
                self._thread.join(timeout=5)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue and self._closed:
                    return
                batch = [self._queue.popleft() for _ in range(min(_BATCH, len(self._queue)))]
                self._busy = True
            try:
                self._store.append_events(batch)
            except BaseException as exc:  # kept for flush(): never lost silently
                log.exception("could not store %d events", len(batch))
                with self._cond:
                    self._error = exc
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
