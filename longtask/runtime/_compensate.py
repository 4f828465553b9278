"""Compensation: undoing a thread's completed steps when it is cancelled (or fails with
``compensate_on_failure``), newest first, each at most once through the effect ledger.
Part of the run core: a run that finds a cancel request carries it out here."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from longtask.errors import CompensationFailed
from longtask.steps import STEP_ATTR, NodeCall, StepContext, result_channel
from longtask.steps._attempts import describe
from longtask.steps._effects import effect_key
from longtask.store import NewEvent, is_skipped

if TYPE_CHECKING:
    from longtask.checkpointers import Database
    from longtask.model import LongTask
    from longtask.steps import StepEnv
    from longtask.store import EventWriter, ValueCodec


def _state_of(tup: Any) -> dict[str, Any]:
    """Channel values of a checkpoint with its pending writes applied (results of steps
    that finished in a super-step that failed as a whole)."""
    if tup is None:
        return {}
    values = dict(tup.checkpoint.get("channel_values", {}))
    values.update({c: v for _, c, v in tup.pending_writes or () if c.startswith("out.")})
    return values


class Compensator:
    """Runs compensations on ``db``: results decoded with ``codec``, events through
    ``events`` (the outbox of the run that cancels)."""

    def __init__(self, db: Database, codec: ValueCodec, events: EventWriter) -> None:
        self.db = db
        self.codec = codec
        self.events = events

    def run(
        self, env: StepEnv, task: LongTask, thread_id: str, run: int, request: dict[str, Any]
    ) -> list[str]:
        """Run the compensations of every completed step of ``task``, newest first, with
        the task's step environment ``env``; each is recorded in the effect ledger so that
        a repeated cancel never runs one twice. Ends the thread ``cancelled`` (or
        ``failed``, for a failure that asked for compensation)."""
        store = self.db.store
        store.set_status(thread_id, "cancelling")
        tup = self.db.saver.get_tuple(
            {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        )
        state = _state_of(tup)
        done = [
            name
            for name in reversed(list(task.layout))
            if result_channel(name) in state
            and not is_skipped(state[result_channel(name)])
            and task.steps[name].compensate is not None
        ]
        call = NodeCall(thread_id, run, "compensate")
        for name in done:
            compensate = task.steps[name].compensate
            assert compensate is not None
            info = task.layout[name]
            key = effect_key(thread_id, name, "compensate", "", None)
            if not store.effect_start(key, thread_id, name, "compensate", ""):
                row = store.effect(key)
                if row is not None and row.status == "succeeded":
                    continue
                # "started": the process died during this compensation; it runs again and
                # its own effects (through ctx.effect) are not repeated.
            env.emit(call, "compensation.started", call.key("compensation.started", name), info)
            ctx = StepContext(
                thread_id=thread_id,
                info=info,
                attempt=1,
                state=state,
                codec=self.codec,
                inputs_model=task.inputs,
                effects=env.effects_for(call, info, prefix="compensate:"),
            )
            try:
                value = self.codec.decode(state[result_channel(name)], strict=False)
                out = compensate(ctx, value)
                try:
                    json.dumps(out)
                except (TypeError, ValueError):
                    out = None
            except Exception as exc:
                error = describe(exc)[:2000]
                store.effect_finish(key, "failed", error=error)
                env.emit(
                    call,
                    "compensation.failed",
                    call.key("compensation.failed", name),
                    info,
                    data={"error": error},
                )
                self.events.flush()
                store.set_status(
                    thread_id,
                    "cancelling",
                    error={"step": name, "type": type(exc).__name__, "message": error},
                )
                setattr(exc, STEP_ATTR, name)
                raise CompensationFailed(thread_id, name, error) from exc
            store.effect_finish(key, "succeeded", result=out)
            env.emit(call, "compensation.completed", call.key("compensation.completed", name), info)
        failure = request.get("failure")
        if failure:
            self.events.flush()
            store.set_status(thread_id, "failed", error={**failure, "compensated": done})
        else:
            self.events.put(
                NewEvent(
                    thread_id,
                    "longtask.cancelled",
                    "longtask.cancelled",
                    data={
                        "reason": request.get("reason"),
                        "by": request.get("by"),
                        "compensated": done,
                    },
                )
            )
            self.events.flush()
            store.set_status(thread_id, "cancelled")
        return done
