"""A graph step's LangChain messages are the thread's conversation in the LangGraph Server API
(issue 40: "visible live as the thread's messages"), as an agent step's are, on every
backend: streamed as ``messages-tuple`` parts as its nodes write them, read live from the
graph's own checkpoint while it waits at its ``interrupt()``, and from the step's transcript
once it is done. A graph without messages adds none (its updates stay as they were)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, AnyMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import interrupt
from starlette.testclient import TestClient
from typing_extensions import TypedDict

from longtask import LongTask, Runner, Stage, function_step, graph_step
from longtask.serve import create_app
from longtask.serve._registry import load_registry

ALICE = {"X-Api-Key": "tok-alice"}


class Chat(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]


def write(state: Chat) -> Chat:
    return {"messages": [AIMessage("Here is a draft.", id="m-draft")]}


def review(state: Chat) -> Chat:
    answer = interrupt({"question": "send it?"})
    return {"messages": [AIMessage(f"Sent ({answer}).", id="m-sent")]}


def _chat_graph() -> Any:
    builder: StateGraph[Any, Any, Any, Any] = StateGraph(Chat)
    builder.add_node("write", write)
    builder.add_node("review", review)
    builder.add_edge(START, "write")
    builder.add_edge("write", "review")
    builder.add_edge("review", END)
    return builder.compile()


class Count(TypedDict, total=False):
    n: int


def _count_graph() -> Any:
    builder: StateGraph[Any, Any, Any, Any] = StateGraph(Count)
    builder.add_node("bump", lambda state: {"n": state.get("n", 0) + 1})
    builder.add_edge(START, "bump")
    builder.add_edge("bump", END)
    return builder.compile()


CHATTY = LongTask(
    "chatty",
    stages=[
        Stage(
            "s",
            [
                graph_step("count", _count_graph(), input=lambda ctx: {"n": 1}),
                graph_step("letter", _chat_graph(), input=lambda ctx: {"messages": []}),
            ],
        ),
        Stage("filing", [function_step(lambda ctx: "filed", name="file", after="letter")]),
    ],
)


@pytest.fixture
def client(runner: Runner) -> Iterator[TestClient]:
    app = create_app(
        runner,
        {"tok-alice": "alice"},
        registry=load_registry(["test_graph_messages_api:CHATTY"]),
        schedule_poll=None,
        poll=0.02,
    )
    with TestClient(app) as c:
        yield c


def _events(text: str) -> list[tuple[str, Any]]:
    out = []
    for block in text.split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in lines and "data" in lines:
            out.append((lines["event"], json.loads(lines["data"])))
    return out


def _said(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(m["type"], m["content"]) for m in messages]


def test_a_graph_steps_messages_are_the_threads_conversation(
    client: TestClient, runner: Runner
) -> None:
    thread = client.post("/threads", json={}, headers=ALICE).json()["thread_id"]
    streamed = client.post(
        f"/threads/{thread}/runs/stream",
        json={
            "assistant_id": "chatty",
            "input": {},
            "stream_mode": ["messages-tuple", "updates"],
        },
        headers=ALICE,
    )
    assert streamed.status_code == 200, streamed.text
    events = _events(streamed.text)
    said = [
        (data[0]["content"], data[1]["langgraph_node"]) for e, data in events if e == "messages"
    ]
    assert said == [("Here is a draft.", "letter")]
    updates = [data for e, data in events if e == "updates"]
    # a graph without messages: its update names its result only
    assert {"count": {"count": {"n": 2}}} in updates

    # waiting at the graph's interrupt(): its messages so far, read from its checkpoint
    state = client.get(f"/threads/{thread}/state", headers=ALICE).json()
    assert _said(state["values"]["messages"]) == [("ai", "Here is a draft.")]

    answered = client.post(
        f"/threads/{thread}/runs/wait",
        json={"assistant_id": "chatty", "command": {"resume": "yes"}},
        headers=ALICE,
    )
    assert answered.status_code == 200, answered.text
    state = client.get(f"/threads/{thread}/state", headers=ALICE).json()
    # done: the step's transcript, then the task's closing message (its last result)
    assert _said(state["values"]["messages"]) == [
        ("ai", "Here is a draft."),
        ("ai", "Sent (yes)."),
        ("ai", "filed"),
    ]
    assert [m["data"]["content"] for m in runner.transcript(thread, "letter")] == [
        "Here is a draft.",
        "Sent (yes).",
    ]
