"""What goes along with a run: which updates finish a step, how many of the task's steps
may run side by side, the watch that stops a run when a cancel is asked for in another
process, and the tracker that says when a stage completes."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from longtask.model import FunctionStep
from longtask.steps import result_channel
from longtask.store import NewEvent

if TYPE_CHECKING:
    from longtask.checkpointers import Database
    from longtask.model import LongTask
    from longtask.steps import StepEnv

log = logging.getLogger("longtask.runtime")


def finishes_step(task: LongTask, node: str, update: Any) -> bool:
    """Whether a node's update in the stream finishes its step (a pause node that asks
    again does not)."""
    step = task.steps.get(node)
    if step is None:
        return False
    if isinstance(step, FunctionStep) and step.on_failure:
        return True  # the step's own node runs once, after its helper nodes
    return isinstance(update, dict) and result_channel(node) in update


def concurrency(task: LongTask) -> int:
    """Threads LangGraph may use for one super-step: the widest stage (its default is the
    machine's core count + 4, which would cap a wide stage on a small box). A map step is
    one node that runs its items on threads of its own."""
    widths = [len(stage.steps) for stage in task.stages]
    return max(4, min(64, max(widths)))


class CancelWatch:
    """Polls the thread's cancel request while a run advances it, so that a cancel given in
    another process stops the run at its next step boundary."""

    def __init__(self, db: Database, env: StepEnv, thread_id: str, interval: float) -> None:
        self._db, self._env, self._thread_id, self._interval = db, env, thread_id, interval
        self._stop = threading.Event()
        self._worker = threading.Thread(
            target=self._loop, name=f"longtask-cancel-{thread_id}", daemon=True
        )

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                if self._db.store.cancel_request(self._thread_id) is not None:
                    self._env.cancel(self._thread_id)
                    return
            except Exception:  # a failed poll must not break the run; try again
                log.debug("cancel poll failed", exc_info=True)

    def __enter__(self) -> CancelWatch:
        self._worker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._worker.join()


class StageTracker:
    """Which stages have completed, kept up to date step by step (no rescans)."""

    def __init__(self, task: LongTask, done: set[str]) -> None:
        self._stage_of = {step.name: stage.name for stage, step in task.iter_steps()}
        self._left = {
            stage.name: sum(1 for s in stage.steps if s.name not in done) for stage in task.stages
        }
        self._done = set(done)

    def finish(self, thread_id: str, steps: Iterable[str]) -> list[NewEvent]:
        events = []
        for step in steps:
            if step in self._done:
                continue
            self._done.add(step)
            stage = self._stage_of[step]
            self._left[stage] -= 1
            if self._left[stage] == 0:
                events.append(
                    NewEvent(thread_id, "stage.completed", f"stage.completed/{stage}", stage=stage)
                )
        return events
