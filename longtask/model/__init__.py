"""The domain model: LongTask, Stage, step kinds and policies. Never imports LangGraph."""

from longtask.model._steps import (
    FunctionStep,
    MapStep,
    Retry,
    Stage,
    Step,
    function_step,
    map_step,
)
from longtask.model._task import LongTask, StepInfo, name_problem

__all__ = [
    "FunctionStep",
    "LongTask",
    "MapStep",
    "Retry",
    "Stage",
    "Step",
    "StepInfo",
    "function_step",
    "map_step",
    "name_problem",
]
