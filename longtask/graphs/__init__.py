"""The compiler: LongTask -> LangGraph StateGraph."""

from longtask.graphs._compile import build_graph, entry_node, state_schema

__all__ = ["build_graph", "entry_node", "state_schema"]
