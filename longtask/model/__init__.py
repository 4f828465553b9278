"""The domain model: LongTask, Stage, step kinds and policies. Never imports LangGraph."""

from longtask.model._steps import FunctionStep, Retry, Stage, Step, function_step
from longtask.model._task import LongTask, StepInfo, name_problem

__all__ = [
    "FunctionStep",
    "LongTask",
    "Retry",
    "Stage",
    "Step",
    "StepInfo",
    "function_step",
    "name_problem",
]
