"""A plain LangGraph chat graph for ``test_served_shape.py`` (served from a langgraph.json):
it answers each human message by repeating it, on ``MessagesState``, with a context schema
and a name of its own, as a template's graph has."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage
from langgraph.graph import END, START, MessagesState, StateGraph


@dataclass
class Context:
    tone: str = "plain"


def answer(state: MessagesState) -> dict[str, Any]:
    said = state["messages"][-1].content
    return {"messages": [AIMessage(content=f"you said: {said}")]}


builder = StateGraph(MessagesState, context_schema=Context)
builder.add_node("answer", answer)
builder.add_edge(START, "answer")
builder.add_edge("answer", END)
graph = builder.compile(name="Echo Agent")
