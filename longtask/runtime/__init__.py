"""The Runner facade: start, resume, status, history, events."""

from longtask.runtime._costs import ThreadCost
from longtask.runtime._move import MoveSummary
from longtask.runtime._prune import PruneReport
from longtask.runtime._runner import Runner, UpdateHook
from longtask.runtime._streams import tapping
from longtask.runtime._taskref import find_ref, load_task
from longtask.runtime._usage import StepUsage, ThreadUsage
from longtask.runtime._views import CheckpointView, StepState, ThreadStatus

__all__ = [
    "CheckpointView",
    "MoveSummary",
    "PruneReport",
    "Runner",
    "StepState",
    "StepUsage",
    "ThreadCost",
    "ThreadStatus",
    "ThreadUsage",
    "UpdateHook",
    "find_ref",
    "load_task",
    "tapping",
]
