"""Answers and deadlines that race, against every backend: a thread that a deadline failed
is never revived by a late answer, and two ``tick``s act on one expiry once.

The races run in real threads on real databases. Where the window is too narrow to hit by
chance, a runner is held still inside it (a clock that waits, or a pause just before the
runner takes the thread's lock) while the other side runs to the end.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from longtask import InvalidInput, LongTask, Runner, Stage, StepContext, approval, function_step

START = datetime(2030, 1, 1, tzinfo=UTC)
DEADLINE = START + timedelta(seconds=3600)

#: step name -> how often its function ran
ran: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def _reset_calls() -> Iterator[None]:
    ran.clear()
    yield
    ran.clear()


def _publish(ctx: StepContext) -> str:
    ran["publish"] += 1
    return "published"


#: gate (an approval that fails the thread at its deadline) -> publish
GATED = LongTask(
    "races_gated",
    stages=[
        Stage("pause", [approval("gate", timeout=3600)]),
        Stage("work", [function_step(_publish, name="publish")]),
    ],
)


def kinds(runner: Runner, thread: str) -> Counter[str]:
    return Counter(
        e.kind for e in runner.events(thread) if not e.kind.startswith(("step.", "stage."))
    )


def test_a_late_approval_does_not_revive_a_thread_its_deadline_failed(db_url: str) -> None:
    """The approver's clock is 1 s before the deadline, the ticker's 1 s after. The tick
    fails the thread after the approver read what is pending and before it takes the
    thread: the approval is refused, and the thread stays failed."""
    ticker = Runner(db_url, clock=lambda: DEADLINE + timedelta(seconds=1))
    ticked: list[Any] = []

    def tick() -> None:
        ticked.extend(ticker.tick())

    armed = threading.Event()

    def approver_clock() -> datetime:
        if armed.is_set():
            armed.clear()
            other = threading.Thread(target=tick)
            other.start()
            other.join(60)
        return DEADLINE - timedelta(seconds=1)

    approver = Runner(db_url, clock=approver_clock)
    try:
        with Runner(db_url, clock=lambda: START) as starter:
            starter.start(GATED, thread_id="late")
        armed.set()
        with pytest.raises(InvalidInput) as info:
            approver.approve("late", "gate", by="alice")
        message = str(info.value)
        assert "\n" not in message
        assert "thread 'late' is failed: it no longer waits for an answer" in message
        assert [(r.step, r.outcome) for r in ticked] == [("gate", "failed")]
        assert approver.status("late").status == "failed"
        assert kinds(approver, "late") == Counter(
            {
                "longtask.started": 1,
                "approval.required": 1,
                "approval.expired": 1,
                "longtask.failed": 1,
            }
        )
        assert ran["publish"] == 0
    finally:
        approver.close()
        ticker.close()


class HeldTicker(Runner):
    """A runner whose ``tick`` stops after it has read what is due and before it takes the
    thread's lock (the window in which two ticks race), until ``go`` is set."""

    def __init__(self, db_url: str, **kw: Any) -> None:
        super().__init__(db_url, **kw)
        self.inside = threading.Event()
        self.go = threading.Event()
        resume_pending = self.pauses._resume_pending

        def held(*args: Any, **kw: Any) -> str:
            self.inside.set()
            assert self.go.wait(60)
            return resume_pending(*args, **kw)

        self.pauses._resume_pending = held  # type: ignore[method-assign]


def test_two_ticks_act_on_one_expiry_once(db_url: str) -> None:
    after = DEADLINE + timedelta(seconds=1)
    with Runner(db_url, clock=lambda: START) as starter:
        starter.start(GATED, thread_id="twice")
    held = HeldTicker(db_url, clock=lambda: after)
    other = Runner(db_url, clock=lambda: after)
    results: dict[str, list[Any]] = {}
    try:
        first = threading.Thread(target=lambda: results.update(held=held.tick()))
        first.start()
        assert held.inside.wait(60)
        second = threading.Thread(target=lambda: results.update(other=other.tick()))
        second.start()
        second.join(60)
        held.go.set()
        first.join(60)
        assert not first.is_alive() and not second.is_alive()
        outcomes = sorted(r.outcome for r in results["held"] + results["other"])
        assert outcomes == ["failed", "not waiting"]
        assert other.status("twice").status == "failed"
        counted = kinds(other, "twice")
        assert (counted["approval.expired"], counted["longtask.failed"]) == (1, 1)
        assert other.tick() == []
    finally:
        held.close()
        other.close()
