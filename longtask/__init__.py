"""longtask: a durable orchestrator for long, multi-stage agent work, built on LangGraph.

Define a :class:`LongTask` of stages and steps, run it with a :class:`Runner`, and resume it
after a crash, a restart or a long pause without repeating finished steps.

The root of the house: these public names (imported on first use), and the Runner façade
(``_runner.py``) composed of the run core's parts (``runtime``) and the operations'
(``ops``). It may import every room but serve, demo and cli, which stand on it; see
docs/architecture.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from longtask._lazy import lazy_names
from longtask._version import __version__
from longtask.errors import (
    BadAnswer,
    DatabaseError,
    DefinitionChanged,
    DefinitionError,
    ExportFileInvalid,
    ExportFormatTooNew,
    ImportThreadExists,
    InvalidInput,
    LongTaskError,
    MigrationRefused,
    MoveRefused,
    NothingToResume,
    OutcomeUnknown,
    PermissionDenied,
    RateLimited,
    ResultNotAvailable,
    SchemaVersionError,
    StepFailed,
    StepTimeout,
    TaskRefError,
    ThreadBusy,
    ThreadExists,
    ThreadNotFound,
    Transient,
)

if TYPE_CHECKING:
    from langgraph.types import Command

    from longtask._runner import Runner
    from longtask.model import (
        AgentStep,
        Budget,
        Decision,
        GraphStep,
        LongTask,
        Notify,
        Prompt,
        Retry,
        Schedule,
        Stage,
        SubtaskStep,
        TaskVersions,
        ToolApproval,
        agent_step,
        approval,
        fix_with,
        function_step,
        graph_step,
        map_step,
        subtask_step,
        versions,
        wait_for,
    )
    from longtask.ops import MoveSummary, PruneReport, draw_graph
    from longtask.runtime import ThreadStatus, ThreadUsage
    from longtask.steps import (
        Classified,
        EffectCall,
        ItemContext,
        StepContext,
        classify,
        current_context,
        idempotency_key,
        ledgered,
    )


# The runtime pulls in LangGraph and the model pydantic; keep `import longtask` (and so every
# CLI command, whose package this is) light by importing them on first use.
_MODEL = (
    "AgentStep",
    "Budget",
    "Decision",
    "GraphStep",
    "LongTask",
    "Notify",
    "Prompt",
    "Retry",
    "Schedule",
    "Stage",
    "SubtaskStep",
    "TaskVersions",
    "ToolApproval",
    "agent_step",
    "approval",
    "fix_with",
    "function_step",
    "graph_step",
    "map_step",
    "subtask_step",
    "versions",
    "wait_for",
)
_LAZY = {
    **dict.fromkeys(_MODEL, "longtask.model"),
    "Runner": "longtask._runner",
    "PruneReport": "longtask.ops",
    "ThreadStatus": "longtask.runtime",
    "MoveSummary": "longtask.ops",
    "ThreadUsage": "longtask.runtime",
    "StepContext": "longtask.steps",
    "ItemContext": "longtask.steps",
    "classify": "longtask.steps",
    "current_context": "longtask.steps",
    "ledgered": "longtask.steps",
    "idempotency_key": "longtask.steps",
    "EffectCall": "longtask.steps",
    "Classified": "longtask.steps",
    "Command": "langgraph.types",
    "draw_graph": "longtask.ops",
}


__getattr__ = lazy_names("longtask", _LAZY)


__all__ = [
    "AgentStep",
    "BadAnswer",
    "Budget",
    "Classified",
    "Command",
    "DatabaseError",
    "Decision",
    "DefinitionChanged",
    "DefinitionError",
    "EffectCall",
    "ExportFileInvalid",
    "ExportFormatTooNew",
    "GraphStep",
    "ImportThreadExists",
    "InvalidInput",
    "ItemContext",
    "LongTask",
    "LongTaskError",
    "MigrationRefused",
    "MoveRefused",
    "MoveSummary",
    "NothingToResume",
    "Notify",
    "OutcomeUnknown",
    "PermissionDenied",
    "Prompt",
    "PruneReport",
    "RateLimited",
    "ResultNotAvailable",
    "Retry",
    "Runner",
    "Schedule",
    "SchemaVersionError",
    "Stage",
    "StepContext",
    "StepFailed",
    "StepTimeout",
    "SubtaskStep",
    "TaskRefError",
    "TaskVersions",
    "ThreadBusy",
    "ThreadExists",
    "ThreadNotFound",
    "ThreadStatus",
    "ThreadUsage",
    "ToolApproval",
    "Transient",
    "__version__",
    "agent_step",
    "approval",
    "classify",
    "current_context",
    "draw_graph",
    "fix_with",
    "function_step",
    "graph_step",
    "idempotency_key",
    "ledgered",
    "map_step",
    "subtask_step",
    "versions",
    "wait_for",
]
