"""EventWriter: holds a thread's events until they are stored, each kind when it should be.

Facts about committed work (a step completed or failed, a pause, a retry's record, an
effect) are kept here until the write they describe: the next checkpoint write of their
thread (``put`` or ``put_writes`` of longtask's saver) inserts them in the same transaction.
A checkpoint is never stored without its events, and such an event never claims work that
no checkpoint holds. What no checkpoint carries (a pause, a retry's record before its
back-off) is written by ``flush``, fenced like a checkpoint; the end of a run commits with
its status, an effect's events with its ledger row, and a failed attempt's record with its
``step.retry`` (``commit_with``).

Events about work in progress (``LIVE_KINDS``: a step started, its progress, an artifact, an
agent's model and tool calls) must be seen while the step runs. They wait in the same queue,
in emission order, and ride with the thread's next write like the rest when it comes soon;
one that has waited ``LIVE_DELAY`` seconds is stored by a flusher thread on its own, in a
small transaction fenced like every write (``live_sink``). So a chain of fast steps pays
nothing for them, and a long step is visible within a second of starting. A live event
stored for an attempt that then died stays: the log tells of the dead attempt.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from longtask.store._kinds import LIVE_KINDS

if TYPE_CHECKING:
    from longtask.store._events import NewEvent

log = logging.getLogger("longtask.events")

Statement = tuple[str, Sequence[Any]]
#: stores a thread's pending events that no checkpoint carried (taking them from here), in
#: one fenced transaction with the given statements
Sink = Callable[[str, Sequence[Statement]], None]
#: stores a thread's live events now (taking them with ``take_live``), fenced
LiveSink = Callable[[str], None]

#: how long a live event waits for a write of its thread to carry it (seconds)
LIVE_DELAY = 0.25
#: after a live write failed (the database unreachable), how long until the next try
_RETRY = 1.0


class EventWriter:
    def __init__(
        self, sink: Sink, live_sink: LiveSink | None = None, live_delay: float = LIVE_DELAY
    ) -> None:
        self._sink = sink
        self._live_sink = live_sink
        self.live_delay = live_delay
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._pending: dict[str, list[NewEvent]] = {}
        self._blobs: dict[str, dict[str, bytes]] = {}
        #: threads with a live event pending: when the oldest one was queued (monotonic)
        self._live_at: dict[str, float] = {}
        #: the flusher thread; it stops when it is no longer this (``close``)
        self._flusher: threading.Thread | None = None
        #: whether the flusher waits with no deadline (only then does a live event wake it:
        #: a deadline it waits for is never later than a new event's)
        self._idle = False
        #: events carrying a charge, taken for a write that has not ended yet (per thread):
        #: what they charge is in neither the queue nor the database until it ends
        self._flying: dict[str, list[NewEvent]] = {}

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
        live = self._live_sink is not None and event.kind in LIVE_KINDS
        with self._lock:
            self._pending.setdefault(event.thread_id, []).append(event)
            if live and event.thread_id not in self._live_at:
                self._live_at[event.thread_id] = time.monotonic()
                self._wake()

    def take(self, thread_id: str, *, writing: bool = False) -> list[NewEvent]:
        """The thread's pending events, for the transaction about to store its checkpoint
        (``writing``: the writer calls ``landed`` when it has ended, or ``restore``)."""
        with self._lock:
            self._live_at.pop(thread_id, None)
            events = self._pending.pop(thread_id, [])
            if writing:
                self._fly(thread_id, events)
            return events

    def _fly(self, thread_id: str, events: list[NewEvent]) -> None:
        charged = [e for e in events if e.charge is not None]
        if charged:
            self._flying.setdefault(thread_id, []).extend(charged)

    def landed(self, thread_id: str, events: Sequence[NewEvent]) -> None:
        """The write that took ``events`` committed them (or dropped them for good)."""
        with self._lock:
            self._land(thread_id, events)

    def _land(self, thread_id: str, events: Sequence[NewEvent]) -> None:
        """(Under the lock.)"""
        flying = self._flying.get(thread_id)
        if not flying:
            return
        gone = {id(e) for e in events}
        flying[:] = [e for e in flying if id(e) not in gone]
        if not flying:
            del self._flying[thread_id]

    def unstored(self, owner: str) -> dict[str, float]:
        """What the events not stored yet charge to ``owner``'s budget (queued, or in a
        write that has not ended): a budget check adds it to the stored counters, as the
        charge is paid only by the write that stores its event."""
        out = {"tokens": 0.0, "cost": 0.0, "tool_calls": 0.0, "wall_time": 0.0}
        with self._lock:
            queues = [*self._pending.values(), *self._flying.values()]
            for queue in queues:
                for e in queue:
                    c = e.charge
                    if c is not None and owner in c.owners:
                        out["tokens"] += c.tokens
                        out["cost"] += c.cost
                        out["tool_calls"] += c.tool_calls
                        out["wall_time"] += c.wall_time
        return out

    def take_live(self, thread_id: str) -> list[NewEvent]:
        """The thread's pending live events, in order, for a transaction of their own; its
        facts stay for the write they describe. The writer calls ``landed`` when it has
        ended, or ``restore``."""
        with self._lock:
            self._live_at.pop(thread_id, None)
            pending = self._pending.get(thread_id)
            if not pending:
                return []
            live = [e for e in pending if e.kind in LIVE_KINDS]
            if live:
                facts = [e for e in pending if e.kind not in LIVE_KINDS]
                if facts:
                    self._pending[thread_id] = facts
                else:
                    del self._pending[thread_id]
                self._fly(thread_id, live)
            return live

    def restore(self, thread_id: str, events: list[NewEvent]) -> None:
        """Give back events whose transaction failed (ahead of any queued since)."""
        with self._lock:
            self._land(thread_id, events)
            self._pending[thread_id] = events + self._pending.get(thread_id, [])
            if self._live_sink is not None and any(e.kind in LIVE_KINDS for e in events):
                self._live_at.setdefault(thread_id, time.monotonic())
                self._wake()

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
        self.stop_live()
        self.flush()

    def stop_live(self) -> None:
        """Stop the live flusher (the database is closing); a later live event starts it
        again."""
        with self._lock:
            flusher, self._flusher = self._flusher, None
            self._cond.notify_all()
        if flusher is not None and flusher is not threading.current_thread():
            flusher.join(5)

    # -- the live flusher ----------------------------------------------------------------

    def _wake(self) -> None:
        """(Under the lock.) Start the flusher, or tell it a thread has a live event."""
        if self._flusher is None:
            self._flusher = threading.Thread(
                target=self._flush_live, name="longtask-live-events", daemon=True
            )
            self._flusher.start()
        elif self._idle:
            self._idle = False
            self._cond.notify()

    def _flush_live(self) -> None:
        sink = self._live_sink
        assert sink is not None
        me = threading.current_thread()
        while True:
            with self._lock:
                while self._flusher is me:
                    now = time.monotonic()
                    due = [t for t, at in self._live_at.items() if now - at >= self.live_delay]
                    if due:
                        break
                    oldest = min(self._live_at.values(), default=None)
                    self._idle = oldest is None
                    self._cond.wait(None if oldest is None else oldest + self.live_delay - now)
                    self._idle = False
                else:
                    return
            for thread_id in due:
                try:
                    sink(thread_id)
                except Exception as exc:
                    # The events went back to the queue (or, for a writer that lost its
                    # lease, were dropped): the thread's next write carries them, or this
                    # flusher tries again.
                    log.debug("live events of %s not stored yet: %s", thread_id, exc)
                    with self._lock:
                        if thread_id in self._live_at:
                            self._live_at[thread_id] = time.monotonic() + _RETRY
