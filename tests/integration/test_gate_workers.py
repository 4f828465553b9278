"""Issue 50, item 5, for threads served by workers: an answer put in a thread's inbox and a
state update made at once are ordered in one transaction (the per-thread lock the gate's
check takes, and a mark of the thread's state taken before the answer was checked), so the
one that commits second sees the first: the answer is refused (409, nothing queued) or the
update is, and an accepted (202) answer is always carried out by the worker."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langgraph.types import Command
from serve_access import AdminClient
from starlette.testclient import TestClient

from longtask import InvalidInput, LongTask, Runner, Stage, StepContext, approval, function_step
from longtask.runtime._queue import serve_thread
from longtask.serve import create_app
from longtask.serve._registry import Registered, Registry

TOKENS = {"tok-alice": "alice"}
ALICE = {"X-Api-Key": "tok-alice"}
SHIPPED: Counter[str] = Counter()
CHANGED = "changed while this command was checked"


@function_step
def prep(ctx: StepContext) -> dict[str, int]:
    return {"x": 0}


@function_step
def ship(ctx: StepContext) -> str:
    SHIPPED[ctx.thread_id] += 1
    return "shipped"


GATED = LongTask(
    "gw_gated",
    stages=[
        Stage("plan", [prep]),
        Stage("gate", [approval("ok", plan=lambda ctx: ctx.result("prep"), approvers=["alice"])]),
        Stage("ship", [ship]),
    ],
)


@pytest.fixture
def caller(pg_url: str) -> Iterator[Runner]:
    """The process that answers (the CLI, serve): it queues commands for the workers."""
    with Runner(pg_url) as r:
        yield r


@pytest.fixture
def other(pg_url: str) -> Iterator[Runner]:
    """Another process that writes the thread's state from outside (its own connections)."""
    with Runner(pg_url) as r:
        yield r


@pytest.fixture
def worker(pg_url: str) -> Iterator[Runner]:
    with Runner(pg_url, worker="w-gate") as r:
        r.engine.load = lambda rec: GATED  # type: ignore[method-assign]
        yield r


def paused(caller: Runner, worker: Runner, name: str) -> str:
    """A thread served by workers, run by the worker's job to its approval."""
    thread = caller.submit(
        GATED, thread_id=f"{name}-{uuid.uuid4().hex[:8]}", task_ref=f"{__name__}:GATED"
    )
    serve_thread(worker, thread)
    assert caller.status(thread, usage=False).status == "waiting_user"
    return thread


def update(runner: Runner, thread: str, x: int) -> None:
    runner.graph(GATED).update_state({"configurable": {"thread_id": thread}}, {"prep": {"x": x}})


def kinds(runner: Runner, thread: str) -> list[str]:
    return [e.kind for e in runner.events(thread)]


def _decision(caller: Runner, thread: str) -> tuple[str, dict[str, Any]]:
    (pending,) = caller.pending(thread, task=GATED)
    decision = {"approved": True, "by": "alice", "plan_hash": pending.request["plan_hash"]}
    return pending.interrupt_id, decision


#: every door that queues an answer for a worker: what it is asked (the CLI's `longtask
#: approve` and serve's approve are Runner.approve in their process)
DOORS: dict[str, Callable[[Runner, str], Any]] = {
    "approve": lambda r, t: r.approve(t, "ok", by="alice", task=GATED),
    "answer": lambda r, t: r.answer(t, _decision(r, t)[1], interrupt="ok", by="alice", task=GATED),
    "resume": lambda r, t: r.resume(
        t,
        Command(resume=dict([_decision(r, t)])),
        task=GATED,
        expect_interrupt=_decision(r, t)[0],
    ),
}


@pytest.mark.parametrize("door", sorted(DOORS))
def test_an_update_committed_after_an_answer_was_checked_refuses_the_answer(
    caller: Runner, other: Runner, worker: Runner, door: str
) -> None:
    """The answer was checked against the thread's state; a state update commits before the
    answer reaches the inbox. The answer is refused (nothing queued) rather than accepted and
    then voided by the worker."""
    thread = paused(caller, worker, f"late-{door}")
    store = caller.db.store
    put = store.inbox_put
    wrote: list[bool] = []

    def after_an_update(thread_id: str, command: dict[str, Any], **kw: Any) -> bool:
        if not wrote:
            update(other, thread_id, 7)  # committed by another process meanwhile
            wrote.append(True)
        return put(thread_id, command, **kw)

    store.inbox_put = after_an_update  # type: ignore[method-assign]
    try:
        with pytest.raises(InvalidInput, match=CHANGED):
            DOORS[door](caller, thread)
    finally:
        store.inbox_put = put  # type: ignore[method-assign]
    assert wrote and store.inbox_peek(thread) == []
    assert kinds(caller, thread).count("manual.update") == 1
    # The worker continues the thread from the update: it asks again, for the new plan.
    serve_thread(worker, thread)
    assert "approval.resolved" not in kinds(caller, thread) and SHIPPED[thread] == 0
    assert caller.status(thread, usage=False).status == "waiting_user"
    (pending,) = caller.pending(thread, task=GATED)
    assert pending.request["plan"] == {"x": 7}
    # Sent again, it is queued and carried out.
    DOORS[door](caller, thread)
    serve_thread(worker, thread)
    assert caller.status(thread, usage=False).status == "completed" and SHIPPED[thread] == 1


@pytest.mark.parametrize("door", ["answer", "approve"])
def test_an_update_committed_right_after_the_answers_check_refuses_it(
    caller: Runner, other: Runner, worker: Runner, door: str
) -> None:
    """The mark is taken before the answer is checked (its plan hash, its approver), not
    when the run core is reached: an update committed in between is seen."""
    thread = paused(caller, worker, f"checked-{door}")
    pauses = caller.pauses
    check = pauses.resume_value

    def then_an_update(*args: Any, **kw: Any) -> Any:
        checked = check(*args, **kw)
        update(other, thread, 7)
        return checked

    pauses.resume_value = then_an_update  # type: ignore[method-assign]
    try:
        with pytest.raises(InvalidInput, match=CHANGED):
            DOORS[door](caller, thread)
    finally:
        pauses.resume_value = check  # type: ignore[method-assign]
    assert caller.db.store.inbox_peek(thread) == []


def rows(runner: Runner, thread: str) -> dict[str, int]:
    """How many rows of the thread's checkpoints, writes and events are stored."""
    return {
        table: int(
            runner.db.store._run(f"SELECT COUNT(*) FROM {table} WHERE thread_id = ?", (thread,))[0][
                0
            ]
        )
        for table in ("longtask_cp_checkpoints", "longtask_cp_writes", "longtask_events")
    }


def test_an_answer_queued_after_the_gates_look_refuses_the_update(
    caller: Runner, other: Runner, worker: Runner
) -> None:
    """The other order: the gate looked under the thread's lock (nothing queued), then an
    answer was queued before the update's first write: the update is refused in its
    transaction, storing nothing (no checkpoint, no pending write, no ``manual.update``),
    and the answer is carried out."""
    thread = paused(caller, worker, "early")
    gate = other.engine.gate
    look = gate._check_queue
    looks: list[str] = []
    before = rows(caller, thread)

    def answered_meanwhile(thread_id: str) -> None:
        look(thread_id)
        looks.append(thread_id)
        if len(looks) == 2:  # the look under the lock, the last before the write
            caller.approve(thread_id, "ok", by="alice", task=GATED)

    gate._check_queue = answered_meanwhile  # type: ignore[method-assign]
    try:
        with pytest.raises(InvalidInput, match="waiting to be carried out"):
            update(other, thread, 8)
    finally:
        gate._check_queue = look  # type: ignore[method-assign]
    assert len(looks) == 2
    other.db.saver.release(thread)  # nothing of it waits to be stored later either
    assert rows(caller, thread) == before
    assert len(caller.db.store.inbox_peek(thread)) == 1
    serve_thread(worker, thread)
    assert "manual.update" not in kinds(caller, thread)
    assert caller.status(thread, usage=False).status == "completed" and SHIPPED[thread] == 1
    (resolved,) = [e for e in caller.events(thread) if e.kind == "approval.resolved"]
    assert resolved.data["by"] == "alice"


@pytest.mark.parametrize("writer", ["the runner that ran it", "another process"])
def test_a_refused_update_stores_nothing_on_every_backend(db_url: str, writer: str) -> None:
    """The in-transaction refusal on both backends, for a thread served in process: a run
    recorded after the gate's last look refuses the update in its transaction, and none of
    it is stored, whether the checkpoint it starts from was written by the same process
    (whose task writes wait for the next checkpoint anyway) or by another (they used to be
    stored at once, with the update's ``manual.update``, before the check refused it)."""
    with Runner(db_url) as first, Runner(db_url) as second:
        thread = first.start(GATED, thread_id=f"refused-{uuid.uuid4().hex[:8]}")
        runner = first if writer == "the runner that ran it" else second
        gate = runner.engine.gate
        look = gate._check_queue
        looks: list[str] = []
        before = rows(first, thread)

        def recorded_meanwhile(thread_id: str) -> None:
            look(thread_id)
            looks.append(thread_id)
            if len(looks) == 2:  # the look under the lock, the last before the write
                assert first.db.store.api_run_create(
                    "run-1", thread_id, "a", {"kind": "answer", "answers": []}, "alice", None
                )

        gate._check_queue = recorded_meanwhile  # type: ignore[method-assign]
        try:
            with pytest.raises(InvalidInput, match="waiting to be carried out"):
                update(runner, thread, 9)
        finally:
            gate._check_queue = look  # type: ignore[method-assign]
        assert len(looks) == 2
        runner.db.saver.release(thread)  # nothing of it waits to be stored later either
        assert rows(first, thread) == before
        assert first.status(thread, usage=False).status == "waiting_user"


def test_two_answers_checked_at_once_queue_one(caller: Runner, worker: Runner) -> None:
    """Two answers checked against the same state: the second to reach the inbox is refused
    (the first changed what it was checked against), not accepted and dropped as answered
    twice."""
    thread = paused(caller, worker, "twice")
    store = caller.db.store
    put = store.inbox_put
    first: list[bool] = []

    def after_another(thread_id: str, command: dict[str, Any], **kw: Any) -> bool:
        if not first:
            first.append(True)
            caller.reject(thread_id, "ok", by="alice", task=GATED)
        return put(thread_id, command, **kw)

    store.inbox_put = after_another  # type: ignore[method-assign]
    try:
        with pytest.raises(InvalidInput, match=CHANGED):
            caller.approve(thread, "ok", by="alice", task=GATED)
    finally:
        store.inbox_put = put  # type: ignore[method-assign]
    ((_, queued),) = store.inbox_peek(thread)
    resume = queued["command"]["resume"]
    assert [v["approved"] for v in resume.values()] == [False]


def test_the_inbox_mark_on_every_backend(runner: Runner) -> None:
    """The store's half (SQLite has no workers, but the same rule): a command is put only if
    the thread's latest checkpoint and inbox are what the mark saw."""
    thread = runner.start(GATED, thread_id=f"mark-{uuid.uuid4().hex[:8]}")
    store = runner.db.store
    mark = store.inbox_mark(thread)
    assert store.inbox_mark(thread) == mark
    update(runner, thread, 3)
    assert not store.inbox_put(thread, {"kind": "resume"}, seen=mark)
    assert store.inbox_peek(thread) == []
    mark = store.inbox_mark(thread)
    assert store.inbox_put(thread, {"kind": "resume"}, seen=mark)
    assert not store.inbox_put(thread, {"kind": "resume"}, seen=mark)  # the first changed it
    assert len(store.inbox_peek(thread)) == 1


# -- the race through serve's doors ---------------------------------------------------------


@pytest.fixture
def client(caller: Runner) -> Iterator[TestClient]:
    registry = Registry([Registered("gw_gated", f"{__file__}:GATED", GATED)])
    app = create_app(caller, TOKENS, registry=registry, poll=0.02, to_workers=True)
    with AdminClient(app) as c:
        yield c


def race(caller: Runner, worker: Runner, client: TestClient, rounds: int) -> Counter[str]:
    """``rounds`` times: alice's approval and eight state updates sent at once to serve, on
    a thread served by workers; then the worker's job. Every accepted (202) approval is
    carried out; every accepted update is recorded; a refused approval leaves no decision."""
    seen: Counter[str] = Counter()
    for trial in range(rounds):
        thread = paused(caller, worker, f"race{trial}")
        start = threading.Barrier(9)
        updates: list[int] = []
        answer: dict[str, Any] = {}

        def post_update(
            i: int,
            thread: str = thread,
            start: threading.Barrier = start,
            updates: list[int] = updates,
        ) -> None:
            start.wait(30)
            r = client.post(
                f"/threads/{thread}/state", json={"values": {"prep": {"x": i}}}, headers=ALICE
            )
            updates.append(r.status_code)

        def approve(
            thread: str = thread, start: threading.Barrier = start, answer: dict[str, Any] = answer
        ) -> None:
            start.wait(30)
            answer["response"] = client.post(
                f"/api/threads/{thread}/approve", json={"step": "ok"}, headers=ALICE
            )

        racers = [threading.Thread(target=post_update, args=(i,)) for i in range(8)]
        racers.append(threading.Thread(target=approve))
        for t in racers:
            t.start()
        for t in racers:
            t.join(120)
        queued = caller.db.store.inbox_peek(thread)
        serve_thread(worker, thread)
        events = caller.events(thread)
        resolved = [e for e in events if e.kind == "approval.resolved"]
        manual = [e for e in events if e.kind == "manual.update"]
        status = caller.status(thread, usage=False).status
        response = answer["response"]
        context = (response.status_code, response.text, updates, status, [e.kind for e in events])
        assert response.status_code in (202, 409), context
        assert set(updates) <= {200, 409}, context
        assert len(manual) == updates.count(200), context
        if response.status_code == 202:
            assert len(queued) == 1, context
            assert len(resolved) == 1 and resolved[0].data["by"] == "alice", context
            assert status == "completed" and SHIPPED[thread] == 1, context
            seen["approved"] += 1
        else:
            assert queued == [] and not resolved and SHIPPED[thread] == 0, context
            assert updates.count(200) >= 1, context
            seen["refused"] += 1
        seen["updates accepted"] += updates.count(200)
    return seen


def test_an_accepted_answer_is_carried_out_by_a_worker_despite_racing_updates(
    caller: Runner, worker: Runner, client: TestClient
) -> None:
    """Item 5 through serve's doors on threads served by workers, a few rounds (50 with
    ``-m slow``)."""
    race(caller, worker, client, 6)


@pytest.mark.slow
def test_an_accepted_answer_is_carried_out_by_a_worker_despite_racing_updates_50_rounds(
    caller: Runner, worker: Runner, client: TestClient, request: pytest.FixtureRequest
) -> None:
    if "slow" not in (request.config.option.markexpr or ""):
        pytest.skip("the long run (50 rounds): select it with -m slow")
    seen = race(caller, worker, client, 50)
    print(f"\n50 rounds: {dict(seen)}")
