"""The compiler: LongTask -> LangGraph StateGraph."""

from longtask.graphs._checked import UpdateCheck, install_update_check, pause_write, rewriting
from longtask.graphs._compile import build_graph, compile_graph, entry_node, state_schema
from longtask.graphs._messages import agent_conversation, agent_messages, read_agent_messages

__all__ = [
    "UpdateCheck",
    "agent_conversation",
    "agent_messages",
    "build_graph",
    "compile_graph",
    "entry_node",
    "install_update_check",
    "pause_write",
    "read_agent_messages",
    "rewriting",
    "state_schema",
]
