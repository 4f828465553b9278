"""React Agent, as LangChain's template writes it since LangGraph 0.6: async nodes, settings in
a context schema read as ``runtime.context``, tools that are coroutines. What it shares with
``react_agent`` (state, prompt, routing, the tests' notes) it imports from there."""

from async_agent.graph import graph

__all__ = ["graph"]
