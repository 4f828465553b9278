"""LangGraph's async API on a longtask graph, on both backends: astream with subgraphs,
astream_events, aget_state, aget_state_history and aupdate_state all go through the
saver's async methods."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from fakes import FakeOpenAI, Reply

from longtask import LongTask, Runner, Stage, function_step
from longtask.model import Prompt, agent_step
from longtask.steps import INPUTS_CHANNEL


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    def add(request: Any) -> Reply:
        # every conversation: one tool call, then the answer
        if any(m.get("role") == "tool" for m in request.messages):
            return Reply.text("The sum is 5")
        return Reply.tool_calls([("add", {"a": 2, "b": 3})])

    with FakeOpenAI(add) as fake:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        yield fake


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


TASK = LongTask(
    "async_compat",
    stages=[
        Stage(
            "one",
            [function_step(lambda c: 1, name="a"), function_step(lambda c: 2, name="b")],
        ),
        Stage(
            "think",
            [agent_step("adder", prompt=Prompt(name="p", template="Add 2 and 3."), tools=[add])],
        ),
        Stage("two", [function_step(lambda c: c.result("a") + c.result("b"), name="c")]),
    ],
)


def cfg(thread_id: str) -> Any:
    return {"configurable": {"thread_id": thread_id}}


def test_async_api_of_the_graph(runner: Runner, server: FakeOpenAI) -> None:
    graph = runner.graph(TASK)

    async def scenario() -> dict[str, Any]:
        seen_ns: set[tuple[str, ...]] = set()
        async for ns, _chunk in graph.astream(
            {INPUTS_CHANNEL: None}, cfg("t-astream"), subgraphs=True, stream_mode="updates"
        ):
            seen_ns.add(ns)
        state = await graph.aget_state(cfg("t-astream"))
        history = [s async for s in graph.aget_state_history(cfg("t-astream"))]
        names: list[str] = []
        async for event in graph.astream_events(
            {INPUTS_CHANNEL: None}, cfg("t-events"), version="v2"
        ):
            names.append(f"{event['event']}:{event['name']}")
        await graph.aupdate_state(cfg("t-astream"), {"out.c": runner.codec.encode(30)}, as_node="c")
        updated = await graph.aget_state(cfg("t-astream"))
        return {
            "ns": seen_ns,
            "state": state,
            "history": history,
            "names": names,
            "updated": updated,
        }

    out = asyncio.run(scenario())
    # the agent ran as a subgraph of its node, and its updates came through the stream
    assert () in out["ns"]
    assert any(ns and ns[0].startswith("adder:") for ns in out["ns"]), out["ns"]
    state = out["state"]
    assert state.next == ()
    assert runner.codec.decode(state.values["out.c"]) == 3
    assert runner.codec.decode(state.values["out.adder"]) == "The sum is 5"
    # async history is the sync history, checkpoint for checkpoint
    sync_history = list(graph.get_state_history(cfg("t-astream")))
    assert [s.config["configurable"]["checkpoint_id"] for s in out["history"]] == [
        s.config["configurable"]["checkpoint_id"] for s in sync_history[1:]
    ]
    assert "on_chain_start:a" in out["names"] and "on_chain_end:c" in out["names"]
    assert "on_chat_model_end:ChatOpenAI" in out["names"]
    # aupdate_state stored a new checkpoint that the sync API reads back
    assert runner.codec.decode(out["updated"].values["out.c"]) == 30
    assert graph.get_state(cfg("t-astream")).values["out.c"] == out["updated"].values["out.c"]
    assert server.request_count() == 4
