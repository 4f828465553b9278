"""More of the LangGraph Server API on both backends (issue 43): ``POST /runs/cancel``
(``runs.cancel_many``), an assistant's subgraphs by namespace, and a thread's storage.
Each refusal is a 4xx naming the fix, with nothing stored."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from langgraph.graph import END, START, StateGraph
from starlette.testclient import TestClient
from typing_extensions import TypedDict

from longtask import (
    LongTask,
    Prompt,
    Runner,
    Stage,
    StepContext,
    agent_step,
    approval,
    function_step,
    graph_step,
)
from longtask.serve import create_app
from longtask.serve._registry import load_registry

TOKENS = {"tok-alice": "alice", "tok-bob": "bob", "tok-root": "root", "tok-vera": "vera"}
ROLES = {"root": "admin", "vera": "viewer"}
ALICE = {"Authorization": "Bearer tok-alice"}
BOB = {"Authorization": "Bearer tok-bob"}
ROOT = {"Authorization": "Bearer tok-root"}
VERA = {"Authorization": "Bearer tok-vera"}

#: what ``held`` waits for (each test sets it at its end)
RELEASE = threading.Event()


@function_step
def held(ctx: StepContext) -> str:
    RELEASE.wait(60)
    return "released"


@function_step
def later(ctx: StepContext) -> str:
    return "later"


HELD = LongTask("more_held", stages=[Stage("held", [held]), Stage("later", [later])])


@function_step
def prepare(ctx: StepContext) -> str:
    return "prepared " * 20


PAUSED = LongTask(
    "more_paused",
    stages=[Stage("prepare", [prepare]), Stage("ok", [approval("ok", plan=lambda ctx: {})])],
)


class Inner(TypedDict):
    n: int


def _bump(state: Inner) -> Inner:
    return {"n": state["n"] + 1}


_child = StateGraph(Inner)
_child.add_node("bump", _bump)
_child.add_edge(START, "bump")
_child.add_edge("bump", END)
_outer = StateGraph(Inner)
_outer.add_node("child", _child.compile())
_outer.add_edge(START, "child")
_outer.add_edge("child", END)


def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"facts about {topic}"


#: a task with a graph step, whose graph has a subgraph of its own, and an agent step
GRAPHED = LongTask(
    "more_graphed",
    stages=[
        Stage("g", [graph_step("inner", _outer.compile(), input=lambda ctx: {"n": 1})]),
        Stage(
            "a",
            [agent_step("ask", prompt=Prompt(name="ask", template="hello"), tools=[lookup])],
        ),
    ],
)


@pytest.fixture
def client(runner: Runner) -> Iterator[TestClient]:
    RELEASE.clear()
    app = create_app(
        runner,
        TOKENS,
        roles=ROLES,
        registry=load_registry(
            ["test_lg_more:HELD", "test_lg_more:PAUSED", "test_lg_more:GRAPHED"]
        ),
        schedule_poll=None,
        poll=0.02,
    )
    with TestClient(app) as c:
        yield c
    RELEASE.set()


def tables(runner: Runner) -> dict[str, list[str]]:
    from test_access import tables as every_row

    return every_row(runner)


def wait_for(what: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def status(client: TestClient, thread: str, run_id: str) -> str:
    return str(client.get(f"/threads/{thread}/runs/{run_id}", headers=ROOT).json()["status"])


def start(client: TestClient, who: dict[str, str], assistant: str) -> tuple[str, str]:
    thread = str(client.post("/threads", json={}, headers=who).json()["thread_id"])
    r = client.post(f"/threads/{thread}/runs", json={"assistant_id": assistant}, headers=who)
    assert r.status_code == 200, r.text
    return thread, str(r.json()["run_id"])


def paused(client: TestClient, who: dict[str, str] = ALICE) -> tuple[str, str]:
    thread, run_id = start(client, who, "more_paused")
    wait_for(lambda: status(client, thread, run_id) not in ("pending", "running"))
    assert client.get(f"/threads/{thread}", headers=who).json()["status"] == "interrupted"
    return thread, run_id


def test_a_cancel_by_status_cancels_the_caller_s_own_runs_only(
    runner: Runner, client: TestClient
) -> None:
    mine, running = start(client, ALICE, "more_held")
    wait_for(lambda: status(client, mine, running) == "running")
    queued = client.post(
        f"/threads/{mine}/runs", json={"assistant_id": "more_held"}, headers=ALICE
    ).json()["run_id"]
    theirs, bobs = start(client, BOB, "more_held")
    assert status(client, mine, queued) == "pending"

    got = client.post("/runs/cancel", json={"status": "all"}, headers=ALICE)
    assert got.status_code == 204, got.text
    # The queued run never starts; the running one's cancel is recorded before the answer,
    # and carried out by the executor. Bob's run is not alice's to cancel.
    assert status(client, mine, queued) == "interrupted"
    assert runner.db.store.cancel_request(mine) is not None
    assert runner.db.store.cancel_request(theirs) is None
    assert status(client, theirs, bobs) in ("pending", "running")
    RELEASE.set()
    wait_for(lambda: status(client, mine, running) not in ("pending", "running"))
    wait_for(lambda: status(client, theirs, bobs) not in ("pending", "running"))
    assert status(client, mine, running) in ("interrupted", "error")
    assert runner.status(mine).status == "cancelled"
    assert status(client, theirs, bobs) == "success"
    assert runner.status(theirs).status == "completed"


def test_an_admin_cancels_every_running_run_by_status(runner: Runner, client: TestClient) -> None:
    mine, running = start(client, ALICE, "more_held")
    theirs, bobs = start(client, BOB, "more_held")
    wait_for(lambda: status(client, mine, running) == "running")
    wait_for(lambda: status(client, theirs, bobs) == "running")
    got = client.post("/runs/cancel", json={"status": "running"}, headers=ROOT)
    assert got.status_code == 204, got.text
    assert runner.db.store.cancel_request(mine) is not None
    assert runner.db.store.cancel_request(theirs) is not None
    RELEASE.set()
    for thread, run_id in ((mine, running), (theirs, bobs)):
        wait_for(lambda: status(client, thread, run_id) not in ("pending", "running"))  # noqa: B023
        assert runner.status(thread).status == "cancelled"


def test_a_cancel_of_named_runs_is_checked_whole_and_refused_with_nothing_written(
    runner: Runner, client: TestClient
) -> None:
    thread, run_id = paused(client)
    before = tables(runner)
    named = {"thread_id": thread, "run_ids": [run_id]}
    refusals: list[tuple[dict[str, str], Any, str, int, str]] = [
        (BOB, named, "", 404, f"no thread {thread!r}"),  # not his to see
        (VERA, named, "", 403, "viewer"),
        (ALICE, named, "?action=rollback", 422, "action=interrupt"),
        (ALICE, {"thread_id": thread, "run_ids": ["no-such-run"]}, "", 404, "No runs found"),
        (ALICE, {"status": "pending"}, "", 404, "No runs found"),
        (ALICE, {"status": "paused"}, "", 422, "'pending', 'running', or 'all'"),
        (ALICE, {"status": "all", **named}, "", 422, "must be omitted"),
        (ALICE, {}, "", 422, '"run_ids"'),
        (ALICE, {"thread_id": thread}, "", 422, '"run_ids"'),
        (ALICE, {"thread_id": thread, "run_ids": [1]}, "", 422, "list of run ids"),
        (ALICE, [named], "", 400, "JSON object"),
        (ALICE, {"thread_id": "no-such-thread", "run_ids": [run_id]}, "", 404, "no thread"),
    ]
    for who, body, query, code, says in refusals:
        got = client.post(f"/runs/cancel{query}", json=body, headers=who)
        assert got.status_code == code, (body, got.text)
        assert says in got.json()["detail"], (body, got.text)
    # A run that has ended is found, and there is nothing to cancel, as LangGraph's server
    # answers.
    ended = client.post("/runs/cancel", json=named, headers=ALICE)
    assert ended.status_code == 404 and "have ended" in ended.json()["detail"], ended.text
    # So is the cancel of that run alone, waiting for it or not.
    for query in ("", "?wait=1"):
        alone = client.post(f"/threads/{thread}/runs/{run_id}/cancel{query}", headers=ALICE)
        assert alone.status_code == 404, alone.text
        assert "has ended" in alone.json()["detail"], alone.text
    assert tables(runner) == before


def test_a_thread_s_storage_counts_its_checkpoints_values_and_writes(
    runner: Runner, client: TestClient
) -> None:
    thread, _ = paused(client)
    got = client.get(f"/threads/{thread}/storage", headers=ALICE)
    assert got.status_code == 200, got.text
    body = got.json()
    assert body["thread_id"] == thread
    checkpoints, values = body["checkpoints"], body["channel_values"]
    writes = body["pending_writes"]
    assert checkpoints["count"] >= len(runner.history(thread, limit=1000)) > 0
    assert checkpoints["bytes"] > 0 and values["bytes"] > 0
    by_channel = values["by_channel"]
    assert by_channel and values["count"] == sum(c["versions"] for c in by_channel.values())
    assert values["bytes"] == sum(c["bytes"] for c in by_channel.values())
    assert body["total_bytes"] == checkpoints["bytes"] + values["bytes"] + writes["bytes"]
    assert body["events"]["count"] == len(runner.events(thread))
    # The step's result is among the values, and counts its bytes.
    assert any(c["bytes"] >= len("prepared " * 20) for c in by_channel.values())
    # A thread made through the API that has not run has nothing stored yet.
    empty = client.post("/threads", json={}, headers=ALICE).json()["thread_id"]
    nothing = client.get(f"/threads/{empty}/storage", headers=ALICE).json()
    assert nothing["total_bytes"] == 0 and nothing["channel_values"]["by_channel"] == {}
    # Who may read the thread reads its storage; nobody else learns it exists.
    assert client.get(f"/threads/{thread}/storage", headers=VERA).status_code == 200
    hidden = client.get(f"/threads/{thread}/storage", headers=BOB)
    assert hidden.status_code == 404 and f"no thread {thread!r}" in hidden.json()["detail"]
    missing = client.get("/threads/no-such-thread/storage", headers=ALICE)
    assert missing.status_code == 404 and "no thread" in missing.json()["detail"]


def test_an_assistant_s_subgraphs_are_its_graph_steps_by_namespace(client: TestClient) -> None:
    def get(path: str, **params: str) -> Any:
        got = client.get(f"/assistants/more_graphed/subgraphs{path}", params=params, headers=BOB)
        assert got.status_code == 200, got.text
        return got.json()

    every = get("")
    assert list(every) == ["inner", "ask"]
    assert every["inner"]["input_schema"]["properties"] == {"n": {"title": "N", "type": "integer"}}
    assert list(every["inner"]["state_schema"]["properties"]) == ["n"]
    # The agent step's agent, built without a model call or a key: its messages state.
    assert "messages" in every["ask"]["input_schema"]["properties"]
    assert "messages" in every["ask"]["state_schema"]["properties"]
    assert get("/inner") == {"inner": every["inner"]}
    assert get("/ask") == {"ask": every["ask"]}
    assert get("/inner|child") == {}  # a nested namespace needs recurse, as on LangGraph's
    nested = get("/inner|child", recurse="true")
    assert list(nested) == ["inner|child"]
    assert list(get("", recurse="true")) == ["inner", "inner|child", "ask"]
    assert get("/no-such-step") == {}
    # A task without graph steps has none, under any namespace.
    assert client.get("/assistants/more_held/subgraphs/held", headers=BOB).json() == {}
    missing = client.get("/assistants/no-such/subgraphs/inner", headers=BOB)
    assert missing.status_code == 404


def test_an_unknown_or_malformed_stream_mode_is_a_422_for_runs_and_crons(
    runner: Runner, client: TestClient
) -> None:
    thread = client.post("/threads", json={}, headers=ALICE).json()["thread_id"]
    before = tables(runner)
    doors = (
        (f"/threads/{thread}/runs", {}),
        ("/runs/crons", {"schedule": "0 * * * *"}),
        (f"/threads/{thread}/runs/crons", {"schedule": "0 * * * *"}),
    )
    for mode, says in (
        ("nope", "unknown stream mode nope"),
        (["values", "nope"], "unknown stream mode nope"),
        (5, "a mode or a list of modes"),
        ({"values": 1}, "a mode or a list of modes"),
    ):
        for path, extra in doors:
            body = {"assistant_id": "more_paused", "stream_mode": mode, **extra}
            got = client.post(path, json=body, headers=ALICE)
            assert got.status_code == 422, (path, mode, got.text)
            assert says in got.json()["detail"], (path, mode, got.text)
    assert tables(runner) == before


def test_a_body_of_the_wrong_shape_is_a_422_naming_the_field_with_nothing_stored(
    runner: Runner, client: TestClient
) -> None:
    """A body the request cannot mean is a 422 (LangGraph's server answers its schema's
    refusals so), not a 409, which says the thread's state is in the way."""
    thread, _ = paused(client)
    before = tables(runner)
    refusals: list[tuple[str, str, dict[str, Any], str]] = [
        ("POST", "/threads", {"metadata": [1]}, "metadata must be an object"),
        ("PATCH", f"/threads/{thread}", {"metadata": "m"}, "metadata must be an object"),
        ("POST", f"/threads/{thread}/state", {"values": {}, "checkpoint_id": 7}, "checkpoint id"),
        ("POST", "/runs", {"assistant_id": "more_paused", "input": [1]}, "input is an object"),
        (
            "POST",
            "/runs",
            {"assistant_id": "more_paused", "input": {"messages": 5}},
            "list of messages",
        ),
        (
            "POST",
            "/runs",
            {"assistant_id": "more_paused", "input": {"messages": [{"type": "robot"}]}},
            "human, ai or system",
        ),
    ]
    for method, path, body, says in refusals:
        got = client.request(method, path, json=body, headers=ALICE)
        assert got.status_code == 422, (path, body, got.text)
        assert says in got.json()["detail"], (path, body, got.text)
    assert tables(runner) == before
