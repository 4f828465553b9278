"""Accepted answers to a graph's own ``interrupt()``, kept durable from the moment they are
accepted.

LangGraph takes an answer by id (``Command(resume={id: value})``, as every longtask answer
is given) as part of the run's config only: it is stored with the writes of the task that
asked, when that task ends. A process killed after the answer was accepted and before the
task ended (in a tool the node calls with the answer) loses it, and the thread would ask
the same question again. So the answer is recorded at acceptance, under the thread's lock
once every check passed, as the ``interrupt.resolved`` event (who answered, the value, and
the checkpoint whose interrupt it answers); a later run of the thread that gives no answer
of its own to that interrupt gives the recorded one, as long as the interrupt is still open
at that same checkpoint (once the graph went past it, it has the answer in its own
writes). A refused answer records nothing; one the graph raised on (``interrupt.refused``,
recorded by the step, which asks again: see ``steps._refused``) is never given again.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from langgraph.types import Command

from longtask.runtime._interrupts import open_interrupts
from longtask.runtime._who import whoami
from longtask.steps import INTERRUPT_KIND

if TYPE_CHECKING:
    from longtask.checkpointers import Database

RESOLVED = "interrupt.resolved"
#: the graph raised on the answer: it asks again, and the answer is not given again
REFUSED = "interrupt.refused"


def _head_id(head: Any) -> str | None:
    if head is None:
        return None
    return str((head.config.get("configurable") or {}).get("checkpoint_id"))


def _latest(db: Database, thread_id: str, at: str | None) -> dict[str, tuple[Any, Any]]:
    """The latest answer recorded for each interrupt open at checkpoint ``at``, (by,
    value), unless the graph raised on it since."""
    latest: dict[str, tuple[Any, Any]] = {}
    for event in db.store.events(thread_id, kinds=[RESOLVED, REFUSED]):
        data = event.data or {}
        if event.kind == REFUSED:
            latest.pop(str(data.get("interrupt_id")), None)
        elif data.get("checkpoint_id") == at:
            latest[str(data.get("interrupt_id"))] = (data.get("by"), data.get("value"))
    return latest


def record_answers(db: Database, thread_id: str, command: Any, by: str | None) -> None:
    """Record the answers ``command`` gives to the graph interrupts the thread waits at
    (called once the answer was accepted, under the thread's lock): committed before the
    run that takes them starts."""
    resume = getattr(command, "resume", None)
    if not isinstance(resume, Mapping) or not resume:
        return
    head = db.saver.head(thread_id)
    asked = {p.interrupt_id: p for p in open_interrupts(head) if p.kind == INTERRUPT_KIND}
    at = _head_id(head)
    latest = _latest(db, thread_id, at) if asked else {}
    for interrupt_id, value in resume.items():
        item = asked.get(str(interrupt_id))
        if item is None:
            continue
        who = by or whoami()
        if latest.get(item.interrupt_id) == (who, value):
            # Accepted again as it stands (a worker's queued answer carried out again after
            # the worker died, or the same answer sent twice): one record of it is enough.
            continue
        db.store.append_event(
            thread_id,
            RESOLVED,
            # one per change: another answer accepted after a crash is recorded too
            key=f"{RESOLVED}/{interrupt_id}/{uuid.uuid4().hex}",
            step=item.step,
            data={
                "interrupt_id": item.interrupt_id,
                "by": who,
                "value": value,
                "checkpoint_id": at,
            },
        )


def with_accepted(db: Database, thread_id: str, graph_input: Any) -> Any:
    """``graph_input`` with the answers accepted earlier for graph interrupts still open at
    the head checkpoint they were given at (an answer ``graph_input`` gives wins)."""
    if graph_input is not None and not (
        isinstance(graph_input, Command)
        and isinstance(graph_input.resume, Mapping)
        and graph_input.update is None
        and not graph_input.goto
    ):
        return graph_input
    head = db.saver.head(thread_id)
    asked = {p.interrupt_id for p in open_interrupts(head) if p.kind == INTERRUPT_KIND}
    if not asked:
        return graph_input
    kept = {
        interrupt_id: value
        for interrupt_id, (_by, value) in _latest(db, thread_id, _head_id(head)).items()
        if interrupt_id in asked
    }
    if not kept:
        return graph_input
    resume = graph_input.resume if graph_input is not None else None
    given: Mapping[str, Any] = resume if isinstance(resume, Mapping) else {}
    return Command(resume={**kept, **given})
