"""Node runtime per step kind, and the StepContext handed to step functions."""

from longtask.steps._context import INPUTS_CHANNEL, StepContext, result_channel
from longtask.steps._function import RUN_KEY, STEP_ATTR, NodeCall, StepEnv, function_node

__all__ = [
    "INPUTS_CHANNEL",
    "RUN_KEY",
    "STEP_ATTR",
    "NodeCall",
    "StepContext",
    "StepEnv",
    "function_node",
    "result_channel",
]
