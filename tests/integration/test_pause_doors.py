"""No door around an approval or a wait (issue 28, item 1).

An approval is answered by ``approve``/``reject`` (or a run's ``command={"resume": ...}``),
which check the approvers, the plan hash and the deadline and record ``approval.resolved``
with who decided; a wait by ``signal``. Every other way to change a thread must not be a way
around them: LangGraph's ``update_state`` on the task's graph (result or request channel),
``Runner.resume(Command(update=...))`` (the CLI's ``resume --update``), ``fork`` with a new
result (``fork --set``), a ``goto`` past a pause that has no answer (pending, not reached
yet, or the thread failed before it), and the Server API's state endpoint and run commands.
Each door is tried by a token that may not approve; the gated step's effect never runs and
the pause still waits. On every backend.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.types import Command
from serve_access import AdminClient
from starlette.testclient import TestClient

from longtask import (
    InvalidInput,
    LongTask,
    Runner,
    Stage,
    StepContext,
    StepFailed,
    approval,
    function_step,
)
from longtask.serve import create_app
from longtask.serve._registry import Registered, Registry

TOKENS = {"tok-alice": "alice", "tok-mallory": "mallory"}
ALICE = {"X-Api-Key": "tok-alice"}
MALLORY = {"X-Api-Key": "tok-mallory"}
FORGED = {"approved": True, "by": "mallory", "plan_hash": "x", "at": "2026-12-03T00:00:00Z"}


def _effects() -> Path:
    return Path(os.environ["LT_DOORS_EFFECTS"])


@function_step
def build(ctx: StepContext) -> dict[str, int]:
    if os.environ.get("LT_DOORS_FAIL_BUILD") == "1":
        raise RuntimeError("build broke")
    return {"version": 1}


@function_step
def deploy(ctx: StepContext) -> str:
    # Reads no result of the approval: only the graph's order holds it back.
    with _effects().open("a") as f:
        f.write(f"deployed {ctx.thread_id}\n")
    return "deployed"


#: build and the approval side by side, then deploy (a join of the two)
TASK = LongTask(
    "doors",
    stages=[
        Stage("prepare", [build, approval("ok", plan=lambda ctx: {"go": 1}, approvers=["alice"])]),
        Stage("ship", [deploy]),
    ],
)


@pytest.fixture
def runner(db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runner]:
    monkeypatch.setenv("LT_DOORS_EFFECTS", str(tmp_path / "effects.txt"))
    r = Runner(db_url)
    yield r
    r.close()


@pytest.fixture
def client(runner: Runner) -> Iterator[TestClient]:
    registry = Registry([Registered("doors", f"{__file__}:TASK", TASK)])
    with AdminClient(create_app(runner, TOKENS, registry=registry)) as c:
        yield c


def _deployed() -> list[str]:
    path = _effects()
    return path.read_text().splitlines() if path.exists() else []


def _still_waits(runner: Runner, thread: str) -> None:
    assert runner.status(thread, usage=False).status == "waiting_user"
    assert [p.step for p in runner.pending(thread, task=TASK)] == ["ok"]
    assert _deployed() == []
    kinds = [e.kind for e in runner.events(thread)]
    assert "approval.resolved" not in kinds and "step.completed" not in [
        e.kind for e in runner.events(thread) if e.step == "deploy"
    ]


def test_the_python_doors_are_refused(runner: Runner) -> None:
    thread = runner.start(TASK)
    graph = runner.graph(TASK)
    config: Any = {"configurable": {"thread_id": thread}}
    # LangGraph's update_state, by step name and by either of the pause's channels
    for key in ("ok", "out.ok", "pause.ok"):
        with pytest.raises(InvalidInput, match="is an approval: its result is a decision"):
            graph.update_state(config, {key: FORGED}, as_node="ok")
    # resume --update
    with pytest.raises(InvalidInput, match="longtask approve"):
        runner.resume(thread, Command(update={"ok": FORGED}), task=TASK)
    # a goto past the pending approval
    with pytest.raises(InvalidInput, match="pending approval 'ok'"):
        runner.resume(thread, Command(goto="deploy"), task=TASK)
    # fork --set of the decision, at any checkpoint
    checkpoint = runner.history(thread)[0].checkpoint_id
    with pytest.raises(InvalidInput, match="is an approval"):
        runner.fork(thread, checkpoint, update={"ok": FORGED}, task=TASK)
    _still_waits(runner, thread)

    runner.approve(thread, "ok", by="alice", task=TASK)
    assert _deployed() == [f"deployed {thread}"]


def test_a_fork_of_the_joined_step_keeps_the_recorded_decision(runner: Runner) -> None:
    thread = runner.start(TASK)
    runner.approve(thread, "ok", by="alice", task=TASK)
    assert runner.status(thread, usage=False).status == "completed"
    before_deploy = next(v for v in runner.history(thread) if v.done == 2)  # build and ok
    # A new build result re-runs deploy (a join of build and ok): ok's stored decision is
    # written back as it was, which is the one pause write a state update may make.
    runner.fork(thread, before_deploy.checkpoint_id, update={"build": {"version": 2}}, task=TASK)
    runner.resume(thread, task=TASK)
    assert runner.status(thread, usage=False).status == "completed"
    assert runner.result(thread, "ok")["by"] == "alice"
    assert len(_deployed()) == 2


def test_a_goto_past_an_approval_never_reached_is_refused(
    runner: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LT_DOORS_FAIL_BUILD", "1")
    thread = "lt-doors-failed"
    with pytest.raises(StepFailed):
        runner.start(TASK, thread_id=thread)
    assert runner.status(thread, usage=False).status == "failed"
    # Whether the approval was asked before build failed or not, deploy may not be reached
    # without its decision.
    with pytest.raises(InvalidInput, match="approval 'ok'"):
        runner.resume(thread, Command(goto="deploy"), task=TASK)
    assert _deployed() == []


def _paused(client: TestClient) -> str:
    thread = client.post("/threads", json={}, headers=ALICE).json()["thread_id"]
    body = {"assistant_id": "doors", "input": {}}
    run = client.post(f"/threads/{thread}/runs/wait", json=body, headers=ALICE)
    assert run.status_code == 200, run.text
    assert "__interrupt__" in run.json()
    return str(thread)


def test_the_server_api_doors_are_refused(runner: Runner, client: TestClient) -> None:
    thread = _paused(client)
    state = f"/threads/{thread}/state"
    for values in ({"ok": FORGED}, {"ok": FORGED, "build": {"version": 9}}):
        r = client.post(state, json={"values": values}, headers=MALLORY)
        assert r.status_code == 409, r.text
        assert "is an approval" in r.json()["error"]
    runs = f"/threads/{thread}/runs/wait"
    for command in (
        {"update": {"ok": FORGED}},
        {"goto": "deploy"},
        {"update": {"build": {"version": 9}}, "goto": ["deploy"]},
        {"goto": "__end__"},
    ):
        r = client.post(runs, json={"assistant_id": "doors", "command": command}, headers=MALLORY)
        assert r.status_code == 409, (command, r.text)
    # A continue without an answer is no way around it either.
    r = client.post(runs, json={"assistant_id": "doors"}, headers=MALLORY)
    assert r.status_code == 200 and "__interrupt__" in r.json(), r.text
    not_approver = client.post(
        runs, json={"assistant_id": "doors", "command": {"resume": True}}, headers=MALLORY
    )
    assert not_approver.status_code == 409 and "mallory" in not_approver.json()["error"]
    _still_waits(runner, thread)

    ok = client.post(
        runs, json={"assistant_id": "doors", "command": {"resume": True}}, headers=ALICE
    )
    assert ok.status_code == 200, ok.text
    assert _deployed() == [f"deployed {thread}"]
    resolved = [e for e in runner.events(thread) if e.kind == "approval.resolved"]
    assert [e.data.get("by") for e in resolved] == ["alice"]


def test_update_state_during_a_pause_asks_again_when_continued(
    runner: Runner, client: TestClient
) -> None:
    thread = _paused(client)
    first = client.get(f"/threads/{thread}/state").json()["interrupts"]
    r = client.post(
        f"/threads/{thread}/state", json={"values": {"build": {"version": 7}}}, headers=ALICE
    )
    assert r.status_code == 200, r.text
    # Nothing waits for an answer now (the approval asks again once a run continues): the
    # thread is idle with a next step, never "interrupted" with no interrupt.
    got = client.get(f"/threads/{thread}").json()
    assert got["status"] == "idle", got
    assert client.get(f"/threads/{thread}/state").json()["next"]
    again = client.post(
        f"/threads/{thread}/runs/wait", json={"assistant_id": "doors"}, headers=ALICE
    )
    assert again.status_code == 200, again.text
    interrupts = again.json()["__interrupt__"]
    assert interrupts and interrupts[0]["id"] != first[0]["id"]
    assert runner.result(thread, "build") == {"version": 7}
    ok = client.post(
        f"/threads/{thread}/runs/wait",
        json={"assistant_id": "doors", "command": {"resume": True}},
        headers=ALICE,
    )
    assert ok.status_code == 200, ok.text
    deadline = time.monotonic() + 30
    while runner.status(thread, usage=False).status != "completed":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert _deployed() == [f"deployed {thread}"]


def test_an_update_during_a_pause_is_read_at_once(runner: Runner, db_url: str) -> None:
    """``resume --update`` on a paused thread stores the update among the head checkpoint's
    pending writes (LangGraph applies it when the thread moves on); every read shows it at
    once, as LangGraph's ``get_state`` does, not the old value until then."""
    from longtask.runtime._reader import Reader

    thread = runner.start(TASK)
    assert runner.result(thread, "build") == {"version": 1}
    runner.resume(thread, Command(update={"build": {"version": 2}}), task=TASK)
    _still_waits(runner, thread)
    graph_values = runner.graph(TASK).get_state({"configurable": {"thread_id": thread}}).values
    assert graph_values["out.build"] == {"version": 2}
    assert runner.result(thread, "build") == {"version": 2}
    assert runner.results(thread) == {"build": {"version": 2}}
    with Reader(db_url) as reader:  # what the CLI's `result` reads, without LangGraph
        assert reader.result(thread, "build") == {"version": 2}
        assert reader.results(thread) == {"build": {"version": 2}}
    runner.approve(thread, "ok", by="alice")
    assert runner.status(thread, usage=False).status == "completed"
    assert runner.result(thread, "build") == {"version": 2}
