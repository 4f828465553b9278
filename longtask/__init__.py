"""longtask: a durable orchestrator for long, multi-stage agent work, built on LangGraph.

Define a :class:`LongTask` of stages and steps, run it with a :class:`Runner`, and resume it
after a crash, a restart or a long pause without repeating finished steps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from longtask.errors import (
    DatabaseError,
    DefinitionChanged,
    DefinitionError,
    InvalidInput,
    LongTaskError,
    NothingToResume,
    ResultNotAvailable,
    SchemaVersionError,
    StepFailed,
    StepTimeout,
    TaskRefError,
    ThreadBusy,
    ThreadExists,
    ThreadNotFound,
)
from longtask.model import (
    Decision,
    LongTask,
    Retry,
    Stage,
    approval,
    function_step,
    map_step,
    wait_for,
)

if TYPE_CHECKING:
    from longtask.runtime import Runner, ThreadStatus
    from longtask.steps import ItemContext, StepContext

__version__ = "0.1.0"

# The runtime pulls in LangGraph; keep `import longtask` (and the CLI's --help) light by
# importing it on first use.
_LAZY = {
    "Runner": "longtask.runtime",
    "ThreadStatus": "longtask.runtime",
    "StepContext": "longtask.steps",
    "ItemContext": "longtask.steps",
    "Command": "langgraph.types",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'longtask' has no attribute {name!r}")


__all__ = [
    "Command",
    "DatabaseError",
    "Decision",
    "DefinitionChanged",
    "DefinitionError",
    "InvalidInput",
    "ItemContext",
    "LongTask",
    "LongTaskError",
    "NothingToResume",
    "ResultNotAvailable",
    "Retry",
    "Runner",
    "SchemaVersionError",
    "Stage",
    "StepContext",
    "StepFailed",
    "StepTimeout",
    "TaskRefError",
    "ThreadBusy",
    "ThreadExists",
    "ThreadNotFound",
    "ThreadStatus",
    "__version__",
    "approval",
    "function_step",
    "map_step",
    "wait_for",
]
