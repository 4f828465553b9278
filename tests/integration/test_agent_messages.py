"""An agent step's conversation in the thread's state (what Agent Chat UI shows), on every
backend, through the real ``ChatOpenAI`` client against the scripted server of
``tests/fakes``: read from the agent's own checkpoints, never stored in the task's state."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest
from fakes import FakeOpenAI, Reply, by_conversation, by_turn
from serve_access import AdminClient

from longtask import LongTask, Runner, Stage, agent_step
from longtask.graphs import agent_messages
from longtask.serve import create_app
from longtask.serve._registry import Registered, Registry

TOKENS = {"tok-alice": "alice"}
ALICE = {"X-Api-Key": "tok-alice"}


@pytest.fixture
def llm(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    servers: list[FakeOpenAI] = []

    def start(script: Any) -> FakeOpenAI:
        server = FakeOpenAI(script).start()
        servers.append(server)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-agent-messages")
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        return server

    yield start
    for server in servers:
        server.stop()


def deploy(env: str) -> str:
    """Deploy to an environment."""
    return f"deployed to {env}"


def ship_task() -> LongTask:
    release = agent_step(
        "release", prompt="Ship build 42.", tools=[deploy], tool_approvals={"deploy": True}
    )
    return LongTask("ship_chat", stages=[Stage("s", [release])])


def test_a_paused_agent_steps_conversation_is_in_the_thread_state(runner: Runner, llm: Any) -> None:
    llm(by_turn([Reply.tool_calls([("deploy", {"env": "prod"})]), Reply.text("shipped")]))
    task = ship_task()
    thread = runner.start(task, thread_id="t-chat")
    assert runner.status(thread).status == "waiting_user"

    # Through LangGraph: the graph's state, and the agent's conversation read for it.
    graph = runner.graph(task)
    snapshot = graph.get_state({"configurable": {"thread_id": thread}})
    messages = agent_messages(graph, snapshot)
    assert messages is not None
    assert [m.type for m in messages] == ["human", "ai"]
    assert messages[0].content == "Ship build 42."
    (call,) = messages[1].tool_calls  # type: ignore[attr-defined]
    assert (call["name"], call["args"]) == ("deploy", {"env": "prod"})

    # Through the LangGraph Server API: values.messages as LangChain message dicts.
    registry = Registry([Registered("ship_chat", "test:ship_chat", task)])
    with AdminClient(create_app(runner, TOKENS, registry=registry)) as client:
        state = client.get(f"/threads/{thread}/state", headers=ALICE).json()
        shown = state["values"]["messages"]
        assert [m["type"] for m in shown] == ["human", "ai"]
        assert shown[0]["content"] == "Ship build 42."
        assert shown[1]["tool_calls"][0]["name"] == "deploy"
        assert shown[1]["tool_calls"][0]["args"] == {"env": "prod"}
        assert shown[1]["tool_calls"][0]["id"] == call["id"]
        # The pause it stopped at is the state's interrupt, about that same call.
        (intr,) = state["interrupts"]
        assert intr["value"]["tool_call_id"] == call["id"]
        # The thread object carries the same values (Agent Chat UI's thread list).
        got = client.get(f"/threads/{thread}", headers=ALICE).json()
        assert got["values"]["messages"] == shown

        runner.approve(thread, "release", by="ops", task=task)
        assert runner.status(thread).status == "completed"
        # Done: the step's answer is its result, and the conversation stays in the state
        # (read from the step's transcript), in the history too, with the same ids.
        done = client.get(f"/threads/{thread}/state", headers=ALICE).json()
        assert done["values"]["release"] == "shipped"
        after = done["values"]["messages"]
        assert [m["type"] for m in after] == ["human", "ai", "tool", "ai"]
        assert [m["id"] for m in after[:2]] == [m["id"] for m in shown]
        assert after[-1]["content"] == "shipped"  # the answer says it: no closing message
        history = client.post(f"/threads/{thread}/history", json={}, headers=ALICE).json()
        assert history[0]["values"]["messages"] == after
        assert all("messages" in h["values"] for h in history)


BIG = "x" * 20_000


def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"{topic}: {BIG}"


def _scalar(db_url: str, sql: str, params: tuple[Any, ...]) -> int:
    if db_url.startswith("sqlite:///"):
        with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
            return int(conn.execute(sql.format(p="?"), params).fetchone()[0])
    import psycopg

    with psycopg.connect(db_url, autocommit=True) as pg:
        row = pg.execute(sql.format(p="%s").replace("length(", "octet_length("), params).fetchone()  # type: ignore[arg-type]
        return int(row[0]) if row else 0


def test_the_conversation_is_not_stored_in_the_tasks_state(
    runner: Runner, llm: Any, db_url: str
) -> None:
    """Two agent steps each read a 20 KB tool result: the task's own checkpoints (namespace
    "") hold their answers, not their conversations, so they stay far below one of them."""
    step = [Reply.tool_calls([("lookup", {"topic": "t"})]), Reply.text("done")]
    llm(by_conversation({"first": step, "second": step}))
    task = LongTask(
        "two_agents",
        stages=[
            Stage("a", [agent_step("one", prompt="The first.", tools=[lookup])]),
            Stage("b", [agent_step("two", prompt="The second.", tools=[lookup])]),
        ],
    )
    thread = runner.start(task)
    assert runner.status(thread).status == "completed"
    root = _scalar(
        db_url,
        "SELECT coalesce(sum(length(value)), 0) FROM longtask_cp_values "
        "WHERE thread_id = {p} AND checkpoint_ns = ''",
        (thread,),
    )
    agents = _scalar(
        db_url,
        "SELECT coalesce(sum(length(value)), 0) FROM longtask_cp_values "
        "WHERE thread_id = {p} AND checkpoint_ns <> ''",
        (thread,),
    )
    assert agents > 2 * len(BIG)  # the agents' own checkpoints hold their conversations
    assert root < len(BIG)
    messages = _scalar(
        db_url,
        "SELECT count(*) FROM longtask_cp_values WHERE thread_id = {p} AND channel = 'messages' "
        "AND checkpoint_ns = ''",
        (thread,),
    )
    assert messages == 0


def _events(text: str) -> list[tuple[str, Any]]:
    """(event, data) of an SSE body."""
    out = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        out.append((lines["event"], json.loads(lines["data"])))
    return out


def test_the_messages_tuple_stream_yields_the_agents_messages(runner: Runner, llm: Any) -> None:
    llm(by_turn([Reply.tool_calls([("deploy", {"env": "prod"})]), Reply.text("shipped")]))
    task = ship_task()
    registry = Registry([Registered("ship_chat", "test:ship_chat", task)])
    modes = ["messages-tuple", "updates", "values"]
    with AdminClient(create_app(runner, TOKENS, registry=registry)) as client:
        thread = client.post("/threads", json={}, headers=ALICE).json()["thread_id"]
        body = {"assistant_id": "ship_chat", "input": {}, "stream_mode": modes}
        first = _events(
            client.post(f"/threads/{thread}/runs/stream", json=body, headers=ALICE).text
        )
        said = [data for event, data in first if event == "messages"]
        # The model's call token by token (its chunks), with the step's node; the prompt is
        # the input, not sent; the whole message is not said again after its tokens.
        assert len(said) > 1 and {m["type"] for m, _ in said} == {"AIMessageChunk"}, said
        assert {m["id"] for m, _ in said} == {said[0][0]["id"]}
        named = [c["name"] for m, _ in said for c in m["tool_call_chunks"] if c.get("name")]
        assert named == ["deploy"]
        assert {meta["langgraph_node"] for _, meta in said} == {"release"}
        assert {meta["thread_id"] for _, meta in said} == {thread}
        # The conversation is in `values` (what Agent Chat UI renders), never an update.
        values = [data for event, data in first if event == "values"]
        assert [m["type"] for m in values[-1]["messages"]] == ["human", "ai"]
        updates = [data for event, data in first if event == "updates"]
        assert not [u for u in updates if "messages" in u]
        assert any("__interrupt__" in u for u in updates)

        resume = {
            "assistant_id": "ship_chat",
            "command": {"resume": {"decisions": [{"type": "approve"}]}},
            "stream_mode": modes,
        }
        second = _events(
            client.post(f"/threads/{thread}/runs/stream", json=resume, headers=ALICE).text
        )
        said = [data[0] for event, data in second if event == "messages"]
        # The tool's result whole, then the answer's tokens; what the first run sent is not
        # sent again.
        assert (said[0]["type"], said[0]["content"]) == ("tool", "deployed to prod")
        assert {m["type"] for m in said[1:]} == {"AIMessageChunk"}
        assert "".join(m["content"] for m in said[1:]) == "shipped"
        assert runner.status(thread).status == "completed"


def test_agents_that_finish_between_two_reads_are_streamed(runner: Runner, llm: Any) -> None:
    """No pause: both agents may start and end between two reads of the stream; their
    messages come from their own checkpoints, found through their events."""
    step = [Reply.tool_calls([("deploy", {"env": "qa"})]), Reply.text("ok")]
    llm(by_conversation({"first": step, "second": step}))
    task = LongTask(
        "two_chats",
        stages=[
            Stage("a", [agent_step("one", prompt="The first.", tools=[deploy])]),
            Stage("b", [agent_step("two", prompt="The second.", tools=[deploy])]),
        ],
    )
    registry = Registry([Registered("two_chats", "test:two_chats", task)])
    with AdminClient(create_app(runner, TOKENS, registry=registry)) as client:
        thread = client.post("/threads", json={}, headers=ALICE).json()["thread_id"]
        body = {"assistant_id": "two_chats", "input": {}, "stream_mode": ["messages-tuple"]}
        parts = _events(
            client.post(f"/threads/{thread}/runs/stream", json=body, headers=ALICE).text
        )
        said = [
            (meta["langgraph_node"], m["type"], m["id"])
            for e, (m, meta) in ((e, d) for e, d in parts if e == "messages")
        ]
        # each model answer by its tokens (one message id each), each tool result whole
        messages = sorted(
            {(node, kind.replace("AIMessageChunk", "ai"), i) for node, kind, i in said}
        )
        assert sorted((n, t) for n, t, _ in messages) == sorted(
            [(n, t) for n in ("one", "two") for t in ("ai", "tool", "ai")]
        )
        assert runner.status(thread).status == "completed"
