"""The side-effect ledger against every backend.

A process that dies during an outside call is simulated by a KeyboardInterrupt raised from
the call (it passes every `except Exception` and stops the run as it is, like a kill would;
another BaseException would fail the step): the ledger row stays `started`, which is exactly
what a real crash leaves behind (the acceptance tests kill real processes).
"""

from __future__ import annotations

from typing import Any

import pytest

from longtask import (
    EffectCall,
    InvalidInput,
    LongTask,
    Retry,
    Runner,
    Stage,
    StepContext,
    StepFailed,
    function_step,
)
from longtask.errors import BadAnswer


class Crash(KeyboardInterrupt):
    pass


class Service:
    """An outside system that records every call by idempotency key."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.crash_once = False
        self.fail_times = 0

    def charge(self, amount: int, idempotency_key: str) -> dict[str, Any]:
        self.calls.append((idempotency_key, amount))
        if self.crash_once:
            self.crash_once = False
            raise Crash
        if self.fail_times:
            self.fail_times -= 1
            raise ConnectionError("service unavailable")
        return {"charged": amount, "id": idempotency_key[-6:]}

    def find(self, call: EffectCall) -> dict[str, Any] | None:
        amounts = [a for k, a in self.calls if k == call.idempotency_key]
        return {"charged": amounts[0], "found": True} if amounts else None


def task_for(service: Service, *, reconcile: bool, retry: Retry | None = None) -> LongTask:
    @function_step(retry=retry)
    def pay(ctx: StepContext) -> Any:
        return ctx.effect(
            "charge", service.charge, 42, reconcile=service.find if reconcile else None
        )

    @function_step
    def receipt(ctx: StepContext) -> str:
        return f"receipt for {ctx.result('pay')['charged']}"

    return LongTask("pay", stages=[Stage("pay", [pay]), Stage("done", [receipt])])


def test_replay_returns_the_recorded_result(runner: Runner) -> None:
    service = Service()
    task = task_for(service, reconcile=False)
    thread = runner.start(task)
    assert runner.result(thread, "receipt") == "receipt for 42"
    [effect] = runner.effects(thread)
    assert (effect.status, effect.calls, effect.result["charged"]) == ("succeeded", 1, 42)
    assert service.calls == [(effect.key, 42)]  # fn got the idempotency key
    # a fork of the step with the same arguments: the ledger answers, no second call
    # (at the named head checkpoint: LangGraph's fork, the way a finished thread changes)
    graph = runner.graph(task)
    head = graph.get_state({"configurable": {"thread_id": thread}}).config
    graph.update_state(head, {"out.receipt": runner.codec.encode("x")})
    from langgraph.types import Command

    runner.resume(thread, Command(goto="pay"), task=task)
    assert len(service.calls) == 1
    kinds = [e.kind for e in runner.events(thread) if e.kind.startswith("effect.")]
    assert kinds == ["effect.started", "effect.succeeded"]


def test_cut_off_call_is_reconciled(runner: Runner) -> None:
    service = Service()
    service.crash_once = True
    task = task_for(service, reconcile=True)
    with pytest.raises(Crash):
        runner.start(task, thread_id="t-rec")
    assert [e.status for e in runner.effects("t-rec")] == ["started"]
    runner.resume("t-rec", task=task)
    assert runner.status("t-rec").status == "completed"
    assert len(service.calls) == 1  # the reconciler found it; not called again
    assert runner.result("t-rec", "pay") == {"charged": 42, "found": True}


def test_cut_off_call_without_reconciler_waits_for_a_person(runner: Runner) -> None:
    service = Service()
    service.crash_once = True
    task = task_for(service, reconcile=False)
    with pytest.raises(Crash):
        runner.start(task, thread_id="t-ask")
    runner.resume("t-ask", task=task)
    st = runner.status("t-ask")
    assert st.status == "waiting_user"
    [waiting] = st.waiting
    assert waiting["kind"] == "effect" and waiting["reason"] == "effect outcome unknown"
    key = waiting["key"]
    # resuming again without an answer never calls the service
    runner.resume("t-ask", task=task)
    assert len(service.calls) == 1 and runner.status("t-ask").status == "waiting_user"
    before = runner.status("t-ask").checkpoint_id
    # an answer that does not say what became of the call is refused, naming the shapes
    with pytest.raises(BadAnswer, match=r"unknown keys \['anything'\].*\{\"retry\": true\}"):
        runner.answer("t-ask", {"anything": 1}, interrupt="pay", task=task)
    with pytest.raises(InvalidInput, match="no effect"):
        runner.resolve_effect("t-ask", "eff-nope", "retry", task=task)
    assert runner.status("t-ask").checkpoint_id == before
    runner.resolve_effect("t-ask", key, "retry", by="ops", task=task)
    assert runner.status("t-ask").status == "completed"
    assert [k for k, _ in service.calls] == [key, key]  # called again only when told to
    with pytest.raises(InvalidInput, match="not unknown"):
        runner.resolve_effect("t-ask", key, "succeeded", result={}, task=task)
    assert [e.kind for e in runner.events("t-ask", kinds=["manual.resolve"])] == ["manual.resolve"]


def test_resolved_as_succeeded_uses_the_given_result(runner: Runner) -> None:
    service = Service()
    service.crash_once = True
    task = task_for(service, reconcile=False)
    with pytest.raises(Crash):
        runner.start(task, thread_id="t-ok")
    runner.resume("t-ok", task=task)
    key = runner.status("t-ok").waiting[0]["key"]
    runner.resolve_effect("t-ok", key, "succeeded", result={"charged": 42, "by": "hand"}, task=task)
    assert runner.result("t-ok", "pay") == {"charged": 42, "by": "hand"}
    assert len(service.calls) == 1


def test_failed_calls_follow_the_retry_policy(runner: Runner) -> None:
    service = Service()
    service.fail_times = 2
    task = task_for(
        service, reconcile=False, retry=Retry(max_attempts=3, initial_wait=0, max_wait=0)
    )
    thread = runner.start(task)
    assert runner.result(thread, "pay")["charged"] == 42
    [effect] = runner.effects(thread)
    assert effect.calls == 3 and len(service.calls) == 3
    failed = [e for e in runner.events(thread) if e.kind == "effect.failed"]
    assert len(failed) == 2 and "service unavailable" in failed[0].data["error"]


class Opaque:
    """An argument whose text holds its memory address: no key can be derived from it."""


def test_an_argument_without_a_canonical_encoding_is_refused(runner: Runner) -> None:
    calls: list[Any] = []

    @function_step(retry=Retry(max_attempts=3, initial_wait=0, max_wait=0))
    def pay(ctx: StepContext) -> Any:
        return ctx.effect("charge", lambda obj: calls.append(obj), Opaque())

    task = LongTask("opaque", stages=[Stage("pay", [pay])])
    with pytest.raises(StepFailed) as info:
        runner.start(task, thread_id="opaque")
    message = str(info.value).splitlines()[0]
    assert "an argument of effect 'charge' holds a " in message
    assert "Opaque, which has no canonical encoding" in message
    assert 'Pass key="..." to ctx.effect' in message
    assert calls == [] and runner.effects("opaque") == []
    # refused once: the same arguments fail the same way, so no retry
    assert len([e for e in runner.events("opaque") if e.kind == "step.failed"]) == 1


def test_an_explicit_key_replaces_the_arguments(runner: Runner) -> None:
    service = Service()
    seen: list[Any] = []

    @function_step
    def pay(ctx: StepContext) -> Any:
        def charge(obj: Opaque, amount: int, idempotency_key: str) -> Any:
            seen.append(obj)
            return service.charge(amount, idempotency_key)

        return ctx.effect("charge", charge, Opaque(), 42, key="order-17")

    printer = {"jammed": True}

    @function_step
    def receipt(ctx: StepContext) -> str:
        if printer["jammed"]:
            raise RuntimeError("the printer is jammed")
        return f"receipt for {ctx.result('pay')['charged']}"

    task = LongTask("own-key", stages=[Stage("pay", [pay]), Stage("done", [receipt])])
    # the thread fails after the charge, so that the step can be run again in place (a
    # completed thread is forked instead, never changed in place)
    with pytest.raises(StepFailed):
        runner.start(task, thread_id="own-key")
    thread = "own-key"
    printer["jammed"] = False
    [effect] = runner.effects(thread)
    assert (effect.status, effect.calls, effect.args_hash) == ("succeeded", 1, "key:order-17")
    # a re-run of the step with a new (differently printed) object finds the recorded call
    from langgraph.types import Command

    runner.resume(thread, Command(goto="pay"), task=task)
    assert len(service.calls) == 1 and len(seen) == 1
    assert service.calls == [(effect.key, 42)]
