"""A plain LangGraph graph for ``test_prune_kinds.py`` (served from a langgraph.json):
each run echoes the last thing said, on state that accumulates across turns."""

from __future__ import annotations

import operator
from typing import Annotated, Any

from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict  # pydantic describes it on Python < 3.12


class Said(TypedDict):
    said: Annotated[list[str], operator.add]


def echo(state: Said) -> dict[str, Any]:
    return {"said": [f"echo {state['said'][-1]}"]}


builder = StateGraph(Said)
builder.add_node("echo", echo)
builder.add_edge(START, "echo")
builder.add_edge("echo", END)
graph = builder.compile()
