"""The run core: what starts, advances, pauses, answers, cancels, reads and serves threads.

Its parts are built with exactly what they need and compose into the Runner
(``longtask.Runner``, in ``longtask/_runner.py``): :class:`Engine` (a task's graph, start,
resume, the run itself), :class:`Reads` (status, results, events, pending, history),
:class:`Pauses` (approve, reject, signal, answers, deadlines), :class:`Control` (cancel,
retry, skip, budget), :class:`Watch` (live events, artifacts), :class:`TimeTravel` (the
state at a checkpoint, diffs, branches, forks), :class:`Streams` (stream and the asyncio
calls), :class:`Queue` (workers' jobs and leases), with :class:`Gotos` and
:class:`Compensator`, and :class:`Subtasks` (the child threads of sub-task steps);
:class:`Worker` is the ``longtask worker`` process and
:class:`Reader` the reads alone, for processes that never run a graph.

It may import graphs, steps, checkpointers, store, model and errors; never the operations
(``longtask.ops``), the Runner façade, serve, demo or cli. Its names are imported on first
use: the Engine pulls in LangGraph, which a process that only reads (``longtask status``,
through :class:`Reader`) never needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from longtask._lazy import lazy_names

if TYPE_CHECKING:
    from longtask.runtime._calls import tapping
    from longtask.runtime._compensate import Compensator
    from longtask.runtime._control import Control
    from longtask.runtime._costs import ThreadCost
    from longtask.runtime._engine import Engine, UpdateHook
    from longtask.runtime._gotos import Gotos
    from longtask.runtime._history import TimeTravel
    from longtask.runtime._notify import Notifier
    from longtask.runtime._parts import PartLog, logging_parts, parts_of
    from longtask.runtime._pauses import Pauses
    from longtask.runtime._queue import Queue
    from longtask.runtime._reader import Reader
    from longtask.runtime._reading import Reads
    from longtask.runtime._streams import Streams
    from longtask.runtime._subtasks import Subtasks
    from longtask.runtime._taskref import find_ref, load_task, load_versions
    from longtask.runtime._toolmarks import config_tools
    from longtask.runtime._turns import Turns
    from longtask.runtime._usage import StepUsage, ThreadUsage
    from longtask.runtime._views import CheckpointView, StepState, ThreadStatus
    from longtask.runtime._watch import Watch
    from longtask.runtime._worker import Worker

_LAZY = {
    "CheckpointView": "longtask.runtime._views",
    "Compensator": "longtask.runtime._compensate",
    "Control": "longtask.runtime._control",
    "Engine": "longtask.runtime._engine",
    "Gotos": "longtask.runtime._gotos",
    "Pauses": "longtask.runtime._pauses",
    "Queue": "longtask.runtime._queue",
    "Reader": "longtask.runtime._reader",
    "Reads": "longtask.runtime._reading",
    "StepState": "longtask.runtime._views",
    "StepUsage": "longtask.runtime._usage",
    "Streams": "longtask.runtime._streams",
    "Subtasks": "longtask.runtime._subtasks",
    "Turns": "longtask.runtime._turns",
    "ThreadCost": "longtask.runtime._costs",
    "ThreadStatus": "longtask.runtime._views",
    "ThreadUsage": "longtask.runtime._usage",
    "TimeTravel": "longtask.runtime._history",
    "UpdateHook": "longtask.runtime._engine",
    "Watch": "longtask.runtime._watch",
    "Notifier": "longtask.runtime._notify",
    "Worker": "longtask.runtime._worker",
    "find_ref": "longtask.runtime._taskref",
    "load_task": "longtask.runtime._taskref",
    "load_versions": "longtask.runtime._taskref",
    "config_tools": "longtask.runtime._toolmarks",
    "tapping": "longtask.runtime._calls",
    "PartLog": "longtask.runtime._parts",
    "logging_parts": "longtask.runtime._parts",
    "parts_of": "longtask.runtime._parts",
}


__getattr__ = lazy_names("longtask.runtime", _LAZY)


__all__ = [
    "CheckpointView",
    "Compensator",
    "Control",
    "Engine",
    "Gotos",
    "Notifier",
    "PartLog",
    "Pauses",
    "Queue",
    "Reader",
    "Reads",
    "StepState",
    "StepUsage",
    "Streams",
    "Subtasks",
    "ThreadCost",
    "ThreadStatus",
    "ThreadUsage",
    "TimeTravel",
    "Turns",
    "UpdateHook",
    "Watch",
    "Worker",
    "config_tools",
    "find_ref",
    "load_task",
    "load_versions",
    "logging_parts",
    "parts_of",
    "tapping",
]
