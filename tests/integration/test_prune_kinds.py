"""``threads.prune`` keeps what it promises for every kind of thread (issue 52 item 2), on
both backends: a LongTask's thread and a served plain graph's thread (two turns), each
pruned with each strategy through the Server API.

- ``keep_latest``: the thread stays, its state is what it was, its history is that one
  checkpoint, and it carries on (a served graph takes a third turn on the same state). It
  once lost a served graph's whole state and history: the graph's namespace was read from
  the events the prune drops.
- ``delete``: the thread is gone, state and history with it (404).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from served_graphs import served
from starlette.testclient import TestClient

from longtask import LongTask, Runner, Stage, StepContext, function_step


@function_step
def count(ctx: StepContext) -> int:
    return int(ctx.inputs["n"]) + 1


@function_step
def double(ctx: StepContext) -> int:
    return int(ctx.result("count")) * 2


COUNTING = LongTask("counting", stages=[Stage("one", [count]), Stage("two", [double])])


@pytest.fixture
def client(runner: Runner, tmp_path: Path) -> Iterator[TestClient]:
    with served(runner, tmp_path, {"echo": "echo_graph.py"}, ["test_prune_kinds:COUNTING"]) as c:
        yield c


def _wait(client: TestClient, thread: str, assistant: str, body: dict[str, Any]) -> Any:
    r = client.post(f"/threads/{thread}/runs/wait", json={"assistant_id": assistant, **body})
    assert r.status_code == 200, r.text
    return r.json()


def _longtask_thread(client: TestClient) -> str:
    thread = str(client.post("/threads", json={}).json()["thread_id"])
    _wait(client, thread, "counting", {"input": {"n": 20}})
    return thread


def _graph_thread(client: TestClient) -> str:
    thread = str(client.post("/threads", json={}).json()["thread_id"])
    for said in ("one", "two"):
        _wait(client, thread, "echo", {"input": {"said": [said]}})
    return thread


KINDS = {"longtask": _longtask_thread, "served graph": _graph_thread}


def _history(client: TestClient, thread: str) -> Any:
    return client.post(f"/threads/{thread}/history", json={"limit": 100})


@pytest.mark.parametrize("kind", list(KINDS))
def test_keep_latest_keeps_the_state_and_only_the_latest_checkpoint(
    client: TestClient, runner: Runner, kind: str
) -> None:
    thread = KINDS[kind](client)
    state = client.get(f"/threads/{thread}/state").json()
    history = _history(client, thread).json()
    assert len(history) > 1 and state["values"], (state, history)
    record = client.get(f"/threads/{thread}").json()

    r = client.post("/threads/prune", json={"thread_ids": [thread], "strategy": "keep_latest"})
    assert r.status_code == 200 and r.json() == {"pruned_count": 1}, r.text

    after = client.get(f"/threads/{thread}/state").json()
    assert after["values"] == state["values"]
    assert after["checkpoint_id"] == state["checkpoint_id"]
    kept = _history(client, thread).json()
    assert [h["checkpoint_id"] for h in kept] == [state["checkpoint_id"]]
    assert kept[0]["values"] == state["values"]
    again = client.get(f"/threads/{thread}").json()
    assert (again["status"], again["values"]) == (record["status"], record["values"])
    assert runner.status(thread).status == "completed"
    if kind == "served graph":
        # it carries on from the state it kept
        out = _wait(client, thread, "echo", {"input": {"said": ["three"]}})
        assert out["said"] == ["one", "echo one", "two", "echo two", "three", "echo three"]
        assert runner.graph_ns(thread, "echo") == "echo"
    else:
        assert runner.result(thread, "double") == 42


@pytest.mark.parametrize("kind", list(KINDS))
def test_delete_removes_the_thread_with_its_state_and_history(
    client: TestClient, runner: Runner, kind: str
) -> None:
    thread = KINDS[kind](client)
    other = KINDS[kind](client)
    r = client.post("/threads/prune", json={"thread_ids": [thread], "strategy": "delete"})
    assert r.status_code == 200 and r.json() == {"pruned_count": 1}, r.text
    assert client.get(f"/threads/{thread}").status_code == 404
    assert client.get(f"/threads/{thread}/state").status_code == 404
    assert _history(client, thread).status_code == 404
    assert all(t.thread_id != thread for t in runner.threads())
    # the other thread of the same kind is untouched
    assert len(_history(client, other).json()) > 1
