"""What the run core and the pauses agree on about answers: the answer a gate is given (look
again), an answer that came too late, and a thread whose pause outcome (rejected, timed
out) stands until ``retry`` asks again."""

from __future__ import annotations

from typing import TYPE_CHECKING

from longtask.errors import InvalidInput

if TYPE_CHECKING:
    from longtask.store import ThreadRecord


#: the answer ``resume`` (and ``retry``) gives a gate: look again
GATE_ANSWER = {"continue": True}


class NotWaiting(InvalidInput):
    """The answer came too late: the thread stopped waiting for it (another process answered
    it, a deadline failed the thread, or the thread ended) before this answer could be used."""


def refuse_repeated_outcome(rec: ThreadRecord) -> None:
    """A thread that failed because an approval was rejected or a pause timed out: going on
    from its checkpoint (with or without a command) would run the pause again with the same
    answer and repeat that outcome; ``retry`` asks again."""
    error = rec.error or {}
    outcome, step = error.get("outcome"), error.get("step")
    if outcome and step:
        raise InvalidInput(
            f"step {step!r} of thread {rec.thread_id!r} "
            f"{'was rejected' if outcome == 'rejected' else outcome}; resuming would only "
            f"repeat that. To ask again (a fresh request), run `longtask retry "
            f"{rec.thread_id} {step}`"
        )
