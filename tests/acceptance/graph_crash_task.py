"""A LongTask with a graph step over a 5-node LangGraph graph, for the SIGKILL test
(test_graph_crash.py): every node records its begin and end in the outside counter and
takes a little time, so a kill from outside lands inside nodes, between them, and in
checkpoint writes."""

from __future__ import annotations

import itertools
import operator
import os
import time
from typing import Annotated, Any

import counter
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from longtask import LongTask, Stage, function_step, graph_step

NODES = [f"n{i}" for i in range(1, 6)]


class State(TypedDict, total=False):
    total: int
    trail: Annotated[list[str], operator.add]


def _node(i: int) -> Any:
    name = f"n{i}"

    def body(state: State, config: RunnableConfig) -> dict[str, Any]:
        thread = (config.get("configurable") or {})["thread_id"]
        counter.record(f"{thread}:{name}:begin")
        time.sleep(float(os.environ.get("LT_NODE_SLEEP", "0.08")))
        counter.record(f"{thread}:{name}:end")
        return {"total": state.get("total", 0) + i * 10, "trail": [name]}

    body.__name__ = name
    return body


builder = StateGraph(State)
for i, node in enumerate(NODES, 1):
    builder.add_node(node, _node(i))
builder.add_edge(START, NODES[0])
for a, b in itertools.pairwise(NODES):
    builder.add_edge(a, b)
builder.add_edge(NODES[-1], END)


def _seed(ctx: Any) -> int:
    return int(ctx.inputs["start"])


task = LongTask(
    name="graph-crash",
    stages=[
        Stage("prepare", [function_step(_seed, name="seed")]),
        Stage(
            "work",
            [
                graph_step(
                    "five",
                    builder,
                    input=lambda ctx: {"total": ctx.result("seed")},
                )
            ],
        ),
    ],
)
