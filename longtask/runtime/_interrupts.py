"""Which interrupts of a thread's head checkpoint still wait for an answer, read from its
pending writes. No LangGraph: ``longtask pending`` and ``status`` read them in processes
that never run a graph (the stored ``Interrupt`` objects are decoded without it, see
``checkpointers._reader.LightSerde``)."""

from __future__ import annotations

from typing import Any

from longtask.checkpointers._reader import NULL_TASK_ID
from longtask.runtime._views import Pending
from longtask.store._kinds import GATE_KINDS, PAUSE_KINDS, USER_KINDS

__all__ = [
    "GATE_KINDS",
    "INTERRUPT",
    "PAUSE_KINDS",
    "USER_KINDS",
    "interrupted",
    "open_interrupts",
]


#: LangGraph's channels of the writes that tell what happened to a task rather than what it
#: produced (private to LangGraph since 1.0; the rules are those of its
#: ``pregel/_task_status.py``)
INTERRUPT = "__interrupt__"
_CONTROL_WRITES = frozenset({INTERRUPT, "__resume__", "__error__", "__error_source_node__"})


def _waiting_interrupts(tup: Any) -> list[Any]:
    """The interrupts still waiting for an answer in the head checkpoint ``tup``'s pending
    writes: a task's latest interrupt, while the task has no output write (a task that was
    answered and finished has one; an answer that did not finish its node leaves the
    interrupt standing)."""
    asked: dict[str, list[Any]] = {}
    finished: set[str] = set()
    for task_id, channel, value in (tup.pending_writes or ()) if tup is not None else ():
        if task_id == NULL_TASK_ID:
            continue
        if channel == INTERRUPT:
            asked[task_id] = list(value) if isinstance(value, (list, tuple)) else [value]
        elif channel not in _CONTROL_WRITES:
            finished.add(task_id)
    return [i for task_id, found in asked.items() if task_id not in finished for i in found]


def open_interrupts(tup: Any) -> list[Pending]:
    """Our interrupts waiting for an answer in the head checkpoint ``tup`` (approvals,
    waits, effects to settle and gates: a budget or deadline reached, a permission missing,
    a fix loop out of rounds): those LangGraph's ``get_state`` lists, read from the pending
    writes without rebuilding the graph's channels."""
    out = []
    for intr in _waiting_interrupts(tup):
        request = getattr(intr, "value", None)
        if isinstance(request, dict) and request.get("kind") in PAUSE_KINDS:
            out.append(
                Pending(
                    step=request["step"],
                    kind=request["kind"],
                    interrupt_id=str(getattr(intr, "id", "")),
                    request=request,
                )
            )
    return out


def interrupted(tup: Any) -> bool:
    """Whether the head checkpoint ``tup`` waits at an interrupt (ours or another's)."""
    return bool(_waiting_interrupts(tup))
