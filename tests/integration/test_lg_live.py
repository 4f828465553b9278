"""A chat on the LangGraph Server API, as useStream and Agent Chat UI see it (issue 27,
items 2, 3 and 7), in process, on every backend.

A run started from a chat keeps its messages: the input message (given an id when the run
is recorded), the agent's messages and, once the task is done, a closing message are the
state's and every history entry's ``values["messages"]``. The run's stream comes from the
run itself, in order: the first ``values`` holds the input, each agent message comes before
the ``values`` of the step it ends, and the pause is a ``values`` with ``__interrupt__`` (as
LangGraph streams it). ``tasks``, ``checkpoints``, ``debug``, ``events`` and subgraph parts
come from LangGraph's own parts; ``get_state(subgraphs=True)`` has the agent's state.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fakes import FakeOpenAI, Reply, by_turn
from pydantic import BaseModel
from serve_access import AdminClient
from starlette.testclient import TestClient

from longtask import (
    LongTask,
    Prompt,
    Runner,
    Stage,
    StepContext,
    agent_step,
    approval,
    function_step,
)
from longtask.serve import create_app
from longtask.serve._registry import Registered, Registry

TOKENS = {"tok-alice": "alice"}
ALICE = {"X-Api-Key": "tok-alice"}
QUESTION = "What is the weather in Lyon?"
ANSWER = "Sunny in Lyon, 21 C."


def weather(city: str) -> str:
    """Today's weather in a city."""
    return f"sunny in {city}"


def deploy(env: str) -> str:
    """Deploy to an environment."""
    return f"deployed to {env}"


@function_step
def report(ctx: StepContext) -> str:
    return f"sent: {ctx.result('answer')} (approved by {ctx.result('send')['by']})"


CHAT = LongTask(
    "chat",
    stages=[
        Stage(
            "talk",
            [
                agent_step(
                    "answer",
                    prompt=Prompt(name="chat", template="{inputs[messages][0][content]}"),
                    tools=[weather],
                    read_only_tools=["weather"],
                )
            ],
        ),
        Stage("ok", [approval("send", plan=lambda ctx: {"answer": ctx.result("answer")})]),
        Stage("done", [report]),
    ],
)

#: an approval and nothing else: a chat UI must still show the chat at its pause
GATE = LongTask(
    "gate",
    stages=[
        Stage("ok", [approval("go", plan=lambda ctx: {"go": 1})]),
        Stage("finish", [function_step(lambda ctx: "gone", name="finish")]),
    ],
)


class Typed(BaseModel):
    service: str


TYPED = LongTask("typed", inputs=Typed, stages=[Stage("s", [function_step(lambda c: 1, name="x")])])

#: an agent whose tool asks for approval: the pause is inside the agent's own graph
SHIP = LongTask(
    "ship",
    stages=[
        Stage(
            "s",
            [
                agent_step(
                    "release",
                    prompt="Ship build 42.",
                    tools=[deploy],
                    tool_approvals={"deploy": True},
                )
            ],
        )
    ],
)


@pytest.fixture
def runner(db_url: str) -> Iterator[Runner]:
    r = Runner(db_url)
    yield r
    r.close()


@pytest.fixture
def llm(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    servers: list[FakeOpenAI] = []

    def start(replies: list[Any]) -> FakeOpenAI:
        server = FakeOpenAI(by_turn(replies)).start()
        servers.append(server)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-lg-live")
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def client(runner: Runner) -> Iterator[TestClient]:
    registry = Registry(
        [Registered(t.name, f"test:{t.name}", t) for t in (CHAT, GATE, TYPED, SHIP)]
    )
    with AdminClient(create_app(runner, TOKENS, registry=registry)) as c:
        yield c


def _events(text: str) -> list[tuple[str, Any]]:
    out = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        out.append((lines["event"], json.loads(lines["data"])))
    return out


def _stream(client: TestClient, thread: str, body: dict[str, Any]) -> list[tuple[str, Any]]:
    r = client.post(f"/threads/{thread}/runs/stream", json=body, headers=ALICE)
    assert r.status_code == 200, r.text
    return _events(r.text)


def _thread(client: TestClient) -> str:
    return str(client.post("/threads", json={}, headers=ALICE).json()["thread_id"])


def test_a_chat_streams_in_order_and_keeps_its_messages(
    runner: Runner, client: TestClient, llm: Any
) -> None:
    llm([Reply.tool_calls([("weather", {"city": "Lyon"})]), Reply.text(ANSWER)])
    thread = _thread(client)
    chat = {"messages": [{"type": "human", "content": QUESTION}]}
    body = {"assistant_id": "chat", "input": chat, "stream_mode": ["values", "messages-tuple"]}
    parts = _stream(client, thread, body)
    kinds = [e for e, _ in parts]
    values = [d for e, d in parts if e == "values"]

    # The first values are the input, its message given an id.
    (human,) = values[0]["messages"]
    assert (human["type"], human["content"]) == ("human", QUESTION) and human["id"]
    # Each agent message comes as it is said (the model's token by token, a tool's whole),
    # before the values of the step it ends.
    said = [(i, d[0]) for i, (e, d) in enumerate(parts) if e == "messages"]
    kinds_said: dict[str, str] = {}
    for _, m in said:
        kinds_said.setdefault(m["id"], m["type"].replace("AIMessageChunk", "ai"))
    assert list(kinds_said.values()) == ["ai", "tool", "ai"]
    answer = [m["content"] for _, m in said if m["id"] == said[-1][1]["id"]]
    assert len(answer) > 1 and "".join(answer) == ANSWER
    ended = next(i for i, (e, d) in enumerate(parts) if e == "values" and "answer" in d)
    assert said[-1][0] < ended
    # The pause ends the stream: values with __interrupt__, the state's interrupt.
    assert kinds[-1] == "values" and "__interrupt__" in values[-1]
    state = client.get(f"/threads/{thread}/state").json()
    # (the stream serialises LangGraph's Interrupt: with its response_schema)
    assert values[-1]["__interrupt__"] == [
        {**i, "response_schema": None} for i in state["interrupts"]
    ]
    assert values[-1]["__interrupt__"][0]["value"]["step"] == "send"

    # Paused: the state and every history entry keep the conversation, with the same ids.
    shown = state["values"]["messages"]
    assert [m["type"] for m in shown] == ["human", "ai", "tool", "ai"]
    assert shown[0]["id"] == human["id"]
    assert [m["id"] for m in shown[1:]] == list(kinds_said)
    history = client.post(f"/threads/{thread}/history", json={"limit": 10}, headers=ALICE)
    entries = history.json()
    # (the oldest, LangGraph's input checkpoint, holds no values yet)
    assert all(isinstance(e["values"]["messages"], list) for e in entries)
    started = [e for e in entries if (e["metadata"] or {}).get("step", -1) >= 0]
    assert started and all(e["values"]["messages"][0]["id"] == human["id"] for e in started)
    assert entries[0]["values"]["messages"] == shown

    resume = {"assistant_id": "chat", "command": {"resume": True}, "stream_mode": ["values"]}
    after = [d for e, d in _stream(client, thread, resume) if e == "values"]
    closing = after[-1]["messages"][-1]
    assert closing["type"] == "ai" and closing["content"] == f"sent: {ANSWER} (approved by alice)"
    assert runner.status(thread, usage=False).status == "completed"
    final = client.get(f"/threads/{thread}/state").json()["values"]["messages"]
    assert final == after[-1]["messages"] and all(m.get("id") for m in final)


def test_an_approval_only_task_started_from_a_chat_shows_the_chat(
    runner: Runner, client: TestClient
) -> None:
    thread = _thread(client)
    body = {"assistant_id": "gate", "input": {"messages": "ship it"}}
    r = client.post(f"/threads/{thread}/runs/wait", json=body, headers=ALICE)
    assert r.status_code == 200 and "__interrupt__" in r.json(), r.text
    got = r.json()
    assert "messages" in got, got
    (message,) = got["messages"]
    assert (message["type"], message["content"]) == ("human", "ship it") and message["id"]
    history = client.post(f"/threads/{thread}/history", json={}, headers=ALICE).json()
    started = [h for h in history if (h["metadata"] or {}).get("step", -1) >= 0]
    assert started and all(h["values"]["messages"] == [message] for h in started)
    thread_obj = client.get(f"/threads/{thread}").json()
    assert thread_obj["values"]["messages"] == [message]


def test_a_task_that_cannot_keep_a_chat_refuses_it(runner: Runner, client: TestClient) -> None:
    thread = _thread(client)
    body = {"assistant_id": "typed", "input": {"messages": [{"type": "human", "content": "x"}]}}
    r = client.post(f"/threads/{thread}/runs", json=body, headers=ALICE)
    assert r.status_code == 422, r.text
    assert "add `messages: list[dict] = []`" in r.json()["error"]
    assert runner.db.store.get_thread(thread) is None
    assert client.get(f"/threads/{thread}/runs").json() == []


def test_the_stream_modes_of_langgraph_come_from_the_run(
    runner: Runner, client: TestClient, llm: Any
) -> None:
    llm([Reply.tool_calls([("weather", {"city": "Lyon"})]), Reply.text(ANSWER)])
    thread = _thread(client)
    modes = ["tasks", "checkpoints", "debug", "events", "updates", "custom"]
    body = {
        "assistant_id": "chat",
        "input": {"messages": [{"type": "human", "content": QUESTION}]},
        "stream_mode": modes,
        "stream_subgraphs": True,
    }
    parts = _stream(client, thread, body)
    by_kind: dict[str, list[Any]] = {}
    for event, data in parts:
        by_kind.setdefault(event, []).append(data)

    tasks = by_kind["tasks"]
    assert {"id", "name", "triggers"} <= set(tasks[0])
    results = [t for t in tasks if "result" in t and t["name"] == "answer"]
    assert results and results[0]["result"] == {"answer": ANSWER}
    checkpoint = by_kind["checkpoints"][-1]
    assert {"config", "parent_config", "values", "metadata", "next", "tasks"} <= set(checkpoint)
    assert checkpoint["config"]["configurable"]["thread_id"] == thread
    debug_types = {d["type"] for d in by_kind["debug"]}
    assert debug_types == {"checkpoint", "task", "task_result"}
    events = {e["event"] for e in by_kind["events"]}
    assert {"on_chain_start", "on_chain_end", "on_chat_model_end", "on_custom_event"} <= events
    # (an agent's model calls come from its own graph: as "custom|answer:<task>" parts)
    custom = [
        (d["kind"], d["stage"], d["step"], d["attempt"])
        for event, data in by_kind.items()
        if event.split("|")[0] == "custom"
        for d in data
    ]
    assert ("step.started", "talk", "answer", 1) in custom
    # The Runner's own events (no step sends them) come too, once the run is over: each
    # stored event once.
    assert any(kind == "longtask.started" for kind, *_ in custom)
    stored = [(e.kind, e.stage, e.step, e.attempt) for e in runner.events(thread)]
    assert sorted(custom, key=str) == sorted(stored, key=str)
    # The agent's own graph, as subgraph parts: "mode|namespace".
    agent = [e for e in by_kind if e.startswith("updates|answer:")]
    assert agent, sorted(by_kind)
    assert {"__interrupt__"} <= {k for u in by_kind["updates"] for k in u}


def test_get_state_with_subgraphs_has_the_agents_state(
    runner: Runner, client: TestClient, llm: Any
) -> None:
    llm([Reply.tool_calls([("deploy", {"env": "prod"})]), Reply.text("shipped")])
    thread = _thread(client)
    r = client.post(
        f"/threads/{thread}/runs/wait", json={"assistant_id": "ship", "input": {}}, headers=ALICE
    )
    assert r.status_code == 200 and "__interrupt__" in r.json(), r.text
    plain = client.get(f"/threads/{thread}/state").json()
    assert all(t["state"] is None for t in plain["tasks"])
    deep = client.get(f"/threads/{thread}/state", params={"subgraphs": "true"}).json()
    (task,) = [t for t in deep["tasks"] if t["state"] is not None]
    inner = task["state"]
    assert [m["type"] for m in inner["values"]["messages"]] == ["human", "ai"]
    assert inner["checkpoint"]["checkpoint_ns"].startswith("release")
    assert inner["interrupts"] and inner["interrupts"][0]["value"]["tool"] == "deploy"
