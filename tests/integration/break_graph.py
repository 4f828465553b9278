"""A plain LangGraph graph of three nodes in a line (``a`` → ``b`` → ``c``, each noting its
name), for ``test_served_breaks.py``: where a run's ``interrupt_before`` /
``interrupt_after`` stop it is seen in its state."""

from __future__ import annotations

import operator
from typing import Annotated, Any

from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict


class Line(TypedDict, total=False):
    seen: Annotated[list[str], operator.add]


def _node(name: str) -> Any:
    def node(state: Line) -> dict[str, Any]:
        return {"seen": [name]}

    return node


builder = StateGraph(Line)
for name in ("a", "b", "c"):
    builder.add_node(name, _node(name))
builder.add_edge(START, "a")
builder.add_edge("a", "b")
builder.add_edge("b", "c")
builder.add_edge("c", END)
graph = builder.compile()
