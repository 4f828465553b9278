"""The Runner's live side: following a thread's events, and its artifacts."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from longtask.errors import InvalidInput

if TYPE_CHECKING:
    from longtask.checkpointers import Database
    from longtask.runtime._reading import Reads
    from longtask.store import Artifact, Event

#: statuses after which a thread writes no more events until someone acts
FINAL = ("completed", "failed", "cancelled")
PAUSED = ("waiting_user", "waiting_external")
#: seconds of recent events read again on every poll, so an event committed late under a
#: smaller id than one already read is still delivered (ids seen are skipped)
LOOKBACK = 5.0


class EventHub:
    """One LISTEN connection for every waiter of a Runner (PostgreSQL): a background thread
    reads the notifications and wakes whoever waits for that thread's events."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._cond = threading.Condition()
        self._seen: dict[str, int] = {}
        self._stop = threading.Event()
        self._worker: threading.Thread | None = None

    def _listen(self) -> None:
        waiter = self._db.event_waiter()
        conn = getattr(waiter, "_conn", None)
        try:
            while not self._stop.is_set() and conn is not None:
                for note in conn.notifies(timeout=1.0):
                    with self._cond:
                        self._seen[note.payload] = self._seen.get(note.payload, 0) + 1
                        self._cond.notify_all()
        except Exception:  # the waiters fall back to their timeouts
            pass
        finally:
            waiter.close()

    def wait(self, thread_id: str, timeout: float) -> None:
        if self._db.url.scheme != "postgresql":
            time.sleep(max(0.0, min(timeout, 0.2)))
            return
        with self._cond:
            if self._worker is None:
                self._worker = threading.Thread(
                    target=self._listen, daemon=True, name="longtask-events"
                )
                self._worker.start()
            start = self._seen.get(thread_id, 0)
            self._cond.wait_for(lambda: self._seen.get(thread_id, 0) != start, timeout)

    def close(self) -> None:
        self._stop.set()


class Watch:
    """Watching threads live: their events as they are stored (``follow``, and
    ``wait_events`` for a server's streams), and their artifacts and agent transcripts.
    ``reads`` says whether a thread exists and what its status is."""

    def __init__(self, db: Database, reads: Reads) -> None:
        self.db = db
        self._reads = reads
        self._hub: EventHub | None = None

    def close(self) -> None:
        """Stop the listener ``wait_events`` started, if any."""
        if self._hub is not None:
            self._hub.close()

    def wait_events(self, thread_id: str, timeout: float) -> None:
        """Block until the thread may have new events (PostgreSQL: a NOTIFY for it), or
        ``timeout`` seconds; SQLite waits a short poll interval."""
        if self._hub is None:
            self._hub = EventHub(self.db)
        self._hub.wait(thread_id, timeout)

    def follow(
        self,
        thread_id: str,
        *,
        since: int = 0,
        kinds: Iterable[str] | None = None,
        stop_when_paused: bool = False,
        poll: float = 0.2,
        idle: float = 1.0,
    ) -> Iterator[Event]:
        """Yield the thread's events as they are stored, each once and in id order, until
        the thread is completed, failed or cancelled (with ``stop_when_paused``, also when
        it waits for a person or an outside event) and every event before that was yielded.

        Works while any process, on any machine, advances the thread; PostgreSQL wakes the
        follower with LISTEN/NOTIFY, SQLite is polled every ``poll`` seconds.
        """
        self._reads.thread(thread_id)
        wanted = list(kinds) if kinds else None
        store = self.db.store
        waiter = self.db.event_waiter(poll)
        seen: dict[int, float] = {}
        last = since
        try:
            while True:
                # The status first: a thread's events are stored before its final status,
                # so the fetch below holds all of them once the status is final.
                status = self._reads.thread(thread_id).status
                now = time.time()
                batch = store.events(
                    thread_id, since=last, kinds=wanted, recent=now - LOOKBACK if last else None
                )
                for event in batch:
                    if event.id in seen or event.id <= since:
                        continue
                    seen[event.id] = now
                    last = max(last, event.id)
                    yield event
                for key in [k for k, t in seen.items() if t < now - 4 * LOOKBACK]:
                    del seen[key]
                if status in FINAL or (stop_when_paused and status in PAUSED):
                    return
                waiter.wait(thread_id, idle)
        finally:
            waiter.close()

    def artifacts(self, thread_id: str) -> list[Artifact]:
        """The thread's artifacts (newest content per name), oldest first."""
        self._reads.thread(thread_id)
        return self.db.store.artifacts(thread_id)

    def artifact(self, thread_id: str, name: str) -> tuple[bytes, Artifact]:
        """The content of artifact ``name`` and its record."""
        self._reads.thread(thread_id)
        record = self.db.store.artifact(thread_id, name)
        if record is None:
            names = ", ".join(a.name for a in self.db.store.artifacts(thread_id)) or "none"
            raise InvalidInput(
                f"thread {thread_id!r} has no artifact {name!r} (artifacts: {names})"
            )
        return self.db.store.artifact_data(record), record

    def transcript(self, thread_id: str, step: str) -> list[dict[str, Any]]:
        """The messages of the latest run of agent step ``step`` (LangChain's
        ``messages_to_dict`` form): its artifact ``<step>.transcript.json``."""
        data, _ = self.artifact(thread_id, f"{step}.transcript.json")
        messages: list[dict[str, Any]] = json.loads(data)
        return messages
