"""What a graph node runs for each step kind (function, map, agent, graph, sub-task, approval,
wait), what they share (the compiled task's StepEnv, attempts and retries, effects, tracing) and the
StepContext handed to step functions. Beside ``checkpointers``, above ``model`` and
``store``: it imports only ``longtask.model``, ``longtask.store``, ``longtask.errors`` and
third-party libraries (LangGraph, LangChain, OpenTelemetry); it neither opens databases nor
builds graphs.
"""

from longtask.steps._agent import agent_node, fix_agent_node, fix_channel
from longtask.steps._breaks import breaking, run_breaks
from longtask.steps._call import RUN_KEY, NodeCall
from longtask.steps._classify import Classified, classify
from longtask.steps._context import (
    CONTEXT_CHANNEL,
    INPUTS_CHANNEL,
    ItemContext,
    StepContext,
    current_context,
    result_channel,
)
from longtask.steps._effects import EffectCall, idempotency_key
from longtask.steps._function import STEP_ATTR, StepEnv, function_node
from longtask.steps._graph import INTERRUPT_KIND, graph_node, resolve_graph
from longtask.steps._ledgered import ledgered
from longtask.steps._map import map_node
from longtask.steps._pause import (
    TIMEOUT,
    PauseOutcome,
    ask_node_name,
    check_decision,
    check_payload,
    pause_nodes,
    request_channel,
    request_node_name,
)
from longtask.steps._siblings import settled
from longtask.steps._subtask import ChildThreads, subtask_node

__all__ = [
    "CONTEXT_CHANNEL",
    "INPUTS_CHANNEL",
    "INTERRUPT_KIND",
    "RUN_KEY",
    "STEP_ATTR",
    "TIMEOUT",
    "ChildThreads",
    "Classified",
    "EffectCall",
    "ItemContext",
    "NodeCall",
    "PauseOutcome",
    "StepContext",
    "StepEnv",
    "agent_node",
    "ask_node_name",
    "breaking",
    "check_decision",
    "check_payload",
    "classify",
    "current_context",
    "fix_agent_node",
    "fix_channel",
    "function_node",
    "graph_node",
    "idempotency_key",
    "ledgered",
    "map_node",
    "pause_nodes",
    "request_channel",
    "request_node_name",
    "resolve_graph",
    "result_channel",
    "run_breaks",
    "settled",
    "subtask_node",
]
