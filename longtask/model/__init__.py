"""The domain model: LongTask, its stages and step kinds, their policies (retry, budget),
schedules and versions, as pure data with the checks of a definition. Beside ``store``, on
the floor above ``errors``: it imports only ``longtask.errors`` and third-party libraries
(pydantic, croniter), never LangGraph, so a task is defined, checked and hashed without it.
"""

from longtask.model._agent import AgentStep, FixLoop, Prompt, ToolApproval, agent_step, fix_with
from longtask.model._decision import ApprovalRequest, Decision, WaitRequest
from longtask.model._graph import GraphStep, graph_kind, graph_step, takes_context
from longtask.model._notify import NOTIFY_KINDS, Notify
from longtask.model._plain import GraphApp, graph_app
from longtask.model._schedule import Schedule
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
from longtask.model._subtask import SubtaskStep, child_thread_id, subtask_step
from longtask.model._task import LongTask, StepInfo, name_problem
from longtask.model._versions import TaskVersions, version_key, versions

__all__ = [
    "NOTIFY_KINDS",
    "AgentStep",
    "ApprovalRequest",
    "ApprovalStep",
    "Budget",
    "Decision",
    "FixLoop",
    "FunctionStep",
    "GraphApp",
    "GraphStep",
    "LongTask",
    "MapStep",
    "Notify",
    "PauseStep",
    "Prompt",
    "Retry",
    "Schedule",
    "Stage",
    "Step",
    "StepInfo",
    "SubtaskStep",
    "TaskVersions",
    "ToolApproval",
    "WaitRequest",
    "WaitStep",
    "agent_step",
    "approval",
    "child_thread_id",
    "fix_with",
    "function_step",
    "graph_app",
    "graph_kind",
    "graph_step",
    "map_step",
    "name_problem",
    "subtask_step",
    "takes_context",
    "version_key",
    "versions",
    "wait_for",
]
