"""A plain LangGraph graph as a LongTask: one stage, one graph step running the graph.

What ``longtask serve --config langgraph.json``, ``run``, ``submit`` and ``worker`` make of a
reference that names a LangGraph graph (compiled, a ``StateGraph`` builder, or a factory
taking the run's config) rather than a LongTask: the graph's threads are longtask threads
(durable, carried by workers, recovered after a crash) without the app changing a line. It is
a LongTask like any other (one engine); the Server API knows it by its class and shows the
graph's own state rather than longtask's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import PrivateAttr

from longtask.model._graph import GraphStep, graph_step
from longtask.model._steps import Stage
from longtask.model._task import LongTask, name_problem

__all__ = ["GraphApp", "graph_app", "step_name_for"]


class GraphApp(LongTask):
    """The one-step LongTask around a plain LangGraph graph (see ``graph_app``)."""

    #: the reference the graph was loaded by (``runtime.load_task``), which its threads
    #: record so another process (a worker, a later ``run_again``) loads it again: the
    #: graph's module has no attribute holding this task
    _ref: str | None = PrivateAttr(default=None)

    @property
    def graph_step(self) -> GraphStep:
        step = self.stages[0].steps[0]
        assert isinstance(step, GraphStep)
        return step


def step_name_for(graph_id: str) -> str:
    """The step name a graph id gives: lowercase, other characters as ``_``, a letter first
    (a step name is a graph node and a checkpoint key)."""
    name = re.sub(r"[^a-z0-9_]", "_", graph_id.lower())[:63] or "graph"
    if name_problem("step", name) is not None:
        name = f"g_{name}"[:63]
    return name


def graph_app(
    name: str, graph: Any, *, description: str = "", tools: Mapping[str, Any] | None = None
) -> GraphApp:
    """``graph`` served as the LongTask ``name``: one stage and one graph step (named after
    ``name``), whose input is the run's input and whose result is the graph's final state.
    ``tools``: how its tools' cut-off calls are settled (``graph_step``'s ``tools=``)."""
    step = step_name_for(name)
    # The graph's state is the thread's: a new input on a finished thread continues it,
    # as on LangGraph's server (``Runner.run_again``).
    inner = graph_step(step, graph, tools=tools).model_copy(update={"keeps_state": True})
    return GraphApp(
        name=name,
        stages=(Stage(step, [inner]),),
        description=description or f"the LangGraph graph {name!r}",
    )
