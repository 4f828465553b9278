"""A plain LangGraph graph with a subgraph, a ``custom`` stream writer and an
``interrupt()``, for ``test_served_subgraphs.py``: ``outer`` calls the ``inner`` subgraph
(whose ``bump`` writes a custom event and a count, and whose ``check`` waits for a person),
then ``ask`` waits for a person."""

from __future__ import annotations

from typing import Any

from langgraph.config import get_stream_writer
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from typing_extensions import TypedDict


class State(TypedDict, total=False):
    n: int
    answer: str


def bump(state: State) -> dict[str, Any]:
    get_stream_writer()({"progress": "inner bumped", "n": state.get("n", 0) + 1})
    return {"n": state.get("n", 0) + 1}


def check(state: State) -> dict[str, Any]:
    said = interrupt({"question": "inner ok?", "n": state.get("n")})
    return {"answer": f"inner: {said}"}


inner_builder = StateGraph(State)
inner_builder.add_node("bump", bump)
inner_builder.add_node("check", check)
inner_builder.add_edge(START, "bump")
inner_builder.add_edge("bump", "check")
inner_builder.add_edge("check", END)
inner = inner_builder.compile()


def start(state: State) -> dict[str, Any]:
    get_stream_writer()({"progress": "started"})
    return {"n": state.get("n", 0)}


def ask(state: State) -> dict[str, Any]:
    said = interrupt({"question": "go on?", "n": state.get("n")})
    return {"answer": str(said)}


builder = StateGraph(State)
builder.add_node("start", start)
builder.add_node("inner", inner)
builder.add_node("ask", ask)
builder.add_edge(START, "start")
builder.add_edge("start", "inner")
builder.add_edge("inner", "ask")
builder.add_edge("ask", END)
graph = builder.compile(name="Sub Agent")
