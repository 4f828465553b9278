"""The tasks of ``test_graph_refused.py``, loaded by file reference (the CLI loads them
too): graph steps whose graphs raise on an answer their interrupt() was given, unchanged
LangGraph code that reads a field of the answer.

- ``task``: one node asks how big, and doubles ``answer["size"]`` (an answer without it
  raises ``TypeError`` or ``KeyError`` in the node).
- ``nested``: a node asks which environment, then runs a graph of its own (invoked inside
  the node, as a deep agent's ``task`` tool runs its sub-agent) whose node asks how big and
  reads the answer the same way: the task that asked is in a namespace below the node's,
  and the node's own task holds an answer too (to its first question).
- ``late``: the asking node keeps the answer as it is and returns; the node after it
  raises on it. The answer was taken (it is in the graph's state): the step fails as on
  any error.

Each run of an asking node appends a line to ``$LT_REFUSED_LOG`` (``ask``, then ``took
VALUE`` once interrupt() returned)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from typing_extensions import TypedDict

from longtask import LongTask, Stage, graph_step


def _log(line: str) -> None:
    with Path(os.environ["LT_REFUSED_LOG"]).open("a") as f:
        f.write(line + "\n")


class State(TypedDict, total=False):
    env: str
    size: int


def ask(state: State) -> dict[str, Any]:
    _log("ask")
    answer = interrupt({"question": "How big?"})
    _log(f"took {json.dumps(answer)}")
    return {"size": answer["size"] * 2}


def _graph() -> Any:
    builder = StateGraph(State)
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", END)
    return builder


sizes = _graph().compile()


def plan(state: State) -> dict[str, Any]:
    env = interrupt({"question": "Which environment?"})
    done = sizes.invoke({"env": env})
    return {"env": env, "size": done["size"]}


def _nested() -> Any:
    builder = StateGraph(State)
    builder.add_node("plan", plan)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", END)
    return builder


def keep(state: State) -> dict[str, Any]:
    answer = interrupt({"question": "How big?"})
    return {"size": answer}


def double(state: State) -> dict[str, Any]:
    return {"size": state["size"]["size"] * 2}  # type: ignore[index]


def _late() -> Any:
    builder = StateGraph(State)
    builder.add_node("keep", keep)
    builder.add_node("double", double)
    builder.add_edge(START, "keep")
    builder.add_edge("keep", "double")
    builder.add_edge("double", END)
    return builder


#: served from a langgraph.json by the Server API's test
graph = _graph().compile()

task = LongTask(
    name="refused",
    stages=[Stage("s", [graph_step("pick", _graph(), input=lambda ctx: {})])],
)
nested = LongTask(
    name="refused-nested",
    stages=[Stage("s", [graph_step("plan", _nested(), input=lambda ctx: {})])],
)
late = LongTask(
    name="refused-late",
    stages=[Stage("s", [graph_step("pick", _late(), input=lambda ctx: {})])],
)
