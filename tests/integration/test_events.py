"""The event outbox: ordered, idempotent, and never silent about (nor losing) a failed write."""

from __future__ import annotations

import threading

import pytest

from longtask.checkpointers import Database
from longtask.store import NewEvent, ThreadRecord


def _thread(db: Database, thread_id: str) -> None:
    db.store.create_thread(
        ThreadRecord(
            thread_id=thread_id,
            task_ref=None,
            task_name="t",
            task_version="1",
            definition_hash="h",
            definition={"stages": []},
            status="running",
        )
    )


def test_events_from_many_threads_keep_their_order(db_url: str) -> None:
    with Database.open(db_url) as db:
        _thread(db, "w")
        writer = db.events

        def produce(n: int) -> None:
            for i in range(250):
                writer.put(NewEvent("w", "step.progress", f"{n}/{i}", data={"n": n, "i": i}))

        threads = [threading.Thread(target=produce, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        writer.put(NewEvent("w", "step.progress", "0/0", data={"dup": True}))  # same key
        writer.flush()
        events = db.store.events("w")
        assert len(events) == 1000
        for n in range(4):
            mine = [e.data["i"] for e in events if e.data["n"] == n]
            assert mine == list(range(250))
        writer.close()


def test_a_failed_write_is_raised_at_flush_and_kept(tmp_path: object) -> None:
    db = Database.open(f"sqlite:///{tmp_path}/x.db")
    writer = db.events
    db.close()  # every write fails from now on
    writer.put(NewEvent("gone", "step.progress", "k"))
    with pytest.raises(Exception, match="closed"):
        writer.flush()
    # not lost: the event waits for the next write that can store it
    assert [e.key for e in writer.take("gone")] == ["k"]
