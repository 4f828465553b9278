"""The airline agent with coroutine tools (``airline_agent.async_graph``), unchanged, served
from a ``langgraph.json`` whose entry names no marks: here its tools carry their own, in
their metadata (``{"longtask": MARK}``, the marks of ``airline_task.MARKS``), set on the
agent's tool objects outside the agent's code. (The crash harness serves the other agent,
``airline_agent.py:graph``, with its marks in the ``langgraph.json`` entry's ``"tools"``.)"""

from __future__ import annotations

import airline_agent
from airline_task import MARKS

for _tool in (airline_agent.alookup, airline_agent.abook_flight, airline_agent.acancel_booking):
    _tool.metadata = {**(_tool.metadata or {}), "longtask": MARKS[_tool.name]}

async_graph = airline_agent.async_graph
