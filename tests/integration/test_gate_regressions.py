"""Regressions of issue 39's numbered items, each as it was reported (the matrix in
``test_gate.py`` covers the rule over every door, target and state; these replay the
reported sequences end to end). On every backend."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from io import StringIO
from typing import Any

import pytest
from serve_access import AdminClient
from starlette.testclient import TestClient

from longtask import (
    LongTask,
    Runner,
    Stage,
    StepContext,
    StepFailed,
    approval,
    function_step,
    map_step,
)
from longtask.serve import create_app
from longtask.serve._registry import Registered, Registry

TOKENS = {"tok-alice": "alice", "tok-mallory": "mallory"}
ALICE = {"X-Api-Key": "tok-alice"}
MALLORY = {"X-Api-Key": "tok-mallory"}
SHIPPED: Counter[str] = Counter()


@function_step
def prep(ctx: StepContext) -> dict[str, int]:
    return {"x": 0}


@function_step
def after(ctx: StepContext) -> str:
    SHIPPED[ctx.thread_id] += 1  # the gated step's outside effect
    return "shipped"


TASK = LongTask(
    "reg_gate",
    stages=[
        Stage("plan", [prep]),
        Stage(
            "gate",
            [approval("ok", plan=lambda ctx: ctx.result("prep"), approvers=["alice", "bob"])],
        ),
        Stage("ship", [after]),
    ],
)


@function_step
def other(ctx: StepContext) -> str:
    return "first"


@function_step
def joined(ctx: StepContext) -> list[Any]:
    return [ctx.result("double"), ctx.result("other")]


#: a stage holding a map step beside another step, and a stage after it
MAPPED = LongTask(
    "reg_mapped",
    stages=[
        Stage(
            "wide",
            [map_step(lambda ctx, i: i * 2, over=lambda ctx: [1, 2, 3], name="double"), other],
        ),
        Stage("join", [joined]),
    ],
)


@pytest.fixture
def runner(db_url: str) -> Iterator[Runner]:
    r = Runner(db_url)
    yield r
    r.close()


@pytest.fixture
def client(runner: Runner) -> Iterator[TestClient]:
    registry = Registry(
        [
            Registered("reg_gate", f"{__file__}:TASK", TASK),
            Registered("reg_mapped", f"{__file__}:MAPPED", MAPPED),
        ]
    )
    with AdminClient(create_app(runner, TOKENS, registry=registry)) as c:
        yield c


def cli(db: str, *args: str) -> tuple[int, str]:
    from longtask.cli import main

    out = StringIO()
    with redirect_stdout(out), redirect_stderr(out):
        try:
            main([*args, "--db", db])
            code = 0
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue()


def kinds(runner: Runner, thread: str) -> list[str]:
    return [e.kind for e in runner.events(thread)]


def test_a_token_that_may_not_approve_cannot_run_the_gated_step(
    runner: Runner, client: TestClient
) -> None:
    """Item 1: mallory's state write as the approval node, then a plain run."""
    thread = runner.start(TASK, thread_id=f"mallory-{uuid.uuid4().hex[:8]}")
    refused = client.post(
        f"/threads/{thread}/state",
        json={"values": {"prep": {"x": 1}}, "as_node": "ok"},
        headers=MALLORY,
    )
    assert refused.status_code in (409, 422), refused.text
    assert "as_node 'ok'" in refused.json()["detail"]
    client.post(f"/threads/{thread}/runs/wait", json={"assistant_id": "reg_gate"}, headers=MALLORY)
    assert SHIPPED[thread] == 0
    assert [p.step for p in runner.pending(thread, task=TASK)] == ["ok"]
    assert "approval.resolved" not in kinds(runner, thread)
    assert "manual.update" not in kinds(runner, thread)


def test_two_updates_in_a_row_leave_the_thread_resumable(
    runner: Runner, client: TestClient, db_url: str
) -> None:
    """Item 2: two `resume --update` in a row, and two runs with command.update."""
    thread = runner.start(TASK, thread_id="twice")
    for x in (1, 2):
        code, out = cli(db_url, "resume", thread, "--update", json.dumps({"prep": {"x": x}}))
        assert code == 3, out  # the approval asks again, about the new plan
    assert runner.status(thread, usage=False).status == "waiting_user"
    assert runner.pending(thread, task=TASK)[0].request["plan"] == {"x": 2}
    for x in (3, 4):
        answer = client.post(
            f"/threads/{thread}/runs/wait",
            json={"assistant_id": "reg_gate", "command": {"update": {"prep": {"x": x}}}},
            headers=ALICE,
        )
        assert answer.status_code == 200, answer.text
    assert client.post("/threads/search", json={}, headers=ALICE).status_code == 200
    assert client.get(f"/threads/{thread}/state", headers=ALICE).status_code == 200
    assert client.post(f"/threads/{thread}/history", json={}, headers=ALICE).status_code == 200
    assert kinds(runner, thread).count("manual.update") == 4
    runner.approve(thread, "ok", by="alice")
    assert runner.status(thread, usage=False).status == "completed"
    assert runner.result(thread, "prep") == {"x": 4}
    # On the completed thread both doors refuse, and the thread's rows stay as they are.
    code, out = cli(db_url, "resume", thread, "--update", json.dumps({"prep": {"x": 5}}))
    assert code == 1 and "fork it from a checkpoint" in out
    answer = client.post(
        f"/threads/{thread}/runs/wait",
        json={"assistant_id": "reg_gate", "command": {"update": {"prep": {"x": 6}}}},
        headers=ALICE,
    )
    assert answer.status_code == 409, answer.text
    assert runner.result(thread, "prep") == {"x": 4}
    assert client.post("/threads/search", json={}, headers=ALICE).status_code == 200


def test_fork_set_beside_a_map_step(runner: Runner, db_url: str) -> None:
    """Item 6: `fork --set` of a step beside a map step (the join writes the map's stored
    reference back) and of a step after it."""
    thread = runner.start(MAPPED, thread_id="mapped")
    head = runner.history(thread, 1)[0].checkpoint_id
    code, out = cli(db_url, "fork", thread, head, "--set", 'other="changed"')
    assert code == 0, out
    runner.resume(thread, task=MAPPED)
    assert runner.result(thread, "joined") == [[2, 4, 6], "changed"]
    head = runner.history(thread, 1)[0].checkpoint_id
    runner.fork(thread, head, update={"joined": ["by hand"]}, task=MAPPED)
    runner.resume(thread, task=MAPPED)
    assert runner.result(thread, "joined") == ["by hand"]


def test_state_and_history_agree_after_a_rejection(runner: Runner, client: TestClient) -> None:
    """Item 7: a rejection failed the thread; state and history show its head alike."""
    thread = runner.start(TASK, thread_id="rejected")
    with pytest.raises(StepFailed):
        runner.reject(thread, "ok", by="alice")
    state = client.get(f"/threads/{thread}/state", headers=ALICE).json()
    (first,) = client.post(f"/threads/{thread}/history", json={"limit": 1}, headers=ALICE).json()
    assert first["checkpoint"]["checkpoint_id"] == state["checkpoint"]["checkpoint_id"]
    assert (first["next"], first["interrupts"]) == (state["next"], state["interrupts"]) == ([], [])
    named = client.get(
        f"/threads/{thread}/state/{state['checkpoint']['checkpoint_id']}", headers=ALICE
    ).json()
    assert (named["next"], named["interrupts"]) == ([], [])
    assert runner.pending(thread, task=TASK) == []


def test_an_accepted_approval_is_never_dropped_by_a_racing_update(
    runner: Runner, client: TestClient
) -> None:
    """Item 4: state updates racing an approval. The approval, once accepted, is carried
    out; an update is refused while it waits, and after the thread completed."""
    for trial in range(6):
        # (an id of its own per backend: SHIPPED counts by thread id in this process)
        thread = runner.start(TASK, thread_id=f"race-{uuid.uuid4().hex[:8]}-{trial}")
        answers: dict[str, int] = {}

        def update(thread: str = thread, answers: dict[str, int] = answers) -> None:
            answers["update"] = client.post(
                f"/threads/{thread}/state", json={"values": {"prep": {"x": 9}}}, headers=ALICE
            ).status_code

        racer = threading.Thread(target=update)
        approved = client.post(f"/api/threads/{thread}/approve", json={"step": "ok"}, headers=ALICE)
        racer.start()
        racer.join(30)
        assert approved.status_code in (200, 202), approved.text
        # The executor carries the approval out in the background: wait for it (a loaded
        # machine may take a while), then look.
        deadline = time.monotonic() + 180
        while runner.status(thread, usage=False).status != "completed":
            assert time.monotonic() < deadline, (
                runner.status(thread, usage=False).status,
                answers,
                [(e.kind, e.step) for e in runner.events(thread)],
                [(r.status, r.request, r.error) for r in runner.db.store.api_runs(thread)],
            )
            time.sleep(0.05)
        events = runner.events(thread)
        resolved = [e for e in events if e.kind == "approval.resolved"]
        assert len(resolved) == 1 and resolved[0].data and resolved[0].data["by"] == "alice"
        assert runner.status(thread, usage=False).status == "completed"
        assert SHIPPED[thread] == 1
        updates = [e for e in events if e.kind == "manual.update"]
        # Refused (queued approval, or completed), or applied before the approval and then
        # asked again: never both an accepted update and a dropped approval.
        assert answers["update"] in (409, 422) and not updates, (answers, updates)
