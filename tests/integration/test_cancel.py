"""Cancel with compensations, and a person's retry and skip, against every backend."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from longtask import (
    InvalidInput,
    ItemContext,
    LongTask,
    NothingToResume,
    Runner,
    Stage,
    StepContext,
    StepFailed,
    approval,
    function_step,
    map_step,
)
from longtask.errors import CompensationFailed


@pytest.fixture
def runner(db_url: str) -> Iterator[Runner]:
    r = Runner(db_url, cancel_poll=0.05)
    yield r
    r.close()


class Service:
    """An outside system: records every call by idempotency key, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.fail_undo: set[str] = set()

    def do(self, what: str, idempotency_key: str) -> str:
        self.calls.append((what, idempotency_key))
        return what

    def undo(self, what: str, idempotency_key: str) -> str:
        if what in self.fail_undo:
            raise RuntimeError(f"cannot undo {what} right now")
        self.calls.append((f"undo {what}", idempotency_key))
        return f"undone {what}"


def saga(service: Service, ran: Counter[str], *, extra: list[Any] = (), **task: Any) -> LongTask:  # type: ignore[assignment]
    def step(name: str) -> Any:
        def run(ctx: StepContext) -> str:
            ran[name] += 1
            return str(ctx.effect("do", service.do, name))

        def compensate(ctx: StepContext, result: Any) -> str:
            ran[f"undo {name}"] += 1
            assert result == name
            return str(ctx.effect("undo", service.undo, name))

        return function_step(run, name=name, compensate=compensate)

    return LongTask(
        "saga",
        stages=[
            Stage("book", [step("flight"), step("hotel")]),
            Stage("pay", [step("charge"), function_step(lambda ctx: "no undo", name="note")]),
            *extra,
        ],
        **task,
    )


def undo_order(service: Service) -> list[str]:
    return [what for what, _ in service.calls if what.startswith("undo")]


def test_cancel_a_paused_thread_runs_compensations_newest_first(runner: Runner) -> None:
    service, ran = Service(), Counter[str]()
    gate = approval("confirm", plan=lambda ctx: {"total": 3})
    task = saga(
        service,
        ran,
        extra=[
            Stage("confirm", [gate]),
            Stage("wrap", [function_step(lambda ctx: "done", name="finish")]),
        ],
    )
    thread = runner.start(task, thread_id="t-cancel")
    assert runner.status(thread).status == "waiting_user"
    assert runner.cancel(thread, reason="customer changed plans", by="ops", task=task) is True
    status = runner.status(thread)
    assert status.status == "cancelled"
    # Reverse definition order: the later stage first, and within a stage the later step.
    assert undo_order(service) == ["undo charge", "undo hotel", "undo flight"]
    assert ran["finish"] == 0
    (cancelled,) = runner.events(thread, kinds=["longtask.cancelled"])
    assert cancelled.data["compensated"] == ["charge", "hotel", "flight"]
    assert cancelled.data["reason"] == "customer changed plans"
    (manual,) = runner.events(thread, kinds=["manual.cancel"])
    assert manual.data["by"] == "ops"
    done = runner.events(thread, kinds=["compensation.completed"])
    assert [e.step for e in done] == ["charge", "hotel", "flight"]
    ledger = {(e.step, e.name): e.status for e in runner.effects(thread)}
    assert ledger[("charge", "compensate")] == "succeeded"
    assert ledger[("charge", "compensate:undo")] == "succeeded"
    with pytest.raises(NothingToResume):
        runner.resume(thread, task=task)
    with pytest.raises(NothingToResume):
        runner.cancel(thread, task=task)
    assert len(undo_order(service)) == 3


def test_a_failed_compensation_is_continued_by_cancelling_again(runner: Runner) -> None:
    service, ran = Service(), Counter[str]()
    gate = approval("confirm", plan=lambda ctx: {"total": 3})
    task = saga(service, ran, extra=[Stage("confirm", [gate])])
    thread = runner.start(task, thread_id="t-undo-fails")
    service.fail_undo = {"hotel"}
    with pytest.raises(CompensationFailed, match="cannot undo hotel"):
        runner.cancel(thread, task=task)
    status = runner.status(thread)
    assert status.status == "cancelling"
    assert status.error is not None and status.error["step"] == "hotel"
    # Resuming does not go forward: it continues the cancel, which still fails.
    with pytest.raises(CompensationFailed):
        runner.resume(thread, task=task)
    service.fail_undo = set()
    assert runner.cancel(thread, task=task) is True
    assert runner.status(thread).status == "cancelled"
    assert undo_order(service) == ["undo charge", "undo hotel", "undo flight"]
    assert ran["undo charge"] == 1  # finished before the failure: not run again


def test_cancel_stops_a_running_thread_at_its_next_step(runner: Runner, db_url: str) -> None:
    service, ran = Service(), Counter[str]()
    started = threading.Event()

    def slow(ctx: StepContext) -> str:
        started.set()
        deadline = time.monotonic() + 20
        while not ctx.cancel_requested and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.5)  # hold the thread past the other runner's lock attempt
        return "stopped early" if ctx.cancel_requested else "ran out"

    task = saga(
        service,
        ran,
        extra=[
            Stage("slow", [function_step(slow, name="slow")]),
            Stage("later", [function_step(lambda ctx: ran.update(["later"]), name="later")]),
        ],
    )
    worker = threading.Thread(target=runner.start, args=(task,), kwargs={"thread_id": "t-live"})
    worker.start()
    assert started.wait(20)
    with Runner(db_url) as other:
        assert other.cancel("t-live", by="ops", task=task) is False  # the runner holds it
    worker.join(30)
    assert not worker.is_alive()
    assert runner.result("t-live", "slow") == "stopped early"
    assert ran["later"] == 0
    assert runner.status("t-live").status == "cancelled"
    assert undo_order(service) == ["undo charge", "undo hotel", "undo flight"]


def test_compensate_on_failure(runner: Runner) -> None:
    service, ran = Service(), Counter[str]()

    def broken(ctx: StepContext) -> None:
        raise ValueError("ledger mismatch")

    task = saga(
        service,
        ran,
        extra=[Stage("check", [function_step(broken, name="check")])],
        compensate_on_failure=True,
    )
    with pytest.raises(StepFailed, match="ledger mismatch"):
        runner.start(task, thread_id="t-undo-on-fail")
    status = runner.status("t-undo-on-fail")
    assert status.status == "failed"
    assert status.error is not None
    assert status.error["compensated"] == ["charge", "hotel", "flight"]
    assert undo_order(service) == ["undo charge", "undo hotel", "undo flight"]
    with pytest.raises(NothingToResume):
        runner.resume("t-undo-on-fail", task=task)
    with pytest.raises(InvalidInput):
        runner.retry("t-undo-on-fail", task=task)


def test_skip_a_failed_step_with_a_given_result(runner: Runner) -> None:
    ran: Counter[str] = Counter()

    def fine(ctx: StepContext) -> str:
        ran["fine"] += 1
        return "fine"

    def broken(ctx: StepContext) -> None:
        ran["broken"] += 1
        raise ValueError("upstream is down for the week")

    def report(ctx: StepContext) -> dict[str, Any]:
        ran["report"] += 1
        return {"fine": ctx.result("fine"), "broken": ctx.result("broken")}

    task = LongTask(
        "skippy",
        stages=[
            Stage("work", [function_step(fine, name="fine"), function_step(broken, name="broken")]),
            Stage("wrap", [function_step(report, name="report")]),
        ],
    )
    with pytest.raises(StepFailed):
        runner.start(task, thread_id="t-skip")
    with pytest.raises(InvalidInput, match="has no step"):
        runner.skip("t-skip", "nope", 1, task=task)
    with pytest.raises(InvalidInput, match="waits for"):
        runner.skip("t-skip", "report", 1, task=task)
    with pytest.raises(InvalidInput, match="JSON"):
        runner.skip("t-skip", "broken", object(), task=task)
    runner.skip("t-skip", "broken", {"manual": "data from the wiki"}, by="ops", task=task)
    assert runner.status("t-skip").status == "completed"
    assert runner.result("t-skip", "report") == {
        "fine": "fine",
        "broken": {"manual": "data from the wiki"},
    }
    assert ran == Counter({"fine": 1, "broken": 1, "report": 1})
    (manual,) = runner.events("t-skip", kinds=["manual.skip"])
    assert (manual.step, manual.data["by"]) == ("broken", "ops")
    with pytest.raises(NothingToResume):
        runner.skip("t-skip", "fine", 2, task=task)


def test_skip_refuses_approvals(runner: Runner) -> None:
    gate = approval("gate", plan=lambda ctx: {"x": 1})
    task = LongTask(
        "g", stages=[Stage("a", [function_step(lambda ctx: 1, name="one")]), Stage("b", [gate])]
    )
    runner.start(task, thread_id="t-gate")
    with pytest.raises(InvalidInput, match="longtask approve"):
        runner.skip("t-gate", "gate", True, task=task)


def test_a_cancel_during_the_last_step_wins_and_compensates(runner: Runner, db_url: str) -> None:
    """The cancel is answered "requested" while the last step runs (a step that does not look
    at ``ctx.cancel_requested``): the run must not complete over it."""
    service, ran = Service(), Counter[str]()
    started, finish = threading.Event(), threading.Event()

    def last(ctx: StepContext) -> str:
        started.set()
        assert finish.wait(30)
        return "done"

    task = saga(service, ran, extra=[Stage("last", [function_step(last, name="last")])])
    worker = threading.Thread(target=runner.start, args=(task,), kwargs={"thread_id": "t-last"})
    worker.start()
    assert started.wait(30)
    with Runner(db_url) as other:
        assert other.cancel("t-last", by="ops", task=task) is False  # the runner holds it
    finish.set()
    worker.join(30)
    assert not worker.is_alive()
    assert runner.status("t-last").status == "cancelled"
    assert undo_order(service) == ["undo charge", "undo hotel", "undo flight"]
    kinds = [e.kind for e in runner.events("t-last") if e.kind.startswith("longtask.")]
    assert kinds == ["longtask.started", "longtask.cancelled"]
    with pytest.raises(NothingToResume):
        runner.resume("t-last", task=task)


def test_a_cancel_just_after_completion_is_too_late_and_leaves_nothing(
    runner: Runner, db_url: str
) -> None:
    """The cancel reads the thread while its last step runs; the thread completes before the
    cancel is stored. The cancel is answered "too late" and stores nothing: no request (a
    later fork and resume of the thread runs), no manual.cancel event."""
    service, ran = Service(), Counter[str]()
    started, finish = threading.Event(), threading.Event()

    def last(ctx: StepContext) -> str:
        started.set()
        assert finish.wait(30)
        return "done"

    task = saga(service, ran, extra=[Stage("last", [function_step(last, name="last")])])
    worker = threading.Thread(target=runner.start, args=(task,), kwargs={"thread_id": "t-after"})
    worker.start()
    assert started.wait(30)

    def completing_clock() -> datetime:
        # The cancel asks the time after it read the thread (running) and before it stores
        # its request: the thread completes in between.
        finish.set()
        worker.join(30)
        return datetime.now(UTC)

    with Runner(db_url, clock=completing_clock) as other, pytest.raises(NothingToResume) as info:
        other.cancel("t-after", by="ops", task=task)
    assert not worker.is_alive()
    assert runner.status("t-after").status == "completed"
    assert runner.db.store.cancel_request("t-after") is None
    assert runner.events("t-after", kinds=["manual.cancel"]) == []
    assert str(info.value) == (
        "too late: thread 't-after' is completed already; the cancel changed nothing"
    )
    assert undo_order(service) == []
    # A fork before the last step runs forward again instead of being cancelled.
    (noted, *_) = runner.history("t-after", step="note")
    runner.fork("t-after", noted.checkpoint_id, update={"note": "again"}, task=task)
    runner.resume("t-after", task=task)
    assert runner.status("t-after").status == "completed"
    assert undo_order(service) == []


@pytest.mark.parametrize("kind", ["function", "map"])
def test_no_step_starts_after_a_cancel_the_run_has_not_seen(db_url: str, kind: str) -> None:
    """A cancel recorded while a step runs stops the run before the next step, even when the
    run's cancel watch has not polled yet (a long poll interval): the next step's code never
    runs, and it is not recorded as started."""
    ran = Counter[str]()
    started, finish = threading.Event(), threading.Event()

    def first(ctx: StepContext) -> str:
        started.set()
        assert finish.wait(30)
        ran["first"] += 1
        return "first"

    def second(ctx: StepContext) -> str:
        ran["second"] += 1
        return "second"

    def item(ctx: ItemContext, value: int) -> int:
        ran["item"] += 1
        return value

    def over(ctx: StepContext) -> list[int]:
        ran["over"] += 1
        return [1, 2, 3]

    after = (
        function_step(second, name="second")
        if kind == "function"
        else map_step(item, over=over, name="second")
    )
    task = LongTask(
        f"unseen_cancel_{kind}",
        stages=[Stage("one", [function_step(first, name="first")]), Stage("two", [after])],
    )
    thread = f"t-next-{kind}"
    with Runner(db_url, cancel_poll=3600) as holder:
        worker = threading.Thread(target=holder.start, args=(task,), kwargs={"thread_id": thread})
        worker.start()
        assert started.wait(30)
        with Runner(db_url) as other:
            other.cancel(thread, by="ops", task=task)
        finish.set()
        worker.join(30)
        assert not worker.is_alive()
        assert holder.status(thread).status == "cancelled"
        events = holder.events(thread)
    assert ran == Counter(first=1)
    assert [e.kind for e in events if e.step == "second"] == []
    assert "stage.started" not in [e.kind for e in events if e.stage == "two"]


def test_a_cancel_the_run_has_not_seen_does_not_leave_it_waiting(db_url: str) -> None:
    """The run's cancel watch has not polled yet (a long poll interval) when the step before
    an approval finishes: the run must not pause over the stored request."""
    service, ran = Service(), Counter[str]()
    started, finish = threading.Event(), threading.Event()

    def before_gate(ctx: StepContext) -> str:
        started.set()
        assert finish.wait(30)
        return "ready"

    task = saga(
        service,
        ran,
        extra=[
            Stage("ready", [function_step(before_gate, name="ready")]),
            Stage("confirm", [approval("confirm")]),
        ],
    )
    with Runner(db_url, cancel_poll=3600) as holder:
        worker = threading.Thread(
            target=holder.start, args=(task,), kwargs={"thread_id": "t-unseen"}
        )
        worker.start()
        assert started.wait(30)
        with Runner(db_url) as other:
            assert other.cancel("t-unseen", by="ops", task=task) is False
        finish.set()
        worker.join(30)
        assert not worker.is_alive()
        assert holder.status("t-unseen").status == "cancelled"
        assert holder.pending("t-unseen", task=task) == []
    assert undo_order(service) == ["undo charge", "undo hotel", "undo flight"]
