"""The airline agents of ``airline_agent.py``, unchanged, served from a ``langgraph.json``
(``{"graphs": {"airline": "airline_served.py:graph", "airline_async":
"airline_served.py:async_graph"}}``) by ``longtask serve``: the graphs are the agent
module's own objects. A served graph has no ``graph_step(tools=...)``, so the marks of
``airline_task.MARKS`` go on the tools' metadata (``{"longtask": MARK}``), set here on the
agent's tool objects, outside the agent's code."""

from __future__ import annotations

import airline_agent
from airline_task import MARKS

for _tool in airline_agent.TOOLS:
    _tool.metadata = {**(_tool.metadata or {}), "longtask": MARKS[_tool.name]}

graph = airline_agent.graph
async_graph = airline_agent.async_graph
