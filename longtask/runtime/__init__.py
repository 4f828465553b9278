"""The Runner facade: start, resume, status, history, events.

Its names are imported on first use: the Runner pulls in LangGraph, which a process that
only reads (``longtask status``, through :class:`~longtask.runtime._reader.Reader`) never
needs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from longtask.runtime._costs import ThreadCost
    from longtask.runtime._migrate_plan import MigrationPlan
    from longtask.runtime._move import MoveSummary
    from longtask.runtime._prune import PruneReport
    from longtask.runtime._reader import Reader
    from longtask.runtime._runner import Runner, UpdateHook
    from longtask.runtime._streams import tapping
    from longtask.runtime._taskref import find_ref, load_task, load_versions
    from longtask.runtime._usage import StepUsage, ThreadUsage
    from longtask.runtime._views import CheckpointView, StepState, ThreadStatus

_LAZY = {
    "CheckpointView": "longtask.runtime._views",
    "MigrationPlan": "longtask.runtime._migrate_plan",
    "MoveSummary": "longtask.runtime._move",
    "PruneReport": "longtask.runtime._prune",
    "Reader": "longtask.runtime._reader",
    "Runner": "longtask.runtime._runner",
    "StepState": "longtask.runtime._views",
    "StepUsage": "longtask.runtime._usage",
    "ThreadCost": "longtask.runtime._costs",
    "ThreadStatus": "longtask.runtime._views",
    "ThreadUsage": "longtask.runtime._usage",
    "UpdateHook": "longtask.runtime._runner",
    "find_ref": "longtask.runtime._taskref",
    "load_task": "longtask.runtime._taskref",
    "load_versions": "longtask.runtime._taskref",
    "tapping": "longtask.runtime._streams",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # looked up once
        return value
    raise AttributeError(f"module 'longtask.runtime' has no attribute {name!r}")


__all__ = [
    "CheckpointView",
    "MigrationPlan",
    "MoveSummary",
    "PruneReport",
    "Reader",
    "Runner",
    "StepState",
    "StepUsage",
    "ThreadCost",
    "ThreadStatus",
    "ThreadUsage",
    "UpdateHook",
    "find_ref",
    "load_task",
    "load_versions",
    "tapping",
]
