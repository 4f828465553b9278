"""The Runner's control of a thread by a person: cancel (with compensations), retry a failed
step, skip a step with a given result, and raise a budget."""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from langgraph.types import Command, StateUpdate

from longtask.errors import (
    InvalidInput,
    LongTaskError,
    NothingToResume,
    ThreadBusy,
    TooLateToCancel,
)
from longtask.model import LongTask, PauseStep
from longtask.runtime._gate import trusted
from longtask.runtime._who import whoami
from longtask.steps import (
    ask_node_name,
    result_channel,
)
from longtask.store import BudgetState, ThreadRecord
from longtask.store._subtasks import ENDED

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig

    from longtask.checkpointers import Database
    from longtask.runtime._engine import Engine
    from longtask.runtime._queue import Queue
    from longtask.runtime._reading import Reads
    from longtask.store import ValueCodec

log = logging.getLogger("longtask.runtime")

#: waiting kinds that a failing step caused (``retry`` re-runs the step)
STEP_PAUSES = ("permission", "budget", "deadline", "fix")

#: statuses of a thread whose run has ended but whose process may still hold it a moment,
#: and how long (seconds) a cancel waits for that process to let go
_SETTLED = ("waiting_user", "waiting_external", "failed")
_SETTLE_WAIT = 10.0


class Control:
    """A person's control of a thread: cancel it, run a failed step again, skip a step with
    a given result, raise its budget. Each records a ``manual.*`` event with who acted,
    then lets the run core (``engine``, or ``queue`` for a thread the workers serve) carry
    the thread on."""

    def __init__(
        self,
        db: Database,
        codec: ValueCodec,
        clock: Callable[[], datetime],
        reads: Reads,
        engine: Engine,
        queue: Queue,
    ) -> None:
        self.db = db
        self.codec = codec
        self.clock = clock
        self._reads = reads
        self._engine = engine
        self._queue = queue

    def _manual(self, thread_id: str, kind: str, step: str | None, data: dict[str, Any]) -> None:
        self.db.store.append_event(
            thread_id, kind, key=f"{kind}/{uuid.uuid4().hex}", step=step, data=data
        )

    # -- cancel ------------------------------------------------------------------------------

    def cancel(
        self,
        thread_id: str,
        *,
        reason: str | None = None,
        by: str | None = None,
        task: LongTask | None = None,
    ) -> bool:
        """Cancel a thread: no further step starts, and the ``compensate`` functions of its
        completed steps run newest first, each at most once.

        Returns True when the cancel is done (status ``cancelled``), False when another
        process is advancing the thread: it stops at its next step boundary and compensates.
        Running it again after a crash or a failed compensation continues where it stopped.

        The thread's sub-tasks that have not ended are cancelled after it (each once: a
        cancelled child is not cancelled again), and theirs in turn.
        """
        done = self._cancel(thread_id, reason=reason, by=by, task=task)
        for row in self.db.store.subtask_rows(thread_id):
            if row.status is None or row.status in ENDED:
                continue
            try:
                self.cancel(row.child, reason=f"its parent {thread_id} was cancelled", by=by)
            except LongTaskError as exc:  # ended meanwhile: nothing left to cancel
                log.info("sub-task %s not cancelled: %s", row.child, exc)
        return done

    def _cancel(
        self,
        thread_id: str,
        *,
        reason: str | None,
        by: str | None,
        task: LongTask | None,
    ) -> bool:
        rec = self.record_cancel(thread_id, reason=reason, by=by)
        task = task or self._engine.load(rec)
        if self._queue.served_by_workers(rec):
            # A worker stops the run (its cancel watch sees the request) and compensates.
            self._queue.enqueue(thread_id, {"kind": "cancel", "reason": reason, "by": by})
            return False

        def check(current: ThreadRecord) -> None:
            if current.status == "cancelled":
                raise _AlreadyCancelled  # the process that held the thread finished it
            _refuse_closed(current, "cancel")

        settling = 0.0
        while True:
            try:
                self._engine.advance(rec, task, None, first=False, check=check)
            except ThreadBusy:
                # A process advancing the thread stops at its next step and compensates.
                # One that has already paused or failed (it only has to let go of the
                # thread) does not look again: wait for it and compensate here.
                status = self._reads.thread(thread_id).status
                if status not in _SETTLED or settling >= _SETTLE_WAIT:
                    return False
                time.sleep(0.05)
                settling += 0.05
                continue
            except _AlreadyCancelled:
                pass
            return True

    def record_cancel(
        self, thread_id: str, *, reason: str | None = None, by: str | None = None
    ) -> ThreadRecord:
        """Record a cancel request (and its ``manual.cancel`` event) without carrying it out:
        a run advancing the thread sees it at its next step boundary and compensates, and
        ``cancel`` (or a resume) finishes it otherwise. What an HTTP request does before it
        answers. A second request keeps the first one's reason and records nothing."""
        rec = self._reads.thread(thread_id)
        _refuse_cancel(rec)
        if self.db.store.cancel_request(thread_id) is not None:
            return rec
        request = {"reason": reason or "cancelled", "by": by or whoami(), "at": self.clock()}
        # The request first, refused in the same statement once the thread has completed
        # (a run that finishes decides completion against it the same way): a cancel that
        # comes too late leaves nothing behind. It holds who, why and when, so a crash
        # before the event below still leaves the cancel recorded.
        if not self.db.store.request_cancel(thread_id, request):
            raise TooLateToCancel(thread_id, self._reads.thread(thread_id).status)
        self._manual(thread_id, "manual.cancel", None, json.loads(json.dumps(request, default=str)))
        return rec

    # -- retry and skip ----------------------------------------------------------------------

    def retry(
        self,
        thread_id: str,
        step: str | None = None,
        *,
        by: str | None = None,
        task: LongTask | None = None,
    ) -> str:
        """Run a failed step again (or one that paused for permission or budget), with a
        fresh set of attempts numbered on from the last, then continue the thread. An
        approval that was rejected, or an approval or wait that timed out, and so failed the
        thread, is asked again: a fresh request (plan, hash, deadline), and the thread waits."""
        rec = self._reads.thread(thread_id)
        failing = self.retry_target(rec, step)
        if (rec.error or {}).get("outcome"):
            return self._ask_again(rec, failing, by=by, task=task)
        self._manual(thread_id, "manual.retry", failing, {"by": by or whoami()})
        return self._engine.resume(thread_id, task=task)

    def retry_target(self, rec: ThreadRecord, step: str | None = None) -> str:
        """The step ``retry`` would run again (``step`` if given), or InvalidInput: what a
        caller that carries the retry out later (serve) checks first."""
        thread_id = rec.thread_id
        failing = _failing_step(rec)
        if failing is None:
            raise InvalidInput(
                f"thread {thread_id!r} is {rec.status}: `retry` runs a failed step again (or one "
                "paused for permission or budget); see `longtask status "
                f"{thread_id}`"
            )
        if step is not None and step != failing:
            raise InvalidInput(
                f"step {step!r} of thread {thread_id!r} has not failed; the failed step is "
                f"{failing!r}"
            )
        return failing

    def _ask_again(
        self, rec: ThreadRecord, step: str, *, by: str | None, task: LongTask | None
    ) -> str:
        """Ask a rejected (or timed out) approval or wait again: a fresh request, with its
        plan, hash and deadline, as if the step were reached for the first time."""
        thread_id = rec.thread_id
        task = task or self._engine.load(rec)
        if not isinstance(task.steps.get(step), PauseStep):
            raise InvalidInput(f"task {task.name!r} has no approval or wait {step!r} any more")
        config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
        with self.db.lock(thread_id):
            current = self._reads.thread(thread_id)
            if current.status != "failed" or (current.error or {}).get("step") != step:
                raise InvalidInput(
                    f"thread {thread_id!r} changed meanwhile (now {current.status}); see "
                    f"`longtask status {thread_id}`"
                )
            self._manual(thread_id, "manual.retry", step, {"by": by or whoami(), "ask": "again"})
            # The failed ask node would run again with the answer it was given (and fail the
            # same way): retire it, as if it had run, and start the step from its request.
            with trusted():
                self._engine.graph(task).bulk_update_state(
                    config, [[StateUpdate(None, as_node=ask_node_name(step))]]
                )
            # Only then may the thread go on (resume refuses while the outcome stands).
            error = {k: v for k, v in (current.error or {}).items() if k != "outcome"}
            self.db.store.set_status(thread_id, "failed", error=error)
        return self._engine.resume(thread_id, Command(goto=step), task=task)

    def skip(
        self,
        thread_id: str,
        step: str,
        result: Any = None,
        *,
        by: str | None = None,
        task: LongTask | None = None,
    ) -> str:
        """Mark ``step`` done with ``result`` (as if it had returned it) and continue the
        thread. For a step that failed or cannot run; approvals and waits are answered with
        approve, reject or signal instead."""
        rec = self._reads.thread(thread_id)
        task = task or self._engine.load(rec)
        self.check_skip(rec, task, step, result)
        # The reference check every outside value passes (a forged blob is refused).
        encoded = self._engine.gate.outside_result(thread_id, step, result, encode=True)
        _env, graph = self._engine.compiled(task)
        config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
        with self.db.lock(thread_id):
            _refuse_closed(self._reads.thread(thread_id), "skip a step of")
            if rec.status == "running" and step in self._reads.done_steps(thread_id):
                raise InvalidInput(f"step {step!r} of thread {thread_id!r} already has a result")
            # Siblings that finished in the failed super-step have their results only as
            # pending writes, which update_state alone would drop (they would run again):
            # apply them in the same update.
            tup = self.db.saver.get_tuple(config)
            saved = dict(tup.checkpoint.get("channel_values", {})) if tup else {}
            siblings = {
                c: v
                for _, c, v in (tup.pending_writes or () if tup else ())
                if c.startswith("out.") and c not in saved and c != result_channel(step)
            }
            updates = [
                StateUpdate({c: v}, as_node=c[4:])
                for c, v in siblings.items()
                if c[4:] in task.steps
            ]
            updates.append(StateUpdate({result_channel(step): encoded}, as_node=step))
            who = by or whoami()
            self._manual(thread_id, "manual.skip", step, {"by": who})
            # A control with checks of its own (check_skip), recorded as manual.skip.
            with trusted():
                graph.bulk_update_state(config, [updates])
            self.db.store.append_event(
                thread_id,
                "step.completed",
                key=f"manual/step.completed/{step}/{uuid.uuid4().hex[:8]}",
                stage=task.layout[step].stage,
                step=step,
                data={"manual": True, "by": who},
            )
        return self._engine.resume(thread_id, task=task)

    def check_skip(self, rec: ThreadRecord, task: LongTask, step: str, result: Any = None) -> None:
        """Refuse (InvalidInput, NothingToResume) a ``skip`` of ``step`` with ``result``
        that ``skip`` would refuse, changing nothing: what a caller that carries it out
        later checks first."""
        thread_id = rec.thread_id
        _refuse_closed(rec, "skip a step of")
        target = task.steps.get(step)
        if target is None:
            raise InvalidInput(
                f"task {task.name!r} has no step {step!r} (steps: {', '.join(task.steps)})"
            )
        if isinstance(target, PauseStep):
            raise InvalidInput(
                f"step {step!r} is {'an approval' if target.kind == 'approval' else 'a wait'}: "
                f"answer it with `longtask {'approve' if target.kind == 'approval' else 'signal'}`"
            )
        done = self._reads.done_steps(thread_id)
        if step in done:
            raise InvalidInput(f"step {step!r} of thread {thread_id!r} already has a result")
        missing = [d for d in task.layout[step].depends_on if d not in done]
        if missing:
            raise InvalidInput(
                f"step {step!r} cannot be skipped yet: it waits for {', '.join(missing)}"
            )
        # as a state update's value is: a reference must resolve, anything else be JSON
        self._engine.gate.outside_result(thread_id, step, result, encode=False)

    # -- budget ------------------------------------------------------------------------------

    def budget(self, thread_id: str) -> BudgetState | None:
        """The thread's budget limits and usage (None if it has neither)."""
        self._reads.thread(thread_id)
        return self.db.store.budget(thread_id)

    def raise_budget(
        self,
        thread_id: str,
        *,
        tokens: int | None = None,
        cost: float | None = None,
        tool_calls: int | None = None,
        wall_time: float | None = None,
        deadline: float | None = None,
        by: str | None = None,
    ) -> BudgetState:
        """Raise the thread's limits by the given amounts (``deadline``: seconds later).
        A thread paused by its budget continues with ``resume`` (or ``retry``)."""
        self._reads.thread(thread_id)
        adds = {"tokens": tokens, "cost": cost, "tool_calls": tool_calls, "wall_time": wall_time}
        given = {k: float(v) for k, v in adds.items() if v is not None}
        if not given and deadline is None:
            raise InvalidInput("say what to raise: tokens, cost, tool_calls, wall_time or deadline")
        bad = [k for k, v in {**given, "deadline": deadline or 1}.items() if v <= 0]
        if bad:
            raise InvalidInput(f"amounts must be greater than 0 ({', '.join(bad)})")
        current = self.db.store.budget(thread_id)
        unlimited = [k for k in given if current is None or current.limits.get(k) is None]
        if deadline is not None and (current is None or current.deadline_at is None):
            unlimited.append("deadline")
        if unlimited:
            raise InvalidInput(
                f"thread {thread_id!r} has no {' / '.join(unlimited)} limit to raise (its "
                "task sets none)"
            )
        self._manual(
            thread_id, "manual.budget", None, {"by": by or whoami(), **given, "deadline": deadline}
        )
        self.db.store.budget_raise(thread_id, given, deadline)
        after = self.db.store.budget(thread_id)
        assert after is not None
        return after


class _AlreadyCancelled(Exception):
    pass


def _refuse_cancel(rec: ThreadRecord) -> None:
    if rec.status in ("completed", "cancelled") or (rec.error or {}).get("compensated"):
        raise TooLateToCancel(rec.thread_id, rec.status)


def _refuse_closed(rec: ThreadRecord, what: str) -> None:
    if rec.status in ("completed", "cancelled") or (rec.error or {}).get("compensated"):
        raise NothingToResume(rec.thread_id, rec.status)


def _failing_step(rec: ThreadRecord) -> str | None:
    if (rec.error or {}).get("compensated"):
        return None
    if rec.status == "failed":
        step = (rec.error or {}).get("step")
        return str(step) if step else None
    if rec.status == "waiting_user":
        for w in rec.waiting or ():
            if w.get("kind") in STEP_PAUSES:
                return str(w["step"])
    return None
