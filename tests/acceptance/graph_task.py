"""A LongTask with two graph steps that pause (test_graph_cli.py, the Server API test):
``asks`` calls ``interrupt()`` inside its graph, ``stops`` was compiled with
``interrupt_before=["tools"]``. Loaded by file reference by ``longtask run`` and ``serve``."""

from __future__ import annotations

import operator
from typing import Annotated, Any

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from typing_extensions import TypedDict

from longtask import LongTask, Stage, graph_step


class State(TypedDict, total=False):
    n: int
    trail: Annotated[list[str], operator.add]


def _step(name: str, k: int) -> Any:
    def node(state: State) -> dict[str, Any]:
        return {"n": state.get("n", 0) + k, "trail": [name]}

    node.__name__ = name
    return node


def ask(state: State) -> dict[str, Any]:
    answer = interrupt({"question": "how much to add?", "n": state["n"]})
    return {"n": state["n"] + int(answer["add"]), "trail": ["ask"]}


asking = StateGraph(State)
asking.add_node("first", _step("first", 1))
asking.add_node("ask", ask)
asking.add_edge(START, "first")
asking.add_edge("first", "ask")
asking.add_edge("ask", END)

stopping = StateGraph(State)
stopping.add_node("plan", _step("plan", 1))
stopping.add_node("tools", _step("tools", 10))
stopping.add_edge(START, "plan")
stopping.add_edge("plan", "tools")
stopping.add_edge("tools", END)

GRAPH_PAUSE = LongTask(
    name="lg_graph_pause",
    stages=[
        Stage(
            "s",
            [
                graph_step("asks", asking, input=lambda ctx: {"n": 0}),
                graph_step(
                    "stops",
                    stopping.compile(interrupt_before=["tools"]),
                    input=lambda ctx: {"n": 0},
                    output=lambda state: state["n"],
                ),
            ],
        )
    ],
)
