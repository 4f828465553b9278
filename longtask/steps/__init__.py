"""Node runtime per step kind, and the StepContext handed to step functions."""

from longtask.steps._context import INPUTS_CHANNEL, ItemContext, StepContext, result_channel
from longtask.steps._function import RUN_KEY, STEP_ATTR, NodeCall, StepEnv, function_node
from longtask.steps._map import dispatch_node_name, item_node_name, map_channel, map_nodes

__all__ = [
    "INPUTS_CHANNEL",
    "RUN_KEY",
    "STEP_ATTR",
    "ItemContext",
    "NodeCall",
    "StepContext",
    "StepEnv",
    "dispatch_node_name",
    "function_node",
    "item_node_name",
    "map_channel",
    "map_nodes",
    "result_channel",
]
