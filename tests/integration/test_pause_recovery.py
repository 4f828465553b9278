"""A person's way on from a pause, against every backend: an approval that was rejected (or
timed out) is asked again with ``retry``, and ``resume --goto`` does not jump past a pending
approval or wait unless told to.

Time comes from an injected fake clock. The tasks are module-level so that ``tick`` (which
loads a thread's task by reference) finds them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from langgraph.types import Command

from longtask import (
    InvalidInput,
    LongTask,
    Runner,
    Stage,
    StepContext,
    StepFailed,
    approval,
    function_step,
    wait_for,
)

START = datetime(2030, 1, 1, tzinfo=UTC)

#: step name -> how often its function ran
ran: Counter[str] = Counter()


class FakeClock:
    def __init__(self) -> None:
        self.t = START

    def __call__(self) -> datetime:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += timedelta(seconds=seconds)


@pytest.fixture(autouse=True)
def _reset_calls() -> Iterator[None]:
    ran.clear()
    yield
    ran.clear()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def runner(db_url: str, clock: FakeClock) -> Iterator[Runner]:
    r = Runner(db_url, clock=clock)
    yield r
    r.close()


def _build(ctx: StepContext) -> str:
    ran["build"] += 1
    return "app-1.0"


def _publish(ctx: StepContext) -> str:
    ran["publish"] += 1
    return f"published {ctx.result('build')}"


def _plan(ctx: StepContext) -> dict[str, Any]:
    return {"ship": ctx.result("build")}


#: build -> gate (an approval that fails the thread when rejected or timed out) -> publish
GATED = LongTask(
    "recovery_gated",
    stages=[
        Stage("prepare", [function_step(_build, name="build")]),
        Stage("approve", [approval("gate", plan=_plan, approvers=["carol", "dave"], timeout=3600)]),
        Stage("ship", [function_step(_publish, name="publish")]),
    ],
)

#: build -> ci (an outside event) -> publish
SIGNALLED = LongTask(
    "recovery_signalled",
    stages=[
        Stage("prepare", [function_step(_build, name="build")]),
        Stage("check", [wait_for("ci")]),
        Stage("ship", [function_step(_publish, name="publish")]),
    ],
)


def kinds(runner: Runner, thread: str) -> Counter[str]:
    return Counter(e.kind for e in runner.events(thread))


@pytest.mark.parametrize("how", ["rejected", "timed out"])
def test_retry_asks_a_rejected_or_timed_out_approval_again(
    runner: Runner, clock: FakeClock, how: str
) -> None:
    thread = runner.start(GATED, thread_id="again")
    (first,) = runner.pending(thread)
    if how == "rejected":
        with pytest.raises(StepFailed) as info:
            runner.reject(thread, "gate", by="carol", comment="not yet")
        message = str(info.value)
        assert "approval 'gate' was rejected by carol: not yet" in message
    else:
        clock.advance(3601)
        assert [(r.step, r.outcome) for r in runner.tick()] == [("gate", "failed")]
        message = runner.status(thread).error["message"]  # type: ignore[index]
    assert "PauseOutcome" not in message
    failed = runner.status(thread)
    assert failed.status == "failed"
    assert failed.error is not None and failed.error["type"] == how
    if how == "rejected":
        assert "run `longtask retry again gate`" in message

    # resume only repeats the outcome: refused, on one line, changing nothing
    before = kinds(runner, thread)
    with pytest.raises(InvalidInput, match="longtask retry again gate"):
        runner.resume(thread, Command(goto="publish"))
    with pytest.raises(InvalidInput) as refused:
        runner.resume(thread)
    assert "\n" not in str(refused.value)
    said = "was rejected" if how == "rejected" else "timed out"
    assert f"step 'gate' of thread 'again' {said}; resuming would only" in str(refused.value)
    assert "longtask retry again gate" in str(refused.value)
    assert "PauseOutcome" not in str(refused.value)
    after = runner.status(thread)
    assert (after.status, after.checkpoint_id, after.runs, after.error) == (
        failed.status,
        failed.checkpoint_id,
        failed.runs,
        failed.error,
    )
    assert kinds(runner, thread) == before

    # retry asks again: a fresh request, with its own time and deadline
    clock.advance(100)
    runner.retry(thread, "gate", by="dave")
    st = runner.status(thread)
    assert st.status == "waiting_user"
    assert st.error is None
    (second,) = runner.pending(thread)
    assert second.interrupt_id != first.interrupt_id
    assert second.request["plan_hash"] == first.request["plan_hash"]
    assert second.request["requested_at"] != first.request["requested_at"]
    assert datetime.fromisoformat(second.request["deadline"]) == clock() + timedelta(seconds=3600)
    (manual,) = runner.events(thread, kinds=["manual.retry"])
    assert (manual.step, manual.data["by"]) == ("gate", "dave")  # type: ignore[index]
    assert kinds(runner, thread)["approval.required"] == 2

    runner.approve(thread, "gate", by="dave")
    assert runner.status(thread).status == "completed"
    assert ran == Counter({"build": 1, "publish": 1})
    outcomes = [e.data["outcome"] for e in runner.events(thread, kinds=["approval.resolved"])]  # type: ignore[index]
    assert outcomes == (["rejected", "approved"] if how == "rejected" else ["approved"])
    assert kinds(runner, thread)["longtask.failed"] == 1


def test_goto_past_a_pending_approval_is_refused_unless_told(
    runner: Runner, clock: FakeClock
) -> None:
    thread = runner.start(GATED, thread_id="jump")
    before = runner.status(thread)
    assert before.status == "waiting_user"
    with pytest.raises(InvalidInput) as info:
        runner.resume(thread, Command(goto="publish"))
    message = str(info.value)
    assert "\n" not in message
    assert "cannot go to 'publish': it comes after the pending approval 'gate'" in message
    assert "`longtask approve jump gate --by NAME`" in message
    assert "--skip-pending" in message
    after = runner.status(thread)
    assert (after.status, after.checkpoint_id, after.runs) == (
        before.status,
        before.checkpoint_id,
        before.runs,
    )
    assert ran == Counter({"build": 1})
    assert runner.events(thread, kinds=["manual.goto"]) == []

    # Told explicitly: it goes, and the jump is recorded with who made it.
    runner.resume(thread, Command(goto="publish"), skip_pending=True, by="ops")
    assert ran == Counter({"build": 1, "publish": 1})
    (manual,) = runner.events(thread, kinds=["manual.goto"])
    assert manual.data == {"by": "ops", "goto": ["publish"], "skipped_pending": ["gate"]}
    # The approval itself still waits for its answer.
    assert [p.step for p in runner.pending(thread)] == ["gate"]


def test_cli_goto_past_a_pending_wait_is_refused(db_url: str) -> None:
    # Imported here: the CLI imports this file by path to load the task, without tests/.
    from conftest import run_cli

    with Runner(db_url) as runner:
        runner.start(SIGNALLED, thread_id="cli-jump", task_ref=f"{__file__}:SIGNALLED")
    refused = run_cli("resume", "cli-jump", "--goto", "publish", db=db_url)
    assert refused.returncode == 1, refused.stderr
    assert refused.stderr.count("\n") == 1, refused.stderr
    assert "it comes after the pending wait 'ci'" in refused.stderr
    assert "`longtask signal cli-jump ci --payload JSON`" in refused.stderr
    usage = run_cli("resume", "cli-jump", "--skip-pending", db=db_url)
    assert usage.returncode == 2, usage.stderr
    went = run_cli(
        "resume", "cli-jump", "--goto", "publish", "--skip-pending", "--by", "ops", db=db_url
    )
    assert went.returncode == 3, went.stdout + went.stderr  # the wait still waits
    with Runner(db_url) as runner:
        (manual,) = runner.events("cli-jump", kinds=["manual.goto"])
        assert manual.data == {"by": "ops", "goto": ["publish"], "skipped_pending": ["ci"]}
        done = [e.step for e in runner.events("cli-jump", kinds=["step.completed"])]
        assert done == ["build", "publish"]


def _publish_approved(ctx: Any) -> dict[str, Any]:
    ran["publish"] += 1
    return {"published": True, "approved_by": ctx.result("gate")["by"]}


def _notify(ctx: Any) -> dict[str, Any]:
    ran["notify"] += 1
    return {"told": ctx.result("publish")}


#: build -> gate (an approval) -> publish, which reads the approval -> notify, which reads
#: publish
READS_GATE = LongTask(
    "recovery_reads_gate",
    stages=[
        Stage("prepare", [function_step(_build, name="build")]),
        Stage("approve", [approval("gate", plan=_plan, approvers=["carol", "dave"], timeout=3600)]),
        Stage("ship", [function_step(_publish_approved, name="publish")]),
        Stage("tell", [function_step(_notify, name="notify")]),
    ],
)


def test_goto_past_a_pause_to_a_step_that_needs_its_answer_keeps_the_thread_answerable(
    runner: Runner, clock: FakeClock
) -> None:
    """Issue 28, item 5: the step gone to reads the skipped approval's result. It must not
    fail the thread (after which the approval could no longer be given and every resume or
    retry failed the same way): it waits, with the approval, and runs once it is given."""
    thread = runner.start(READS_GATE, thread_id="jump-reads")
    runner.resume(thread, Command(goto="publish"), skip_pending=True, by="ops")
    st = runner.status(thread)
    assert st.status == "waiting_user", st.error
    assert [p.step for p in runner.pending(thread)] == ["gate"]
    (deferred,) = runner.events(thread, kinds=["step.skipped"])
    assert deferred.step == "publish" and deferred.data["waiting_for"] == ["gate"]  # type: ignore[index]

    runner.approve(thread, "gate", by="dave")
    assert runner.status(thread).status == "completed"
    published = {"published": True, "approved_by": "dave"}
    assert runner.result(thread, "publish") == published
    # notify, set off by the early publish, waited for its result too
    assert runner.result(thread, "notify") == {"told": published}
    assert [e.step for e in runner.events(thread, kinds=["step.completed"])] == [
        "build",
        "gate",
        "publish",
        "notify",
    ]
