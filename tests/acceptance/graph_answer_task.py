"""A graph step whose graph asks a person with ``interrupt()`` and then, in the same node,
calls a tool with the answer, for test_graph_answer_kill.py (the task, through the CLI) and
test_graph_answer_serve_kill.py (the graph, served from a langgraph.json). In the first
process that runs it with the answer, the tool SIGKILLs the process: the answer was
accepted, and nothing of the node that took it was stored."""

from __future__ import annotations

import os
import signal
from typing import Any

import counter
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from typing_extensions import TypedDict

from longtask import LongTask, Stage, graph_step


class State(TypedDict, total=False):
    answer: str


def ask(state: State) -> dict[str, Any]:
    counter.record("ask")
    answer = interrupt({"question": "Which colour?"})
    counter.record(f"tool:{answer}")
    marker = os.environ["LT_CRASH_MARKER"]
    if not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    return {"answer": answer}


builder = StateGraph(State)
builder.add_node("ask", ask)
builder.add_edge(START, "ask")
builder.add_edge("ask", END)
graph = builder.compile()

task = LongTask(
    name="graph-answer",
    stages=[Stage("s", [graph_step("pick", builder, input=lambda ctx: {})])],
)
