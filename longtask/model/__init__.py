"""The domain model: LongTask, Stage, step kinds and policies. Never imports LangGraph."""

from longtask.model._decision import ApprovalRequest, Decision, WaitRequest
from longtask.model._steps import (
    ApprovalStep,
    Budget,
    FunctionStep,
    MapStep,
    PauseStep,
    Retry,
    Stage,
    Step,
    WaitStep,
    approval,
    function_step,
    map_step,
    wait_for,
)
from longtask.model._task import LongTask, StepInfo, name_problem

__all__ = [
    "ApprovalRequest",
    "ApprovalStep",
    "Budget",
    "Decision",
    "FunctionStep",
    "LongTask",
    "MapStep",
    "PauseStep",
    "Retry",
    "Stage",
    "Step",
    "StepInfo",
    "WaitRequest",
    "WaitStep",
    "approval",
    "function_step",
    "map_step",
    "name_problem",
    "wait_for",
]
