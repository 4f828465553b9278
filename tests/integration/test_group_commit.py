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


def _checkpoint(n: int, triggers: tuple[str, ...] = ("branch:to:a",)) -> Any:
    cp = empty_checkpoint()
    cp["channel_values"] = {"x": n}
    cp["channel_versions"] = {"x": f"{n:032}.0"}
    # what the super-step after it runs: one node unless told
    cp["updated_channels"] = ["x", *triggers]
    return cp


def _put(
    db: Database,
    thread_id: str,
    n: int,
    parent: str | None,
    triggers: tuple[str, ...] = ("branch:to:a",),
) -> str:
    cp = _checkpoint(n, triggers)
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
    # the flusher commits them once the window passes, with no read of this saver
    deadline = time.monotonic() + 10
    while not _writes_of(db_url, "t", parent):
        assert time.monotonic() < deadline, "held writes were never committed"
        time.sleep(0.01)
    assert _writes_of(db_url, "t", parent) == [("task-1", "x", 41)]
    assert not db.saver._held.pending


def test_held_writes_of_a_task_commit_with_the_next_checkpoint(db: Database, db_url: str) -> None:
    db.saver._held.window = 30.0  # a loaded machine must not let the flusher in first
    parent = _put(db, "t", 1, None)
    db.saver.put_writes(_config("t", parent), [("x", 1)], "task-a", "~__pregel_pull, a")
    assert db.saver._held.pending
    assert _writes_of(db_url, "t", parent) == []  # not yet committed
    calls = _counting_transactions(db)
    child = _put(db, "t", 2, parent)
    assert calls[0] == 1  # the writes and the checkpoint: one transaction
    assert _writes_of(db_url, "t", parent) == [("task-a", "x", 1)]
    tup = db.saver.get_tuple(_config("t"))
    assert tup is not None and tup.checkpoint["id"] == child


def test_writes_that_arrive_while_their_checkpoint_commits_are_held(
    db: Database, db_url: str
) -> None:
    # LangGraph runs a super-step's task while the put of the checkpoint before it is still
    # committing (a thread of its executor): the task's writes can come first, and must
    # still ride with the checkpoint after them.
    db.saver._held.window = 30.0
    cp = _checkpoint(1)
    parent = str(cp["id"])
    write = db.saver.backend.write
    held_meanwhile: list[bool] = []

    def racing(*args: Any, **kwargs: Any) -> Any:
        if not held_meanwhile:
            held_meanwhile.append(False)
            # from another thread, as LangGraph's executor calls it
            task = threading.Thread(
                target=db.saver.put_writes,
                args=(_config("t", parent), [("x", 1)], "task-a", "~__pregel_pull, a"),
            )
            task.start()
            task.join(5)  # a writer that is not held waits for this commit: not held then
            held_meanwhile[0] = not task.is_alive() and db.saver._held.pending
        return write(*args, **kwargs)

    db.saver.backend.write = racing  # type: ignore[method-assign]
    db.saver.put(_config("t"), cp, {"source": "input", "step": -1}, {"x": f"{1:032}.0"})
    db.saver.backend.write = write  # type: ignore[method-assign]
    assert held_meanwhile == [True]
    calls = _counting_transactions(db)
    _put(db, "t", 2, parent)
    assert calls[0] == 1  # the writes and the checkpoint after them: one transaction
    assert _writes_of(db_url, "t", parent) == [("task-a", "x", 1)]


def test_a_checkpoint_that_fails_to_commit_keeps_none_of_its_tasks_writes(db: Database) -> None:
    db.saver._held.window = 30.0
    cp = _checkpoint(1)
    write = db.saver.backend.write

    def failing(*args: Any, **kwargs: Any) -> Any:
        task = threading.Thread(
            target=db.saver.put_writes,
            args=(_config("t", str(cp["id"])), [("x", 1)], "task-a", "~__pregel_pull, a"),
        )
        task.start()
        task.join(5)
        raise ConnectionError("the server went away")

    db.saver.backend.write = failing  # type: ignore[method-assign]
    with pytest.raises(ConnectionError):
        db.saver.put(_config("t"), cp, {"source": "input", "step": -1}, {"x": f"{1:032}.0"})
    db.saver.backend.write = write  # type: ignore[method-assign]
    # lost with the checkpoint, as in a crash: nothing is left to flush later
    assert not db.saver._held.pending


@pytest.mark.parametrize(
    ("triggers", "path"),
    [
        (("branch:to:a", "branch:to:b"), "~__pregel_pull, a"),  # parallel nodes
        (("__pregel_tasks",), "~__pregel_push, 0000000000, 0000000000"),  # Sends
        (("branch:to:a",), "~__pregel_push, ~__pregel_pull, a, 0000000000, 0000000001"),
    ],
    ids=["parallel-nodes", "sends", "functional-task"],
)
def test_a_task_with_siblings_commits_its_writes_when_it_returns(
    db: Database, db_url: str, triggers: tuple[str, ...], path: str
) -> None:
    # A sibling may run on for long: held, these writes would be lost with a kill meanwhile
    # and the finished task would run again.
    db.saver._held.window = 30.0
    parent = _put(db, "t", 1, None, triggers)
    db.saver.put_writes(_config("t", parent), [("x", 1)], "task-a", path)
    assert not db.saver._held.pending
    assert _writes_of(db_url, "t", parent) == [("task-a", "x", 1)]


def test_a_read_sees_held_writes(db: Database) -> None:
    db.saver._held.window = 30.0
    parent = _put(db, "t", 1, None)
    db.saver.put_writes(_config("t", parent), [("x", 5)], "task-1")
    tup = db.saver.get_tuple(_config("t", parent))
    assert tup is not None and tup.pending_writes == [("task-1", "x", 5)]
    assert not db.saver._held.pending


def test_an_interrupt_carries_the_held_writes_of_its_checkpoint(db: Database, db_url: str) -> None:
    db.saver._held.window = 30.0
    parent = _put(db, "t", 1, None)
    db.saver.put_writes(_config("t", parent), [("x", 3)], "task-a")
    calls = _counting_transactions(db)
    db.saver.put_writes(_config("t", parent), [("__interrupt__", ["why"])], "task-b")
    assert calls[0] == 1 and not db.saver._held.pending
    assert sorted(_writes_of(db_url, "t", parent)) == [
        ("task-a", "x", 3),
        ("task-b", "__interrupt__", ["why"]),
    ]


def test_closing_the_database_commits_what_is_held(db_url: str) -> None:
    db = Database.open(db_url, upgrade=True)
    db.saver._held.window = 30.0
    parent = _put(db, "t", 1, None)
    db.saver.put_writes(_config("t", parent), [("x", 8)], "task-1")
    db.close()
    assert _writes_of(db_url, "t", parent) == [("task-1", "x", 8)]


def test_a_refused_checkpoint_stores_none_of_the_writes_it_carried(
    db: Database, db_url: str
) -> None:
    db.saver._held.window = 30.0
    parent = _put(db, "t", 1, None)
    db.saver.put_writes(_config("t", parent), [("x", 9)], "task-1")
    # An epoch no lease row has: the next transaction of this writer is refused.
    db.fence.hold("t", 999)
    with pytest.raises(Exception, match="lease lost"):
        _put(db, "t", 2, parent)
    db.fence.drop("t")
    assert _writes_of(db_url, "t", parent) == []
    tup = db.saver.get_tuple(_config("t"))
    assert tup is not None and tup.checkpoint["id"] == parent


def test_one_worker_thread_is_not_held_up(db: Database) -> None:
    # With max_concurrency=1 the run has one worker thread: a put_writes that waited in it
    # would keep the put it waits for in the queue behind it until its window ran out.
    steps = [function_step(lambda ctx, i=i: {"i": i}, name=f"s{i:02d}") for i in range(20)]
    task = LongTask("one", stages=[Stage(f"st{i:02d}", [s]) for i, s in enumerate(steps)])
    runner = Runner(db=db)
    graph = runner.graph(task)
    db.saver._held.window = 30.0  # a wait would show as a run that never ends in time
    calls = _counting_transactions(db)
    config: Any = {"configurable": {"thread_id": "one-1"}, "max_concurrency": 1}
    finished = threading.Event()

    def run() -> None:
        for _ in graph.stream({"lt.inputs": {}}, config, durability="sync"):
            pass
        finished.set()

    threading.Thread(target=run, daemon=True).start()
    assert finished.wait(25), "the run was held up by its own writes"
    assert calls[0] <= 20 + 5, calls[0]
    assert runner.status("one-1").status == "completed"


def test_a_read_waits_for_writes_the_flusher_is_storing(db: Database) -> None:
    db.saver._held.window = 0.01
    parent = _put(db, "t", 1, None)
    write = db.saver.backend.write
    storing = threading.Event()

    def slow(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread().name == "longtask-held-writes":
            storing.set()
            time.sleep(0.5)  # the flusher took the writes and is storing them
        return write(*args, **kwargs)

    db.saver.backend.write = slow  # type: ignore[method-assign]
    db.saver.put_writes(_config("t", parent), [("x", 6)], "task-1")
    assert storing.wait(10)
    tup = db.saver.get_tuple(_config("t", parent))
    assert tup is not None and tup.pending_writes == [("task-1", "x", 6)]
