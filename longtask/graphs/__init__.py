"""The compiler: LongTask -> LangGraph StateGraph."""

from longtask.graphs._compile import build_graph, state_schema

__all__ = ["build_graph", "state_schema"]
