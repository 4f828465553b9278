"""Group commit (longtask.checkpointers._held): a task's writes wait a moment for the
checkpoint after them and commit in its transaction; on both backends."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from longtask import LongTask, Runner, Stage, function_step
from longtask.checkpointers import Database


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    database = Database.open(db_url, upgrade=True)
    yield database
    database.close()


def _config(thread_id: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def _checkpoint(n: int) -> Any:
    cp = empty_checkpoint()
    cp["channel_values"] = {"x": n}
    cp["channel_versions"] = {"x": f"{n:032}.0"}
    return cp


def _put(db: Database, thread_id: str, n: int, parent: str | None) -> str:
    cp = _checkpoint(n)
    db.saver.put(_config(thread_id, parent), cp, {"source": "loop", "step": n}, {"x": f"{n:032}.0"})
    return str(cp["id"])


def _writes_of(url: str, thread_id: str, checkpoint_id: str) -> list[tuple[str, str, Any]]:
    """The pending writes as another process sees them (a fresh saver: no held writes)."""
    other = Database.open(url, upgrade=True)
    try:
        tup = other.saver.get_tuple(_config(thread_id, checkpoint_id))
        assert tup is not None
        return list(tup.pending_writes or [])
    finally:
        other.close()


def _holding(db: Database) -> None:
    """Wait until a write is held (the window made long: a loaded machine is slow)."""
    deadline = time.monotonic() + 10
    while not db.saver._held.pending:
        assert time.monotonic() < deadline, "no write was held"
        time.sleep(0.001)


def _counting_transactions(db: Database) -> list[int]:
    calls = [0]
    write = db.saver.backend.write

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return write(*args, **kwargs)

    db.saver.backend.write = counted  # type: ignore[method-assign]
    return calls


def test_a_chain_commits_once_per_step(db: Database) -> None:
    steps = [function_step(lambda ctx, i=i: {"i": i}, name=f"s{i:02d}") for i in range(30)]
    task = LongTask("chain", stages=[Stage(f"st{i:02d}", [s]) for i, s in enumerate(steps)])
    runner = Runner(db=db)
    runner.graph(task)
    calls = _counting_transactions(db)
    runner.start(task, {}, thread_id="chain-1")
    assert runner.status("chain-1").status == "completed"
    # Each step's writes ride with the checkpoint after them: one transaction per step (and
    # a few for the run's start and end), where committing them apart takes two.
    assert calls[0] <= 30 + 5, calls[0]
    assert runner.result("chain-1", "s29") == {"i": 29}


def test_writes_with_no_checkpoint_after_them_commit_on_their_own(
    db: Database, db_url: str
) -> None:
    parent = _put(db, "t", 1, None)
    db.saver.put_writes(_config("t", parent), [("x", 41)], "task-1")
    assert _writes_of(db_url, "t", parent) == [("task-1", "x", 41)]


def test_a_second_task_on_the_same_checkpoint_commits_both_at_once(
    db: Database, db_url: str
) -> None:
    db.saver._held.window = 10.0
    parent = _put(db, "t", 1, None)
    first = threading.Thread(
        target=db.saver.put_writes, args=(_config("t", parent), [("x", 1)], "task-a")
    )
    first.start()
    _holding(db)
    calls = _counting_transactions(db)
    db.saver.put_writes(_config("t", parent), [("x", 2)], "task-b")
    first.join(5)
    assert not first.is_alive()
    assert calls[0] == 1
    assert sorted(_writes_of(db_url, "t", parent)) == [("task-a", "x", 1), ("task-b", "x", 2)]


def test_held_writes_commit_with_the_next_checkpoint(db: Database, db_url: str) -> None:
    db.saver._held.window = 10.0
    parent = _put(db, "t", 1, None)
    writer = threading.Thread(
        target=db.saver.put_writes, args=(_config("t", parent), [("x", 7)], "task-1")
    )
    writer.start()
    _holding(db)
    calls = _counting_transactions(db)
    child = _put(db, "t", 2, parent)
    writer.join(5)
    assert calls[0] == 1  # the writes and the checkpoint: one transaction
    assert _writes_of(db_url, "t", parent) == [("task-1", "x", 7)]
    tup = db.saver.get_tuple(_config("t"))
    assert tup is not None and tup.checkpoint["id"] == child


def test_a_read_sees_held_writes(db: Database) -> None:
    db.saver._held.window = 10.0
    parent = _put(db, "t", 1, None)
    writer = threading.Thread(
        target=db.saver.put_writes, args=(_config("t", parent), [("x", 5)], "task-1")
    )
    writer.start()
    _holding(db)
    tup = db.saver.get_tuple(_config("t", parent))
    writer.join(5)
    assert tup is not None and tup.pending_writes == [("task-1", "x", 5)]


def test_a_refused_checkpoint_fails_the_writes_it_carried(db: Database, db_url: str) -> None:
    db.saver._held.window = 10.0
    parent = _put(db, "t", 1, None)
    errors: list[BaseException] = []

    def write() -> None:
        try:
            db.saver.put_writes(_config("t", parent), [("x", 9)], "task-1")
        except BaseException as exc:
            errors.append(exc)

    # An epoch no lease row has: the next transaction of this writer is refused.
    db.fence.hold("t", 999)
    writer = threading.Thread(target=write)
    writer.start()
    _holding(db)
    with pytest.raises(Exception, match="lease lost"):
        _put(db, "t", 2, parent)
    writer.join(5)
    assert len(errors) == 1 and "lease lost" in str(errors[0])
    db.fence.drop("t")
    assert _writes_of(db_url, "t", parent) == []
    tup = db.saver.get_tuple(_config("t"))
    assert tup is not None and tup.checkpoint["id"] == parent
