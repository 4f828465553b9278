"""Retries by error class, budgets and deadlines, against every backend.

Waits are taken by an injected ``sleep`` that advances an injected clock: no test sleeps for
real, and every wait the runtime asked for is visible in ``clock.slept``.
"""

from __future__ import annotations

import email.message
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import openai
import pytest

from longtask import (
    Budget,
    InvalidInput,
    LongTask,
    NothingToResume,
    PermissionDenied,
    Retry,
    Runner,
    Stage,
    StepContext,
    StepFailed,
    function_step,
)
from longtask.errors import StepExited

START = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
REQUEST = httpx.Request("POST", "https://api.example.test/v1/chat/completions")


class FakeTime:
    """Clock and sleep of the Runner: sleeping moves the clock, nothing waits."""

    def __init__(self) -> None:
        self.t = START
        self.slept: list[float] = []

    def __call__(self) -> datetime:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 3))
        self.t += timedelta(seconds=seconds)

    def advance(self, seconds: float) -> None:
        self.t += timedelta(seconds=seconds)


@pytest.fixture
def clock() -> FakeTime:
    return FakeTime()


@pytest.fixture
def runner(db_url: str, clock: FakeTime) -> Iterator[Runner]:
    r = Runner(db_url, clock=clock, sleep=clock.sleep)
    yield r
    r.close()


def flaky(errors: list[BaseException], calls: list[int]) -> Any:
    """A step function that raises ``errors`` one by one, then returns its attempt number."""

    def fn(ctx: StepContext) -> Any:
        calls.append(ctx.attempt)
        if errors:
            raise errors.pop(0)
        return {"attempt": ctx.attempt}

    return fn


def one_step(fn: Any, step_retry: Retry | None, **task: Any) -> LongTask:
    return LongTask(
        "flaky",
        stages=[
            Stage("work", [function_step(fn, name="call", retry=step_retry)]),
            Stage("after", [function_step(lambda ctx: ctx.result("call"), name="done")]),
        ],
        **task,
    )


def retry_events(runner: Runner, thread: str) -> list[dict[str, Any]]:
    return [{"attempt": e.attempt, **e.data} for e in runner.events(thread, kinds=["step.retry"])]


def rate_limit(seconds: str) -> openai.RateLimitError:
    response = httpx.Response(429, headers={"retry-after": seconds}, request=REQUEST)
    return openai.RateLimitError("Rate limit reached", response=response, body=None)


def test_transient_errors_back_off_exponentially(runner: Runner, clock: FakeTime) -> None:
    calls: list[int] = []
    errors: list[BaseException] = [ConnectionResetError("reset"), httpx.ConnectTimeout("slow")]
    policy = Retry(max_attempts=4, initial_wait=2, backoff=3, jitter=False)
    task = one_step(flaky(errors, calls), policy)
    thread = runner.start(task, thread_id="t-transient")
    assert runner.status(thread).status == "completed"
    assert calls == [1, 2, 3]
    assert clock.slept == [2.0, 6.0]
    assert runner.result(thread, "call") == {"attempt": 3}
    events = retry_events(runner, thread)
    assert [(e["attempt"], e["error_class"], e["outcome"], e["wait"]) for e in events] == [
        (1, "transient", "retry", 2.0),
        (2, "transient", "retry", 6.0),
    ]
    assert "ConnectionResetError: reset" in events[0]["error"]
    completed = runner.events(thread, kinds=["step.completed"])
    assert [e.attempt for e in completed if e.step == "call"] == [3]


def test_rate_limited_waits_what_the_server_asked(runner: Runner, clock: FakeTime) -> None:
    calls: list[int] = []
    # The server's 37 s is far above the policy's own waits (and its max_wait).
    errors: list[BaseException] = [rate_limit("37")]
    task = one_step(flaky(errors, calls), Retry(max_attempts=3, initial_wait=1, max_wait=5))
    thread = runner.start(task, thread_id="t-429")
    assert runner.status(thread).status == "completed"
    assert clock.slept == [37.0]
    (event,) = retry_events(runner, thread)
    assert event["error_class"] == "rate_limited"
    assert event["wait"] == 37.0
    assert event["status_code"] == 429


def test_rate_limit_with_an_http_date(runner: Runner, clock: FakeTime) -> None:
    headers = email.message.Message()
    at = START + timedelta(seconds=90)
    headers["Retry-After"] = at.strftime("%a, %d %b %Y %H:%M:%S GMT")
    import urllib.error

    err = urllib.error.HTTPError("https://svc.test/x", 429, "Too Many", headers, None)
    calls: list[int] = []
    task = one_step(flaky([err], calls), Retry(max_attempts=2, initial_wait=1))
    runner.start(task, thread_id="t-date")
    assert clock.slept == [90.0]


def test_invalid_input_fails_without_retrying(runner: Runner, clock: FakeTime) -> None:
    response = httpx.Response(400, request=REQUEST)
    bad = openai.BadRequestError("max_tokens is too large", response=response, body=None)
    calls: list[int] = []
    task = one_step(flaky([bad, bad], calls), Retry(max_attempts=5, initial_wait=1))
    with pytest.raises(StepFailed, match="max_tokens is too large"):
        runner.start(task, thread_id="t-400")
    assert calls == [1]
    assert clock.slept == []
    status = runner.status("t-400")
    assert status.status == "failed"
    assert status.error is not None and status.error["error_class"] == "invalid_input"
    (event,) = retry_events(runner, "t-400")
    assert (event["outcome"], event["status_code"]) == ("failed", 400)


def test_attempts_run_out_then_a_manual_retry_grants_more(runner: Runner) -> None:
    calls: list[int] = []
    errors: list[BaseException] = [TimeoutError("t")] * 3
    task = one_step(flaky(errors, calls), Retry(max_attempts=2, initial_wait=0))
    with pytest.raises(StepFailed):
        runner.start(task, thread_id="t-runout")
    assert calls == [1, 2]
    outcomes = [e["outcome"] for e in retry_events(runner, "t-runout")]
    assert outcomes == ["retry", "failed"]
    with pytest.raises(InvalidInput, match="the failed step is 'call'"):
        runner.retry("t-runout", "done", task=task)
    runner.retry("t-runout", by="ops", task=task)
    # Numbered on (3, 4), with a fresh window of two attempts.
    assert calls == [1, 2, 3, 4]
    assert runner.status("t-runout").status == "completed"
    manual = runner.events("t-runout", kinds=["manual.retry"])
    assert [(e.step, e.data["by"]) for e in manual] == [("call", "ops")]


def test_permission_pauses_for_a_person(runner: Runner) -> None:
    calls: list[int] = []
    response = httpx.Response(403, request=REQUEST)
    denied = openai.PermissionDeniedError("key lacks scope", response=response, body=None)
    task = one_step(flaky([denied], calls), Retry(max_attempts=5, initial_wait=1))
    thread = runner.start(task, thread_id="t-403")
    status = runner.status(thread)
    assert status.status == "waiting_user"
    (waiting,) = status.waiting
    assert waiting["kind"] == "permission" and waiting["step"] == "call"
    assert "key lacks scope" in waiting["reason"]
    assert "longtask retry t-403" in waiting["command"]
    assert [s.state for s in status.steps] == ["waiting", "pending"]
    assert calls == [1]
    runner.retry(thread, task=task)
    assert calls == [1, 2]
    assert runner.status(thread).status == "completed"


def test_our_own_permission_error_pauses_too(runner: Runner) -> None:
    calls: list[int] = []
    task = one_step(flaky([PermissionDenied("no push access")], calls), None)
    runner.start(task, thread_id="t-own")
    assert runner.status("t-own").waiting[0]["kind"] == "permission"


def charging(tokens: int, cost: float = 0.0) -> Any:
    def fn(ctx: StepContext) -> int:
        ctx.charge(tokens=tokens, cost=cost, tool_calls=1)
        return tokens

    return fn


def budget_task(budget: Budget, **task: Any) -> LongTask:
    return LongTask(
        "spend",
        stages=[
            Stage("one", [function_step(charging(700, 0.5), name="first")]),
            Stage("two", [function_step(charging(500, 0.5), name="second")]),
            Stage("three", [function_step(charging(10), name="third")]),
        ],
        budget=budget,
        **task,
    )


def test_over_budget_pauses_and_raising_it_resumes(runner: Runner) -> None:
    task = budget_task(Budget(tokens=1000, cost=5))
    thread = runner.start(task, thread_id="t-budget")
    status = runner.status(thread)
    assert status.status == "waiting_user"
    (waiting,) = status.waiting
    assert waiting["kind"] == "budget" and waiting["step"] == "third"
    assert waiting["reason"] == "budget exceeded: tokens 1200 of 1000"
    assert [s.state for s in status.steps] == ["completed", "completed", "waiting"]
    state = runner.budget(thread)
    assert state is not None and state.used["tokens"] == 1200 and state.used["tool_calls"] == 2
    (exceeded,) = runner.events(thread, kinds=["budget.exceeded"])
    assert exceeded.step == "third" and exceeded.data["used"]["tokens"] == 1200
    # Still over: resuming pauses again, the step does not run.
    runner.resume(thread, task=task)
    assert runner.status(thread).status == "waiting_user"
    with pytest.raises(InvalidInput, match="no tool_calls limit"):
        runner.raise_budget(thread, tool_calls=5)
    with pytest.raises(InvalidInput, match="greater than 0"):
        runner.raise_budget(thread, tokens=-5)
    assert runner.budget(thread).limits["tokens"] == 1000  # type: ignore[union-attr]
    runner.raise_budget(thread, tokens=500, by="ops")
    runner.resume(thread, task=task)
    assert runner.status(thread).status == "completed"
    assert runner.budget(thread).used["tokens"] == 1210  # type: ignore[union-attr]
    (manual,) = runner.events(thread, kinds=["manual.budget"])
    assert manual.data["tokens"] == 500 and manual.data["by"] == "ops"


def test_over_budget_fails_when_the_task_says_so(runner: Runner) -> None:
    task = budget_task(Budget(cost=0.75), on_limit="fail")
    with pytest.raises(StepFailed, match=r"budget exceeded: cost 1 of 0\.75"):
        runner.start(task, thread_id="t-fail")
    status = runner.status("t-fail")
    assert status.status == "failed"
    assert status.error is not None and status.error["step"] == "third"


def test_deadline_pauses_and_can_be_extended(runner: Runner, clock: FakeTime) -> None:
    def slow(ctx: StepContext) -> str:
        clock.advance(120)  # the step takes two minutes of (fake) time
        return "ok"

    task = LongTask(
        "hurry",
        stages=[
            Stage("a", [function_step(slow, name="slow")]),
            Stage("b", [function_step(lambda ctx: "late", name="late")]),
        ],
        deadline=timedelta(minutes=1),
    )
    thread = runner.start(task, thread_id="t-deadline")
    status = runner.status(thread)
    assert status.status == "waiting_user"
    assert status.waiting[0]["kind"] == "deadline"
    assert status.waiting[0]["reason"] == "deadline exceeded: deadline passed"
    runner.raise_budget(thread, deadline=3600)
    runner.resume(thread, task=task)
    assert runner.status(thread).status == "completed"


def test_wall_time_counts_running_steps(runner: Runner, clock: FakeTime) -> None:
    task = LongTask(
        "timed",
        stages=[Stage("a", [function_step(lambda ctx: 1, name="quick")])],
        budget=Budget(wall_time=3600),
    )
    thread = runner.start(task, thread_id="t-wall")
    state = runner.budget(thread)
    assert state is not None and 0 < state.used["wall_time"] < 60


def test_task_retry_is_the_default_of_every_step(runner: Runner, clock: FakeTime) -> None:
    calls: list[int] = []
    task = one_step(
        flaky([ConnectionError("x")], calls),
        None,
        retry=Retry(max_attempts=2, initial_wait=4, jitter=False),
    )
    runner.start(task, thread_id="t-default")
    assert calls == [1, 2] and clock.slept == [4.0]


def test_limits_are_validated_with_the_definition() -> None:
    from longtask import DefinitionError

    with pytest.raises(DefinitionError) as err:
        budget_task(Budget(tokens=0, cost=-1), deadline=0)
    assert len(err.value.problems) == 3


def test_a_closed_thread_cannot_be_retried(runner: Runner) -> None:
    task = one_step(flaky([], []), None)
    runner.start(task, thread_id="t-done")
    with pytest.raises(InvalidInput, match="is completed"):
        runner.retry("t-done", task=task)
    with pytest.raises(NothingToResume):
        runner.skip("t-done", "call", 1, task=task)


def test_sys_exit_outside_the_step_function_fails_the_thread(db_url: str) -> None:
    """A SystemExit raised by the run's own machinery around a step (here the injected
    sleep between two attempts) fails the thread instead of leaving it running."""

    def leave(seconds: float) -> None:
        raise SystemExit(3)

    @function_step(retry=Retry(max_attempts=2, initial_wait=1, max_wait=1))
    def flaky_once(ctx: StepContext) -> int:
        if ctx.attempt == 1:
            raise ConnectionResetError("reset")
        return 1

    task = LongTask("exits", stages=[Stage("one", [flaky_once])])
    with Runner(db_url, sleep=leave) as runner:
        with pytest.raises(StepExited, match=r"sys.exit\(3\) was called in the run"):
            runner.start(task, thread_id="x1")
        st = runner.status("x1")
        assert st.status == "failed" and st.error is not None
        assert st.error["type"] == "SystemExit"


def test_an_attempts_record_is_stored_with_its_retry_event_or_not_at_all(db_url: str) -> None:
    # A writer whose lease is gone stores neither the record of a failed attempt nor the
    # step.retry telling of it: they commit in one fenced transaction (apart, a crash
    # between the two kept a record whose event was lost).
    from longtask.checkpointers import Database
    from longtask.steps import StepEnv
    from longtask.store import Attempts, NewEvent, ValueCodec

    db = Database.open(db_url, upgrade=True)
    try:
        env = StepEnv(store=db.store, codec=ValueCodec(db.store), events=db.events)
        db.fence.hold("t-fenced", 999)  # an epoch no lease row has
        db.events.put(NewEvent("t-fenced", "step.retry", "t-fenced/retry/1", step="s", attempt=1))
        with pytest.raises(Exception, match="lease lost"):
            env.record_attempt("t-fenced", ("s", -1), Attempts(1, 0, 123.0))
        db.fence.drop("t-fenced")
        db.events.take("t-fenced")
        assert db.store.attempts("t-fenced") == {}
        assert db.store.events("t-fenced") == []

        env.events.put(NewEvent("t-ok", "step.retry", "t-ok/retry/1", step="s", attempt=1))
        env.record_attempt("t-ok", ("s", -1), Attempts(1, 0, 123.0))
        assert db.store.attempts("t-ok")[("s", -1)].failed == 1
        assert [e.kind for e in db.store.events("t-ok")] == ["step.retry"]
    finally:
        db.close()
