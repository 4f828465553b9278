"""Events about work in progress are stored while the work runs, on every backend: within a
moment of being emitted, on their own when no write of the thread carries them sooner,
fenced like every write; facts about committed work still wait for their write."""

from __future__ import annotations

import time
from typing import Any

from longtask.checkpointers import Database
from longtask.store import NewEvent


def _kinds(db: Database, thread_id: str) -> list[str]:
    return [e.kind for e in db.store.events(thread_id)]


def _until(predicate: Any, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def test_live_events_are_stored_on_their_own_and_facts_wait(db_url: str) -> None:
    with Database.open(db_url) as db:
        db.fence.hold("t", db.store.lease_take("t", "me"))
        db.events.put(NewEvent("t", "step.started", "1/a/step.started", stage="s", step="a"))
        db.events.put(NewEvent("t", "step.completed", "1/a/step.completed", stage="s", step="a"))
        db.events.put(NewEvent("t", "step.progress", "1/b/p1", stage="s", step="b"))
        assert _until(lambda: _kinds(db, "t") == ["step.started", "step.progress"])
        # the fact stays queued for the write it describes
        time.sleep(db.events.live_delay * 3)
        assert _kinds(db, "t") == ["step.started", "step.progress"]
        db.events.flush("t")
        assert _kinds(db, "t") == ["step.started", "step.progress", "step.completed"]


def test_a_write_that_comes_soon_carries_the_live_events(db_url: str) -> None:
    """A fast step's step.started rides with its checkpoint: no transaction of its own, and
    the log keeps the order the events were emitted in."""
    with Database.open(db_url) as db:
        db.events.live_delay = 30.0  # the flusher would wait longer than this test
        db.events.put(NewEvent("t", "step.started", "1/a/step.started", stage="s", step="a"))
        db.events.put(NewEvent("t", "step.completed", "1/a/step.completed", stage="s", step="a"))
        db.events.put(NewEvent("t", "step.started", "1/b/step.started", stage="s", step="b"))
        assert _kinds(db, "t") == []
        db.events.flush("t")
        assert _kinds(db, "t") == ["step.started", "step.completed", "step.started"]
        assert db.events.take_live("t") == []


def test_a_writer_that_lost_its_lease_stores_no_live_event(db_url: str) -> None:
    with Database.open(db_url) as db, Database.open(db_url) as other:
        db.fence.hold("t", db.store.lease_take("t", "me"))
        other.store.lease_take("t", "them")  # the thread was taken: this writer is stale
        db.events.put(NewEvent("t", "step.progress", "1/a/p1", stage="s", step="a"))
        assert _until(lambda: db.events.take_live("t") == [] and not db.events._live_at)
        time.sleep(db.events.live_delay * 2)
        assert _kinds(other, "t") == []
        # dropped, not queued for a later write of this process
        assert db.events.take("t") == []


def test_a_live_write_that_fails_is_tried_again(db_url: str) -> None:
    """The events go back to the queue in order when their transaction fails (here: the
    sink refuses once), and are stored by the next try."""
    with Database.open(db_url) as db:
        sink = db.events._live_sink
        assert sink is not None
        calls = []

        def flaky(thread_id: str) -> None:
            calls.append(thread_id)
            if len(calls) == 1:
                events = db.events.take_live(thread_id)
                db.events.restore(thread_id, events)
                raise ConnectionError("the database went away")
            sink(thread_id)

        db.events._live_sink = flaky
        for i in range(3):
            db.events.put(
                NewEvent("t", "step.progress", f"1/a/p{i}", stage="s", step="a", data={"i": i})
            )
        assert _until(lambda: len(_kinds(db, "t")) == 3, 10)
        assert len(calls) >= 2
        assert [e.data["i"] for e in db.store.events("t")] == [0, 1, 2]
