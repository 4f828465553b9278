"""Parallel steps of one super-step: a step that raises lets its siblings' results be saved first.

LangGraph saves a task's result (``put_writes``) from the task's done callback, through the
run's executor. Once a task raises, LangGraph stops waiting for the others; as the exception
leaves the graph it waits for the tasks still running and shuts the executor down. A sibling
whose future completes in that window hands its result to an executor that is shutting down
("cannot schedule new futures after shutdown"): the result is lost, and the sibling runs again
on resume.

So every node runs through ``settled``: a node that is about to raise (a failure, a pause for
a person, a cancel, a stop, a deferred retry) first waits until every other task of its
super-step has either finished with its result saved (LangGraph's rule: it has an output
write on the checkpoint) or raised itself. The tasks of the super-step are read from the
checkpoint (``get_state``), so a sibling that has not started yet is waited for too. LangGraph
is still waiting for the raising task meanwhile, so its executor is open and each result
reaches the checkpointer. LangGraph would wait for the running siblings before raising
anyway, so the wait does not delay the failure; it is bounded all the same.

An interrupt (``GraphBubbleUp``) does not stop the other tasks, so it does not wait. Retries
happen inside a step's node, so a step that will be retried never waits here. Siblings that
see a cancel or a stop end at their next boundary, as they would without the wait.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from langchain_core.runnables import RunnableConfig
from langgraph.errors import GraphBubbleUp
from langgraph.types import StateSnapshot

from longtask.steps._call import NodeCall

log = logging.getLogger("longtask.steps")

RUNNING = "running"
RETURNED = "returned"
#: raised (or interrupted): the task has nothing more to save
RAISED = "raised"

#: at most this long for siblings that run (LangGraph waits for them anyway)
RUNNING_WAIT = 3600.0
#: at most this long while no sibling runs and some have not started or have their results
#: on the way: a sibling that cannot start because every worker thread of the run is held
#: by a raising step must not hold the failure up for long
STALLED_WAIT = 10.0
POLL = 0.02

Where = tuple[int, int]  # (run, super-step)
Snapshot = Callable[[RunnableConfig], StateSnapshot]


class Siblings:
    """The tasks of each thread's current super-step that ran in this process."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._steps: dict[str, tuple[Where, dict[str, str]]] = {}

    def enter(self, thread_id: str, where: Where, task_id: str) -> None:
        with self._cond:
            current = self._steps.get(thread_id)
            if current is None or current[0] != where:
                # A new super-step: the previous one has ended (super-steps do not overlap).
                current = (where, {})
                self._steps[thread_id] = current
            current[1][task_id] = RUNNING

    def leave(self, thread_id: str, where: Where, task_id: str, state: str) -> None:
        with self._cond:
            current = self._steps.get(thread_id)
            if current is not None and current[0] == where:
                current[1][task_id] = state
            self._cond.notify_all()

    def forget(self, thread_id: str) -> None:
        with self._cond:
            self._steps.pop(thread_id, None)

    def settle(
        self, snapshot: Snapshot, thread_id: str, where: Where, me: str, checkpoint_id: str | None
    ) -> None:
        """Wait until every task of ``me``'s super-step but ``me`` has its result saved or
        has raised (bounded; see the module's docstring)."""
        conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ""}
        if checkpoint_id:
            conf["checkpoint_id"] = checkpoint_id
        config: RunnableConfig = {"configurable": conf}
        started = time.monotonic()
        stalled_since: float | None = None
        while True:
            tasks = snapshot(config).tasks
            now = time.monotonic()
            with self._cond:
                current = self._steps.get(thread_id)
                states = current[1] if current is not None and current[0] == where else {}
                waiting = [
                    states.get(t.id)
                    for t in tasks
                    if t.id != me and t.result is None and states.get(t.id) != RAISED
                ]
                if not waiting:
                    return
                if RUNNING in waiting:
                    stalled_since = None
                    if now - started > RUNNING_WAIT:
                        break
                    # woken when a sibling returns or raises
                    self._cond.wait(1.0)
                    continue
                stalled_since = stalled_since or now
                if now - stalled_since > STALLED_WAIT:
                    break
            time.sleep(POLL)
        log.warning(
            "thread %s: a step raises while %d sibling(s) have no saved result yet; they may "
            "run again on resume",
            thread_id,
            len(waiting),
        )


class SiblingEnv(Protocol):
    """What ``settled`` reads of the nodes' shared env (``StepEnv``, which holds a
    ``Siblings``: a protocol, so this module need not import it back)."""

    siblings: Siblings
    snapshot: Snapshot | None


def settled(
    env: SiblingEnv, fn: Callable[[Any, RunnableConfig], Any]
) -> Callable[[Any, RunnableConfig], Any]:
    """``fn`` as a node that, before it raises, lets its siblings' results be saved."""
    siblings = env.siblings

    def node(state: Any, config: RunnableConfig) -> Any:
        call = NodeCall.from_config(config)
        meta = config.get("metadata") or {}
        where = (call.run, int(meta.get("langgraph_step", -1)))
        siblings.enter(call.thread_id, where, call.task_id)
        try:
            value = fn(state, config)
        except GraphBubbleUp:
            siblings.leave(call.thread_id, where, call.task_id, RAISED)
            raise
        except BaseException:
            # Whatever the node raises (SystemExit too) makes LangGraph stop the super-step.
            siblings.leave(call.thread_id, where, call.task_id, RAISED)
            if env.snapshot is not None:
                checkpoint_map = (config.get("configurable") or {}).get("checkpoint_map") or {}
                try:
                    siblings.settle(
                        env.snapshot, call.thread_id, where, call.task_id, checkpoint_map.get("")
                    )
                except Exception:
                    # The step's own error is what matters; a sibling may only run again.
                    log.exception("thread %s: could not wait for sibling steps", call.thread_id)
            raise
        siblings.leave(call.thread_id, where, call.task_id, RETURNED)
        return value

    node.__name__ = getattr(fn, "__name__", "node")
    return node
