"""The compiler: a LongTask becomes a LangGraph StateGraph whose nodes run the steps'
callables, and the agents' conversations read back from their checkpoints (the checks on
``update_state`` are the run core's gate, ``longtask.runtime._gate``). Above ``steps``: it
imports only ``longtask.steps``, ``longtask.model``,
``longtask.store``, ``longtask.errors`` and third-party libraries (LangGraph, LangChain);
the runtime above it compiles and runs the graphs.
"""

from longtask.graphs._compile import build_graph, compile_graph, entry_node, state_schema
from longtask.graphs._messages import agent_conversation, agent_messages, read_agent_messages

__all__ = [
    "agent_conversation",
    "agent_messages",
    "build_graph",
    "compile_graph",
    "entry_node",
    "read_agent_messages",
    "state_schema",
]
