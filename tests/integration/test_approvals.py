"""Approvals and waits against every backend: plan-bound decisions, freshness (valid_for),
deadlines acted on by ``tick``, parallel approvals, rejection policies, and bad answers that
change nothing.

Time comes from an injected fake clock, never from sleeping. The tasks are module-level so
that ``Runner.tick()`` (which loads a thread's task by reference) finds them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import pytest
from langgraph.types import Command
from pydantic import BaseModel

from longtask import (
    Decision,
    InvalidInput,
    LongTask,
    LongTaskError,
    Runner,
    Stage,
    StepContext,
    StepFailed,
    ThreadNotFound,
    approval,
    function_step,
    wait_for,
)
from longtask.model import FunctionStep, PauseStep

START = datetime(2030, 1, 1, tzinfo=UTC)


class FakeClock:
    """The Runner's clock: returns a fixed time that only moves when told to."""

    def __init__(self, start: datetime = START) -> None:
        self.t = start

    def now(self) -> datetime:
        return self.t

    def advance(self, seconds: float) -> datetime:
        self.t += timedelta(seconds=seconds)
        return self.t

    __call__ = now


#: step name -> how often its function ran (reset before every test)
ran: Counter[str] = Counter()


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


def tracked(name: str, fn: Callable[[StepContext], Any] | None = None) -> FunctionStep:
    """A function step that counts its calls in ``ran``."""

    def run(ctx: StepContext) -> Any:
        ran[name] += 1
        return fn(ctx) if fn is not None else name

    run.__qualname__ = f"approvals_{name}"
    return function_step(run, name=name)


# -- tasks ---------------------------------------------------------------------------------


def release_plan(ctx: StepContext) -> dict[str, Any]:
    return {"artifact": ctx.result("build")["artifact"], "channel": "stable"}


#: build -> ship_ok (approval of a plan computed from build) -> publish. publish does not
#: read the decision, so a publish that runs without one shows up in ``ran``, not as a crash.
RELEASE = LongTask(
    "approvals_release",
    stages=[
        Stage("prepare", [tracked("build", lambda c: {"artifact": "app-1.0.tar.gz"})]),
        Stage(
            "approve",
            [
                approval(
                    "ship_ok",
                    plan=release_plan,
                    approvers=["alice", "bob"],
                    valid_for=600,
                    timeout=3600,
                )
            ],
        ),
        Stage("ship", [tracked("publish", lambda c: f"published {c.result('build')['artifact']}")]),
    ],
)


def pause_task(name: str, pause: PauseStep) -> LongTask:
    """build -> PAUSE (named 'gate') -> publish -> fallback; fallback records what it sees
    of the pause's result, so a skip ahead to it can be checked."""
    return LongTask(
        name,
        stages=[
            Stage("prepare", [tracked("build")]),
            Stage("pause", [pause]),
            Stage("work", [tracked("publish")]),
            Stage("wrap", [tracked("fallback", lambda c: {"saw": c.result("gate")})]),
        ],
    )


def gate_plan(ctx: StepContext) -> dict[str, str]:
    return {"do": "publish", "after": ctx.result("build")}


TIMEOUT_FAIL = pause_task("approvals_timeout_fail", approval("gate", timeout=3600))
TIMEOUT_REJECT_FAIL = pause_task(
    "approvals_timeout_reject_fail", approval("gate", timeout=3600, on_timeout="reject")
)
TIMEOUT_REJECT_SKIP = pause_task(
    "approvals_timeout_reject_skip",
    approval("gate", timeout=3600, on_timeout="reject", on_reject="fallback"),
)
TIMEOUT_SKIP_AHEAD = pause_task(
    "approvals_timeout_skip_ahead", approval("gate", timeout=3600, on_timeout="fallback")
)
WAIT_TIMEOUT_SKIP = pause_task(
    "approvals_wait_timeout_skip", wait_for("gate", timeout=3600, on_timeout="skip")
)
WAIT_TIMEOUT_FAIL = pause_task("approvals_wait_timeout_fail", wait_for("gate", timeout=3600))
REJECT_FAIL = pause_task(
    "approvals_reject_fail", approval("gate", plan=gate_plan, approvers=["carol", "dave"])
)
REJECT_SKIP = pause_task(
    "approvals_reject_skip", approval("gate", plan=gate_plan, on_reject="fallback")
)

APPROVERS = {"legal": "lena", "security": "sam"}

PARALLEL = LongTask(
    "approvals_parallel",
    stages=[
        Stage("prepare", [tracked("build", lambda c: {"terms": "v2", "scan": "clean"})]),
        Stage(
            "review",
            [
                approval(
                    "legal",
                    plan=lambda c: {"terms": c.result("build")["terms"]},
                    approvers=[APPROVERS["legal"]],
                ),
                approval(
                    "security",
                    plan=lambda c: {"scan": c.result("build")["scan"]},
                    approvers=[APPROVERS["security"]],
                ),
            ],
        ),
        Stage(
            "ship",
            [
                tracked(
                    "ship",
                    lambda c: {n: c.result(n)["by"] for n in ("legal", "security")},
                )
            ],
        ),
    ],
)


class CiResult(BaseModel):
    status: Literal["passed", "failed"]
    url: str | None = None


DEPLOY_SCHEMA = {
    "type": "object",
    "properties": {"env": {"enum": ["prod", "staging"]}},
    "required": ["env"],
}

SIGNALS = LongTask(
    "approvals_signals",
    stages=[
        Stage(
            "wait",
            [wait_for("ci", schema=CiResult), wait_for("deploy", schema=DEPLOY_SCHEMA)],
        ),
        Stage("after", [tracked("after", lambda c: [c.result("ci"), c.result("deploy")])]),
    ],
)


# -- helpers -------------------------------------------------------------------------------


def only_pending(runner: Runner, thread: str, task: LongTask) -> dict[str, Any]:
    items = runner.pending(thread, task=task)
    assert len(items) == 1, items
    return items[0].request


def refused(
    runner: Runner,
    thread: str,
    action: Callable[[], object],
    error: type[LongTaskError] = InvalidInput,
    *fragments: str,
) -> str:
    """Run ``action``, expect ``error`` with a one-line message containing ``fragments``,
    and check the thread did not change at all (latest checkpoint, status, runs, waits)."""
    before = runner.status(thread)
    with pytest.raises(error) as info:
        action()
    message = str(info.value)
    assert "\n" not in message, f"the error is not one line:\n{message}"
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    after = runner.status(thread)
    assert after.checkpoint_id == before.checkpoint_id, message
    assert (after.status, after.runs, after.waiting, after.error) == (
        before.status,
        before.runs,
        before.waiting,
        before.error,
    )
    return message


def events(runner: Runner, thread: str, kind: str) -> list[dict[str, Any]]:
    return [dict(e.data or {}, step=e.step) for e in runner.events(thread, kinds=[kind])]


def states(runner: Runner, thread: str) -> dict[str, str]:
    return {s.name: s.state for s in runner.status(thread).steps}


def decision(request: dict[str, Any], by: str, at: datetime, **kw: Any) -> dict[str, Any]:
    return Decision(
        approved=kw.pop("approved", True),
        by=by,
        plan_hash=kw.pop("plan_hash", request["plan_hash"]),
        at=at,
        **kw,
    ).model_dump(mode="json")


# -- 2. a plan that changes after the request ------------------------------------------------


@pytest.mark.parametrize(
    "as_node",
    [
        # LangGraph's default: the update counts as written by the last node that ran
        # (ship_ok.request), so the approval node runs next and must notice the new plan.
        pytest.param(None, id="default-as-node"),
        # As if build had produced it: the request node runs next and asks again.
        pytest.param("build", id="as-build"),
    ],
)
def test_plan_change_voids_the_old_decision_and_requests_again(
    runner: Runner, clock: FakeClock, as_node: str | None
) -> None:
    thread = runner.start(RELEASE, thread_id="plan-change")
    first = only_pending(runner, thread, RELEASE)
    assert first["plan"] == {"artifact": "app-1.0.tar.gz", "channel": "stable"}
    old = decision(first, "alice", clock.now())

    # Someone changes build's result with LangGraph's own API after the request.
    config = {"configurable": {"thread_id": thread}}
    extra = {"as_node": as_node} if as_node else {}
    runner.graph(RELEASE).update_state(
        config, {"out.build": runner.codec.encode({"artifact": "app-2.0.tar.gz"})}, **extra
    )

    # The decision for the old plan does not go through, and changes nothing.
    refused(runner, thread, lambda: runner.answer(thread, old, interrupt="ship_ok"))

    runner.resume(thread, task=RELEASE)
    assert ran["publish"] == 0, "publish ran although the changed plan was never approved"
    assert states(runner, thread)["publish"] == "pending"
    assert runner.status(thread).status == "waiting_user"
    second = only_pending(runner, thread, RELEASE)
    assert second["plan"] == {"artifact": "app-2.0.tar.gz", "channel": "stable"}
    assert second["plan_hash"] != first["plan_hash"]
    assert runner.status(thread).waiting[0]["plan_hash"] == second["plan_hash"]
    required = events(runner, thread, "approval.required")
    assert [e["plan_hash"] for e in required] == [first["plan_hash"], second["plan_hash"]]

    # The old decision is refused by name of both plans, whichever way it is given.
    refused(
        runner,
        thread,
        lambda: runner.answer(thread, old, interrupt="ship_ok"),
        InvalidInput,
        first["plan_hash"],
        second["plan_hash"],
        "longtask pending",
    )
    refused(
        runner,
        thread,
        lambda: runner.approve(thread, "ship_ok", by="alice", plan_hash=first["plan_hash"]),
        InvalidInput,
        first["plan_hash"],
        second["plan_hash"],
    )
    assert ran["publish"] == 0

    runner.approve(thread, "ship_ok", by="bob", plan_hash=second["plan_hash"], comment="v2 ok")
    assert runner.status(thread).status == "completed"
    recorded = runner.result(thread, "ship_ok")
    assert (recorded["approved"], recorded["by"], recorded["plan_hash"]) == (
        True,
        "bob",
        second["plan_hash"],
    )
    assert runner.result(thread, "publish") == "published app-2.0.tar.gz"
    assert ran == Counter({"build": 1, "publish": 1})


def test_answer_through_langgraph_is_checked_by_the_node_and_leaves_the_thread_usable(
    runner: Runner, clock: FakeClock
) -> None:
    """An answer given with LangGraph's own Command (bypassing the Runner's checks) is checked
    again by the approval node; a wrong one is refused and a right one still works after."""
    thread = runner.start(RELEASE, thread_id="raw-command")
    request = only_pending(runner, thread, RELEASE)
    (item,) = runner.pending(thread, task=RELEASE)
    before = runner.status(thread).checkpoint_id
    wrong = decision(request, "alice", clock.now(), plan_hash="0123456789abcdef")
    config = {"configurable": {"thread_id": thread}}
    try:
        runner.graph(RELEASE).invoke(Command(resume={item.interrupt_id: wrong}), config)
    except InvalidInput as exc:  # refused loudly, or (below) just not used and asked again
        assert "approves plan 0123456789abcdef" in str(exc)
    assert ran["publish"] == 0
    assert events(runner, thread, "approval.resolved") == []
    assert runner.status(thread).checkpoint_id == before
    assert [p.step for p in runner.pending(thread, task=RELEASE)] == ["ship_ok"]

    runner.approve(thread, "ship_ok", by="alice")
    assert runner.status(thread).status == "completed"
    assert runner.result(thread, "ship_ok")["by"] == "alice"
    assert ran == Counter({"build": 1, "publish": 1})


# -- 3. freshness (valid_for) and deadlines ------------------------------------------------


@pytest.mark.parametrize("age", [599, 601], ids=["younger-than-valid_for", "older"])
def test_decision_older_than_valid_for_when_used_asks_again(
    runner: Runner, clock: FakeClock, age: int
) -> None:
    thread = runner.start(RELEASE, thread_id="freshness")
    first = only_pending(runner, thread, RELEASE)
    made = clock.now()
    answer = decision(first, "alice", made)  # fresh when made...
    clock.advance(age)  # ...and this old when execution reaches the step (valid_for=600)
    runner.answer(thread, answer, interrupt="ship_ok")

    if age <= 600:
        assert runner.status(thread).status == "completed"
        assert runner.result(thread, "ship_ok")["at"] == answer["at"]
        assert ran == Counter({"build": 1, "publish": 1})
        assert events(runner, thread, "approval.expired") == []
        return

    expired = events(runner, thread, "approval.expired")
    assert [(e["step"], e["reason"]) for e in expired] == [("ship_ok", "decision too old")]
    assert datetime.fromisoformat(expired[0]["decided_at"]) == made
    assert events(runner, thread, "approval.resolved") == []
    st = runner.status(thread)
    assert st.status == "waiting_user"
    second = only_pending(runner, thread, RELEASE)
    assert datetime.fromisoformat(second["requested_at"]) == clock.now()
    assert datetime.fromisoformat(second["requested_at"]) > datetime.fromisoformat(
        first["requested_at"]
    )
    assert datetime.fromisoformat(second["deadline"]) == clock.now() + timedelta(seconds=3600)
    assert second["plan_hash"] == first["plan_hash"]  # same plan, asked again
    assert [w["step"] for w in st.waiting] == ["ship_ok"]
    assert ran["publish"] == 0, "publish ran on a decision older than valid_for"
    assert states(runner, thread)["publish"] == "pending"

    # A fresh decision on the new request completes the task.
    runner.approve(thread, "ship_ok", by="bob")
    assert runner.status(thread).status == "completed"
    assert runner.result(thread, "ship_ok")["by"] == "bob"
    assert ran == Counter({"build": 1, "publish": 1})


def expire(runner: Runner, clock: FakeClock, task: LongTask, thread: str) -> list[Any]:
    """Start ``task``, check tick leaves it alone before the deadline, then jump past the
    deadline (3600 s) and tick. Returns tick's results."""
    runner.start(task, thread_id=thread)
    st = runner.status(thread)
    assert st.status in ("waiting_user", "waiting_external")
    clock.advance(3599)
    assert runner.tick() == []
    assert runner.status(thread).checkpoint_id == st.checkpoint_id
    clock.advance(2)
    results = runner.tick()
    assert runner.tick() == []  # the deadline is handled once
    return [(r.thread_id, r.step, r.outcome) for r in results]


def test_approval_timeout_fail(runner: Runner, clock: FakeClock) -> None:
    assert expire(runner, clock, TIMEOUT_FAIL, "t-fail") == [("t-fail", "gate", "failed")]
    st = runner.status("t-fail")
    assert st.status == "failed"
    assert st.error is not None and st.error["step"] == "gate"
    assert "approval 'gate' timed out at 2030-01-01T01:00:00" in st.error["message"]
    assert states(runner, "t-fail") == {
        "build": "completed",
        "gate": "failed",
        "publish": "pending",
        "fallback": "pending",
    }
    assert [e["reason"] for e in events(runner, "t-fail", "approval.expired")] == ["deadline"]
    assert ran == Counter({"build": 1})


def test_approval_timeout_counts_as_rejection_and_fails(runner: Runner, clock: FakeClock) -> None:
    assert expire(runner, clock, TIMEOUT_REJECT_FAIL, "t-rej") == [("t-rej", "gate", "failed")]
    st = runner.status("t-rej")
    assert st.status == "failed"
    assert st.error is not None and st.error["step"] == "gate"
    assert "approval 'gate'" in st.error["message"]
    assert "timed out" in st.error["message"]
    assert ran == Counter({"build": 1})


def test_approval_timeout_as_rejection_skips_ahead(runner: Runner, clock: FakeClock) -> None:
    result = expire(runner, clock, TIMEOUT_REJECT_SKIP, "t-rej-skip")
    assert result == [("t-rej-skip", "gate", "timed out")]
    assert runner.status("t-rej-skip").status == "completed"
    assert states(runner, "t-rej-skip")["publish"] == "skipped"
    # the target sees a rejection nobody made: approved False, by None
    saw = runner.result("t-rej-skip", "fallback")["saw"]
    assert saw["approved"] is False and saw["by"] is None
    assert ran == Counter({"build": 1, "fallback": 1})


def test_approval_timeout_skips_ahead_to_a_later_step(runner: Runner, clock: FakeClock) -> None:
    result = expire(runner, clock, TIMEOUT_SKIP_AHEAD, "t-ahead")
    assert result == [("t-ahead", "gate", "timed out")]
    st = runner.status("t-ahead")
    assert st.status == "completed"
    assert states(runner, "t-ahead") == {
        "build": "completed",
        "gate": "completed",
        "publish": "skipped",
        "fallback": "completed",
    }
    skipped = events(runner, "t-ahead", "step.skipped")
    assert [e["step"] for e in skipped] == ["publish"]
    assert runner.result("t-ahead", "fallback") == {"saw": None}
    assert ran == Counter({"build": 1, "fallback": 1})


def test_wait_timeout_skip_continues_with_none(runner: Runner, clock: FakeClock) -> None:
    result = expire(runner, clock, WAIT_TIMEOUT_SKIP, "w-skip")
    assert result == [("w-skip", "gate", "timed out")]
    assert runner.status("w-skip").status == "completed"
    assert runner.result("w-skip", "gate") is None
    assert states(runner, "w-skip") == dict.fromkeys(
        ("build", "gate", "publish", "fallback"), "completed"
    )
    assert runner.result("w-skip", "fallback") == {"saw": None}
    assert [e["reason"] for e in events(runner, "w-skip", "wait.expired")] == ["deadline"]
    assert ran == Counter({"build": 1, "publish": 1, "fallback": 1})


def test_wait_timeout_fail(runner: Runner, clock: FakeClock) -> None:
    assert expire(runner, clock, WAIT_TIMEOUT_FAIL, "w-fail") == [("w-fail", "gate", "failed")]
    st = runner.status("w-fail")
    assert st.status == "failed"
    assert st.error is not None and "wait 'gate' timed out" in st.error["message"]
    assert ran == Counter({"build": 1})


# -- 4. parallel approvals -----------------------------------------------------------------


@pytest.mark.parametrize(
    "order", [("legal", "security"), ("security", "legal")], ids=["legal-first", "security-first"]
)
def test_parallel_approvals_answered_in_either_order(
    runner: Runner, clock: FakeClock, order: tuple[str, str]
) -> None:
    first, second = order
    thread = runner.start(PARALLEL, thread_id="parallel")
    st = runner.status(thread)
    assert st.status == "waiting_user"
    requests = {p.step: p.request for p in runner.pending(thread, task=PARALLEL)}
    assert set(requests) == {"legal", "security"}
    assert requests["legal"]["plan"] == {"terms": "v2"}
    assert requests["security"]["plan"] == {"scan": "clean"}
    refused(
        runner,
        thread,
        lambda: runner.approve(thread, by=APPROVERS[first]),
        InvalidInput,
        "legal, security",
        "name the step",
    )

    runner.approve(thread, first, by=APPROVERS[first], comment=f"{first} ok")
    st = runner.status(thread)
    assert st.status == "waiting_user"
    assert [p.step for p in runner.pending(thread, task=PARALLEL)] == [second]
    assert [w["step"] for w in st.waiting] == [second]
    assert states(runner, thread) == {
        "build": "completed",
        first: "completed",
        second: "waiting",
        "ship": "pending",
    }
    assert ran["ship"] == 0
    refused(
        runner,
        thread,
        lambda: runner.approve(thread, first, by=APPROVERS[first]),
        InvalidInput,
        f"{first!r} of thread 'parallel' is not waiting for an approval; waiting: {second}",
    )

    runner.approve(thread, second, by=APPROVERS[second], comment=f"{second} ok")
    assert runner.status(thread).status == "completed"
    for name in ("legal", "security"):
        recorded = runner.result(thread, name)
        assert recorded["approved"] is True
        assert recorded["by"] == APPROVERS[name]
        assert recorded["plan_hash"] == requests[name]["plan_hash"]
        assert recorded["comment"] == f"{name} ok"
    assert runner.result(thread, "ship") == APPROVERS
    resolved = events(runner, thread, "approval.resolved")
    assert [(e["step"], e["by"]) for e in resolved] == [(n, APPROVERS[n]) for n in order]
    assert ran == Counter({"build": 1, "ship": 1})


# -- 5. bad answers change nothing ---------------------------------------------------------


def test_bad_approvals_are_refused_and_change_nothing(runner: Runner, clock: FakeClock) -> None:
    thread = runner.start(RELEASE, thread_id="bad")
    request = only_pending(runner, thread, RELEASE)
    current = request["plan_hash"]

    refused(
        runner,
        thread,
        lambda: runner.approve(thread, "ship_ok", by="mallory"),
        InvalidInput,
        "'mallory' may not decide approval 'ship_ok'; allowed: alice, bob",
    )
    refused(
        runner,
        thread,
        lambda: runner.approve(thread, "ship_ok", by="alice", plan_hash="0123456789abcdef"),
        InvalidInput,
        "approves plan 0123456789abcdef",
        f"the plan waiting for approval is {current}",
    )
    refused(
        runner,
        thread,
        lambda: runner.reject(thread, "publish", by="alice"),
        InvalidInput,
        "'publish' of thread 'bad' is not waiting for an approval; waiting: ship_ok",
    )
    refused(
        runner,
        thread,
        lambda: runner.approve(thread, "no_such_step", by="alice"),
        InvalidInput,
        "'no_such_step' of thread 'bad' is not waiting for an approval",
    )
    refused(
        runner,
        thread,
        lambda: runner.signal(thread, "ship_ok", {"status": "passed"}),
        InvalidInput,
        "thread 'bad' is not waiting for an outside event (status: waiting_user)",
    )
    with pytest.raises(ThreadNotFound, match="no thread 'no-such-thread'"):
        runner.approve("no-such-thread", "ship_ok", by="alice", task=RELEASE)
    assert [t.thread_id for t in runner.threads()] == [thread]

    # Past the deadline, before tick: refused; tick then applies on_timeout ("fail").
    clock.advance(3601)
    refused(
        runner,
        thread,
        lambda: runner.approve(thread, "ship_ok", by="alice"),
        InvalidInput,
        "the deadline of approval 'ship_ok' passed at 2030-01-01T01:00:00",
        "longtask tick",
    )
    assert ran["publish"] == 0
    assert [(r.step, r.outcome) for r in runner.tick()] == [("ship_ok", "failed")]
    assert runner.status(thread).status == "failed"


def test_approving_a_completed_thread_is_refused(runner: Runner, clock: FakeClock) -> None:
    thread = runner.start(RELEASE, thread_id="done")
    runner.approve(thread, "ship_ok", by="alice")
    assert runner.status(thread).status == "completed"
    for act in (
        lambda: runner.approve(thread, "ship_ok", by="alice"),
        lambda: runner.reject(thread, by="bob"),
    ):
        refused(
            runner,
            thread,
            act,
            InvalidInput,
            "thread 'done' is not waiting for an approval (status: completed)",
        )
    assert ran == Counter({"build": 1, "publish": 1})


@pytest.mark.parametrize("how", ["rejected", "timed-out"])
def test_approving_a_failed_thread_is_refused(runner: Runner, clock: FakeClock, how: str) -> None:
    """A thread whose approval failed (rejected with on_reject="fail", or timed out with
    on_timeout="fail") waits for nothing: a later approval is refused and changes nothing."""
    thread = f"failed-{how}"
    if how == "rejected":
        runner.start(REJECT_FAIL, thread_id=thread)
        with pytest.raises(StepFailed):
            runner.reject(thread, "gate", by="carol", comment="no")
    else:
        runner.start(TIMEOUT_FAIL, thread_id=thread)
        clock.advance(3601)
        assert [r.outcome for r in runner.tick()] == ["failed"]
    assert runner.status(thread).status == "failed"
    refused(
        runner,
        thread,
        lambda: runner.approve(thread, "gate", by="dave"),
        InvalidInput,
        f"thread {thread!r} is not waiting for an approval (status: failed)",
    )
    assert runner.pending(thread) == []
    assert len(events(runner, thread, "longtask.failed")) == 1
    assert ran == Counter({"build": 1})


def test_malformed_decision_is_refused_on_one_line(runner: Runner, clock: FakeClock) -> None:
    thread = runner.start(RELEASE, thread_id="malformed")
    refused(
        runner,
        thread,
        lambda: runner.answer(thread, {"approved": "maybe", "by": "alice"}, interrupt="ship_ok"),
        InvalidInput,
        "the answer to approval 'ship_ok' is not a decision",
        "approved",
        "plan_hash",
    )
    runner.approve(thread, "ship_ok", by="alice")
    assert runner.status(thread).status == "completed"


def test_payloads_that_fail_their_schema_are_refused(runner: Runner, clock: FakeClock) -> None:
    thread = runner.start(SIGNALS, thread_id="signals")
    assert runner.status(thread).status == "waiting_external"

    refused(
        runner,
        thread,
        lambda: runner.signal(thread, "ci", {"status": "meh"}),
        InvalidInput,
        "the payload for 'ci' does not match CiResult: status:",
    )
    refused(
        runner,
        thread,
        lambda: runner.signal(thread, "ci", {"url": "https://ci/1"}),
        InvalidInput,
        "the payload for 'ci' does not match CiResult: status: Field required",
    )
    refused(
        runner,
        thread,
        lambda: runner.signal(thread, "deploy", {"env": "moon"}),
        InvalidInput,
        "the payload for 'deploy' does not match its schema: 'moon' is not one of",
    )
    refused(
        runner,
        thread,
        lambda: runner.signal(thread, "deploy", "prod"),
        InvalidInput,
        "the payload for 'deploy' does not match its schema",
    )
    refused(
        runner,
        thread,
        lambda: runner.answer(thread, {"env": "moon"}, interrupt="deploy"),
        InvalidInput,
        "the payload for 'deploy' does not match its schema",
    )
    refused(
        runner,
        thread,
        lambda: runner.signal(thread, "nope", {}),
        InvalidInput,
        "'nope' of thread 'signals' is not waiting for an outside event; waiting: ci, deploy",
    )
    refused(
        runner,
        thread,
        lambda: runner.approve(thread, "ci", by="alice"),
        InvalidInput,
        "thread 'signals' is not waiting for an approval (status: waiting_external)",
    )

    # Good payloads still go through, each to its own step.
    runner.signal(thread, "deploy", {"env": "prod"})
    assert [p.step for p in runner.pending(thread, task=SIGNALS)] == ["ci"]
    runner.signal(thread, "ci", {"status": "passed", "url": "https://ci/1"})
    assert runner.status(thread).status == "completed"
    assert runner.result(thread, "after") == [
        {"status": "passed", "url": "https://ci/1"},
        {"env": "prod"},
    ]


# -- 6. rejection --------------------------------------------------------------------------


def test_reject_with_on_reject_fail_fails_the_thread(runner: Runner, clock: FakeClock) -> None:
    thread = runner.start(REJECT_FAIL, thread_id="rejected")
    with pytest.raises(StepFailed) as info:
        runner.reject(thread, "gate", by="carol", comment="numbers are wrong")
    assert "carol" in str(info.value) and "numbers are wrong" in str(info.value)
    st = runner.status(thread)
    assert st.status == "failed"
    assert st.error is not None
    assert st.error["step"] == "gate"
    assert "approval 'gate' was rejected by carol: numbers are wrong" in st.error["message"]
    assert states(runner, thread)["gate"] == "failed"
    resolved = events(runner, thread, "approval.resolved")
    assert [(e["outcome"], e["by"], e["comment"]) for e in resolved] == [
        ("rejected", "carol", "numbers are wrong")
    ]
    assert ran == Counter({"build": 1})


def test_reject_skips_ahead_and_the_target_sees_the_rejection(
    runner: Runner, clock: FakeClock
) -> None:
    thread = runner.start(REJECT_SKIP, thread_id="rejected-ahead")
    request = only_pending(runner, thread, REJECT_SKIP)
    runner.reject(thread, "gate", by="carol", comment="not this week")
    assert runner.status(thread).status == "completed"
    assert states(runner, thread) == {
        "build": "completed",
        "gate": "completed",
        "publish": "skipped",
        "fallback": "completed",
    }
    saw = runner.result(thread, "fallback")["saw"]
    assert saw["approved"] is False
    assert (saw["by"], saw["comment"], saw["plan_hash"]) == (
        "carol",
        "not this week",
        request["plan_hash"],
    )
    assert [e["step"] for e in events(runner, thread, "step.skipped")] == ["publish"]
    assert ran == Counter({"build": 1, "fallback": 1})
