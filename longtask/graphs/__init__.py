"""The compiler: a LongTask becomes a LangGraph StateGraph whose nodes run the steps'
callables, with the checks on ``update_state`` and the agents' conversations read back from
their checkpoints. Above ``steps``: it imports only ``longtask.steps``, ``longtask.model``,
``longtask.store``, ``longtask.errors`` and third-party libraries (LangGraph, LangChain);
the runtime above it compiles and runs the graphs.
"""

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
