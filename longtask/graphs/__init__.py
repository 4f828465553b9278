"""The compiler: LongTask -> LangGraph StateGraph."""

from longtask.graphs._compile import build_graph, entry_node, state_schema
from longtask.graphs._messages import agent_messages

__all__ = ["agent_messages", "build_graph", "entry_node", "state_schema"]
