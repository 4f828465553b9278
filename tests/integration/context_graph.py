"""A LangGraph graph written as LangGraph's current templates write one: settings in a
context schema (a dataclass with defaults) that its nodes read as ``runtime.context``, and
an ``interrupt()`` between a draft and its review. The review also reads the setting from
``config["configurable"]`` (the older templates' way). ``test_run_context.py`` runs it in
process; ``tests/acceptance/test_run_context_serve.py`` serves it, beside LangGraph's own
server."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import interrupt


@dataclass
class Settings:
    greeting: str = "hello"
    model: str = "small"


class State(TypedDict, total=False):
    topic: str
    draft: str
    final: str


def draft(state: State, runtime: Runtime[Settings]) -> State:
    settings = runtime.context
    return {"draft": f"{settings.greeting} {state['topic']} ({settings.model})"}


def review(state: State, config: RunnableConfig, runtime: Runtime[Settings]) -> State:
    answer = interrupt({"draft": state["draft"]})
    mirrored = (config.get("configurable") or {}).get("greeting")
    return {"final": f"{state['draft']} / {answer} / {runtime.context.greeting} / {mirrored}"}


builder = StateGraph(State, context_schema=Settings)
builder.add_node(draft)
builder.add_node(review)
builder.add_edge(START, "draft")
builder.add_edge("draft", "review")
builder.add_edge("review", END)
graph = builder.compile()
