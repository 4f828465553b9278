"""A new input on a thread of a plain LangGraph graph (``model.GraphApp``): the graph runs
again on the state its last run left, as LangGraph runs a thread's graph again when it is
invoked with new input (the second message of a chat).

The turn is recorded first, under the thread's hold, as a checkpoint of the task's graph
that holds the new input (LangGraph's own input checkpoint: ``update_state`` as
``__input__``, so the graph's next step is its start) together with a ``turn.started``
event; then the thread is advanced like any other (here, or by a worker). The graph step
keeps its graph's checkpoints in one namespace (``GraphStep.keeps_state``) and starts a new
run of the graph on its state, which applies the input through the graph's reducers. A
crash anywhere after the record resumes the turn from its last checkpoint: the graph's
finished nodes of either turn do not run again.

A LongTask's thread runs its task once: it is refused, as is a thread that failed, is
cancelled, is being advanced, or waits for anything but its graph's own ``interrupt()``
(a new input there drops the interrupt and runs the graph again, as on LangGraph's server).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from langgraph.types import StateUpdate
from pydantic import BaseModel

from longtask.errors import InvalidInput, NothingToResume
from longtask.model import GraphApp
from longtask.runtime._gate import holding, trusted
from longtask.runtime._inputs import validate_context
from longtask.runtime._interrupts import open_interrupts
from longtask.runtime._reading import _config
from longtask.runtime._who import check_by, whoami
from longtask.steps import CONTEXT_CHANNEL, INPUTS_CHANNEL, INTERRUPT_KIND
from longtask.store import STANDS_ON, NewEvent
from longtask.store._kinds import TURN_STARTED

if TYPE_CHECKING:
    from longtask.checkpointers import Database
    from longtask.model import LongTask
    from longtask.runtime._engine import Engine
    from longtask.runtime._queue import Queue
    from longtask.runtime._reading import Reads
    from longtask.store import ThreadRecord, ValueCodec

#: the event a recorded turn stores with its input checkpoint
TURN_EVENT = TURN_STARTED
#: LangGraph's name for a write that is the graph's input (its next step is its start)
_INPUT_NODE = "__input__"
#: the update that drops a checkpoint's unfinished tasks
_DROP = StateUpdate(None, "__end__")
#: statuses a thread takes a new input in
_TAKES_INPUT = frozenset({"completed", "waiting_user", "waiting_external"})

__all__ = ["TURN_EVENT", "Turns"]


class Turns:
    """New inputs on finished threads of served LangGraph graphs (``Runner.run_again``)."""

    def __init__(
        self, db: Database, codec: ValueCodec, reads: Reads, engine: Engine, queue: Queue
    ) -> None:
        self.db, self.codec, self._reads, self._engine, self._queue = (
            db,
            codec,
            reads,
            engine,
            queue,
        )

    def run_again(
        self,
        thread_id: str,
        inputs: Mapping[str, Any] | BaseModel | None,
        *,
        task: LongTask | None = None,
        turn: str | None = None,
        by: str | None = None,
        config: Mapping[str, Any] | None = None,
        at: str | None = None,
        context: Mapping[str, Any] | None = None,
    ) -> str:
        """Run the LangGraph graph of ``thread_id`` again with the new input ``inputs``,
        on the state its last run left (messages accumulate through the graph's reducer),
        as LangGraph's server does for a new run with input on the thread. The thread must
        be a served graph's (``longtask serve --config langgraph.json``, or a graph's
        reference given to ``run``/``submit``) and completed, or waiting at its graph's own
        ``interrupt()`` (which the new input drops, as on LangGraph's server).

        Recorded durably first (the input checkpoint and a ``turn.started`` event), then
        advanced here until it completes or pauses (by a worker for a thread served by
        workers: this returns at once). ``turn``: an id that makes the call idempotent (a
        repeated call with it only continues the turn). ``by``: who sends it. ``config`` as
        for ``start``. ``at``: one of the graph's own checkpoints (``inner_history``), to run
        it from there instead, as LangGraph's server runs a thread from a past checkpoint:
        a new branch of the thread on the graph's state at that checkpoint (its later
        checkpoints stay in the thread's history). ``context``: the turn's run context, which
        the graph reads as LangGraph's runtime context (each run has its own, as on
        LangGraph's server: without one, ``{}``, so the context schema's defaults apply).
        Returns the thread id."""
        rec = self._reads.thread(thread_id)
        task = task or self._engine.load(rec)
        recorded = self.record(rec, task, inputs, turn=turn, by=by, at=at, context=context)
        # A repeated turn (its run carried out again after a restart) only goes on, and not
        # past a pause it reached meanwhile, which waits for its answer.
        if not recorded and self._reads.thread(thread_id).status not in ("pending", "running"):
            return thread_id
        with contextlib.suppress(NothingToResume):  # a repeated turn already carried out
            self._engine.resume(thread_id, task=task, by=by, config=config)
        return thread_id

    def record(
        self,
        rec: ThreadRecord,
        task: LongTask,
        inputs: Mapping[str, Any] | BaseModel | None,
        *,
        turn: str | None = None,
        by: str | None = None,
        at: str | None = None,
        context: Mapping[str, Any] | None = None,
    ) -> bool:
        """Record the new input of ``run_again`` (checked, raising InvalidInput and storing
        nothing when refused); False if the turn ``turn`` was recorded before."""
        thread_id = rec.thread_id
        if turn is not None and self._recorded(thread_id, turn):
            # Recorded before: whatever the thread does now (it may be paused on the turn's
            # own work), the turn is not refused but found.
            return False
        self.refusal(rec, task)
        base = self.branch_point(rec, task, at) if at is not None else None
        encoded = self.codec.encode(self._engine.validate_inputs(task, inputs), "the new input")
        run_context = validate_context(task, context) or {}
        by = check_by(by) if by is not None else whoami()
        turn = turn or uuid.uuid4().hex
        graph = self._engine.graph(task)
        with self._queue.hold(thread_id), holding(thread_id):
            if self._recorded(thread_id, turn):
                return False
            current = self._reads.thread(thread_id)
            self.refusal(current, task)
            self._engine.events.put(
                NewEvent(
                    thread_id,
                    TURN_EVENT,
                    key=f"{TURN_EVENT}/{turn}",
                    data={"turn": turn, "by": by, "from_status": current.status}
                    | ({"at": at} if at is not None else {}),
                )
            )
            # Past the gate, which keeps a finished thread's state as it is: this is no
            # change of what was done but a new run on top of it, checked above.
            new = StateUpdate({INPUTS_CHANNEL: encoded, CONTEXT_CHANNEL: run_context}, _INPUT_NODE)
            # A graph waiting at its interrupt() has its node still to run: dropped first
            # (LangGraph's update "as __end__" with no values), as LangGraph drops a
            # thread's unfinished tasks when it is invoked with new input.
            steps = [[new]] if current.status == "completed" else [[_DROP], [new]]
            where: Any = _config(thread_id)
            if base is not None:
                # A new branch: from the task's checkpoint the graph's run that made
                # ``at`` went on to, or (a run that never ended) the one it ran at; the
                # branch names ``at`` for the graph step to start from (``steps._graph``).
                steps = [[new]] if base[1] else [[_DROP], [new]]
                where["configurable"] |= {"checkpoint_id": base[0], STANDS_ON: at}
            with trusted():
                graph.bulk_update_state(where, steps)
            self.db.store.set_status(thread_id, "pending")
        return True

    def branch_point(self, rec: ThreadRecord, task: LongTask, at: str) -> tuple[str, bool]:
        """The task's checkpoint a new input at the graph's own checkpoint ``at`` branches
        from, and whether the graph's run that made ``at`` finished there (raises
        InvalidInput if ``at`` is none of the thread's graph's checkpoints)."""
        assert isinstance(task, GraphApp)  # refusal() said so
        ns = task.graph_step.name
        found = next(
            (m for m in self.db.store.checkpoint_marks(rec.thread_id, ns) if m.checkpoint_id == at),
            None,
        )
        if found is None or found.made_under is None:
            raise InvalidInput(
                f"thread {rec.thread_id!r} has no checkpoint {at!r} of its graph; see "
                f"`longtask history {rec.thread_id} --inner {ns}`"
            )
        outer = self.db.store.checkpoint_marks(rec.thread_id)
        ended = next(
            (m for m in outer if m.parent_id == found.made_under and m.source == "loop"), None
        )
        return (ended.checkpoint_id, True) if ended is not None else (found.made_under, False)

    def refusal(self, rec: ThreadRecord, task: LongTask) -> None:
        """Raise InvalidInput (naming what to do) if ``rec`` takes no new input now."""
        thread_id = rec.thread_id
        if not isinstance(task, GraphApp):
            raise InvalidInput(
                f"thread {thread_id!r} runs the LongTask {task.name!r}, which runs once per "
                "thread; start a new thread for a new request (a new input on a thread is "
                "for a served LangGraph graph)"
            )
        if rec.status not in _TAKES_INPUT:
            what = {
                "failed": f"it failed: continue it with `longtask resume {thread_id}`, or "
                "start a new thread",
                "cancelled": "it was cancelled: start a new thread",
                "cancelling": "it is being cancelled: start a new thread",
            }.get(
                rec.status,
                "its graph is running: wait for the run to end (or queue the new input behind it)",
            )
            raise InvalidInput(f"thread {thread_id!r} takes no new input now: {what}")
        if rec.status != "completed":
            other = [
                p
                for p in open_interrupts(self.db.saver.head(thread_id))
                if p.kind != INTERRUPT_KIND
            ]
            if other:
                raise InvalidInput(
                    f"thread {thread_id!r} waits for {_a(other[0].kind)} of step "
                    f"{other[0].step!r}: answer it first (`longtask pending {thread_id}`); a "
                    "new input drops only the graph's own interrupt()"
                )

    def _recorded(self, thread_id: str, turn: str) -> bool:
        return any(
            e.data.get("turn") == turn for e in self.db.store.events(thread_id, kinds=[TURN_EVENT])
        )


def _a(kind: str) -> str:
    """``kind`` with its article (a pause of kind ``effect`` is "an effect")."""
    return f"an {kind}" if kind[:1] in "aeiou" else f"a {kind}"
