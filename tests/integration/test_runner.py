"""The Runner against every backend: run, fail, resume, inspect."""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from longtask import (
    DefinitionChanged,
    InvalidInput,
    LongTask,
    NothingToResume,
    ResultNotAvailable,
    Retry,
    Runner,
    Stage,
    StepContext,
    StepFailed,
    ThreadBusy,
    ThreadExists,
    ThreadNotFound,
    function_step,
)


class Plan(BaseModel):
    title: str
    parts: list[str]


class Inputs(BaseModel):
    topic: str
    n: int = 2


def make_task(calls: Counter[str], fail: set[str] | None = None) -> LongTask:
    fail = fail if fail is not None else set()

    def tracked(name: str, fn: Any) -> Any:
        def wrapper(ctx: StepContext) -> Any:
            calls[name] += 1
            if name in fail:
                raise RuntimeError(f"{name} exploded")
            return fn(ctx)

        wrapper.__qualname__ = f"step_{name}"
        return function_step(wrapper, name=name)

    return LongTask(
        "demo",
        inputs=Inputs,
        stages=[
            Stage(
                "plan",
                [tracked("plan", lambda c: Plan(title=c.inputs.topic, parts=["x"] * c.inputs.n))],
            ),
            Stage(
                "work",
                [
                    tracked("left", lambda c: len(c.result("plan", Plan).parts)),
                    tracked("right", lambda c: c.result("plan").title.upper()),
                    tracked("big", lambda c: {"blob": "y" * 5000}),
                ],
            ),
            Stage(
                "finish",
                [
                    tracked(
                        "join",
                        lambda c: (
                            f"{c.result('right')}:{c.result('left')}:{len(c.result('big')['blob'])}"
                        ),
                    )
                ],
            ),
        ],
    )


def test_run_to_completion(runner: Runner) -> None:
    calls: Counter[str] = Counter()
    task = make_task(calls)
    thread = runner.start(task, {"topic": "jwt", "n": 3})
    st = runner.status(thread)
    assert st.status == "completed" and st.progress == 1.0 and st.current_stage is None
    assert [s.state for s in st.steps] == ["completed"] * 5
    assert runner.result(thread, "join") == "JWT:3:5000"
    plan = runner.result(thread, "plan")
    assert isinstance(plan, Plan) and plan.parts == ["x", "x", "x"]
    assert calls == Counter({"plan": 1, "left": 1, "right": 1, "big": 1, "join": 1})
    kinds = [e.kind for e in runner.events(thread)]
    assert kinds[0] == "longtask.started" and kinds[-1] == "longtask.completed"
    assert kinds.count("step.started") == 5 and kinds.count("step.completed") == 5
    assert kinds.count("stage.started") == 3 and kinds.count("stage.completed") == 3
    assert [t.thread_id for t in runner.threads()] == [thread]


def test_failure_then_resume_reruns_only_the_failed_step(runner: Runner) -> None:
    calls: Counter[str] = Counter()
    fail = {"right"}
    task = make_task(calls, fail)
    with pytest.raises(StepFailed) as info:
        runner.start(task, {"topic": "a"}, thread_id="t-fail")
    assert info.value.step == "right" and "right exploded" in str(info.value)
    assert isinstance(info.value.__cause__, RuntimeError)
    st = runner.status("t-fail")
    states = {s.name: s.state for s in st.steps}
    assert st.status == "failed" and st.error and st.error["step"] == "right"
    assert states == {
        "plan": "completed",
        "left": "completed",
        "right": "failed",
        "big": "completed",
        "join": "pending",
    }
    failed = runner.events("t-fail", kinds=["step.failed"])
    assert [(e.step, e.data["type"]) for e in failed] == [("right", "RuntimeError")]

    fail.clear()
    runner.resume("t-fail", task=task)
    assert runner.status("t-fail").status == "completed"
    # parallel siblings that succeeded are not run again
    assert calls == Counter({"plan": 1, "left": 1, "right": 2, "big": 1, "join": 1})
    with pytest.raises(NothingToResume):
        runner.resume("t-fail", task=task)


def test_results_round_trip_in_a_new_process_connection(db_url: str) -> None:
    calls: Counter[str] = Counter()
    task = make_task(calls, {"join"})
    with Runner(db_url) as first, pytest.raises(StepFailed):
        first.start(task, {"topic": "model"}, thread_id="t-rt")
    calls.clear()
    task_ok = make_task(calls)
    with Runner(db_url) as second:
        second.resume("t-rt", task=task_ok)
        assert calls == Counter({"join": 1})
        assert second.result("t-rt", "join") == "MODEL:2:5000"
        assert second.result("t-rt", "plan") == Plan(title="model", parts=["x", "x"])
        assert second.results("t-rt")["big"] == {"blob": "y" * 5000}


def test_bad_inputs_and_unknown_threads_store_nothing(runner: Runner) -> None:
    task = make_task(Counter())
    with pytest.raises(InvalidInput, match="do not match Inputs"):
        runner.start(task, {"n": "many"}, thread_id="t-bad")
    with pytest.raises(ThreadNotFound):
        runner.status("t-bad")
    with pytest.raises(InvalidInput, match="thread id"):
        runner.start(task, {"topic": "x"}, thread_id="has space")
    runner.start(task, {"topic": "x"}, thread_id="t-once")
    with pytest.raises(ThreadExists):
        runner.start(task, {"topic": "x"}, thread_id="t-once")
    with pytest.raises(ThreadNotFound):
        runner.resume("nope", task=task)


def test_changed_definition_is_refused_with_the_changed_steps(runner: Runner) -> None:
    calls: Counter[str] = Counter()
    with pytest.raises(StepFailed):
        runner.start(make_task(calls, {"join"}), {"topic": "x"}, thread_id="t-drift")
    before = runner.status("t-drift").checkpoint_id

    def extra(ctx: StepContext) -> int:
        return 1

    changed = make_task(calls)
    changed = LongTask(
        "demo",
        inputs=Inputs,
        stages=[
            *changed.stages[:2],
            Stage("finish", [*changed.stages[2].steps, function_step(extra)]),
        ],
    )
    lease = _lease(runner, "t-drift")
    with pytest.raises(DefinitionChanged) as info:
        runner.resume("t-drift", task=changed)
    assert "step 'extra' was added" in str(info.value)
    assert runner.status("t-drift").checkpoint_id == before
    # refused under the thread's lock before a lease epoch is taken: no row changed
    assert _lease(runner, "t-drift") == lease
    runner.resume("t-drift", task=changed, allow_changed_definition=True)
    assert runner.status("t-drift").status == "completed"
    assert runner.result("t-drift", "extra") == 1


def _lease(runner: Runner, thread_id: str) -> list[tuple[Any, ...]]:
    return runner.db.store._run(
        "SELECT epoch, holder, acquired_at, released_at FROM longtask_leases WHERE thread_id = ?",
        (thread_id,),
    )


def test_a_refused_resume_takes_no_lease_epoch(runner: Runner) -> None:
    calls: Counter[str] = Counter()
    runner.start(make_task(calls), {"topic": "x"}, thread_id="t-ended")
    lease = _lease(runner, "t-ended")
    assert lease, "a run takes an epoch"
    with pytest.raises(NothingToResume):
        runner.resume("t-ended", task=make_task(calls))
    assert _lease(runner, "t-ended") == lease


def test_one_writer_per_thread(runner: Runner) -> None:
    calls: Counter[str] = Counter()
    with pytest.raises(StepFailed):
        runner.start(make_task(calls, {"join"}), {"topic": "x"}, thread_id="t-lock")
    before = runner.status("t-lock").checkpoint_id
    with runner.db.lock("t-lock"):
        assert runner.db.is_locked("t-lock")
        with pytest.raises(ThreadBusy, match="another process"):
            runner.resume("t-lock", task=make_task(calls))
    assert not runner.db.is_locked("t-lock")
    assert runner.status("t-lock").checkpoint_id == before
    assert calls["join"] == 1


def test_retry_timeout_async_and_dependency_errors(runner: Runner) -> None:
    attempts: list[int] = []

    @function_step(retry=Retry(max_attempts=3, initial_wait=0, max_wait=0, jitter=False))
    def flaky(ctx: StepContext) -> int:
        attempts.append(ctx.attempt)
        if ctx.attempt < 3:
            raise ConnectionError("try again")
        return ctx.attempt

    @function_step
    async def later(ctx: StepContext) -> int:
        await asyncio.sleep(0)
        return int(ctx.result("flaky")) * 10

    @function_step(timeout=0.2)
    def slow(ctx: StepContext) -> None:
        time.sleep(2)

    @function_step
    def nosy(ctx: StepContext) -> Any:
        return ctx.result("slow")

    ok = LongTask("ok", stages=[Stage("a", [flaky]), Stage("b", [later])])
    thread = runner.start(ok)
    assert attempts == [1, 2, 3] and runner.result(thread, "later") == 30
    retries = runner.events(thread, kinds=["step.retry"])
    assert [(e.attempt, e.data["next_attempt"]) for e in retries] == [(1, 2), (2, 3)]
    assert "ConnectionError: try again" in retries[0].data["error"]

    with pytest.raises(StepFailed, match=r"did not finish within 0\.2 s"):
        runner.start(LongTask("to", stages=[Stage("a", [slow])]))
    with pytest.raises(StepFailed) as info:
        runner.start(
            LongTask("nosy", stages=[Stage("a", [nosy, function_step(lambda c: 1, name="slow")])])
        )
    assert isinstance(info.value.__cause__, ResultNotAvailable)
    assert "not one of its dependencies" in str(info.value)


def test_event_insert_is_idempotent(runner: Runner) -> None:
    thread = runner.start(make_task(Counter()), {"topic": "x"})
    store = runner.db.store
    first = store.append_event(thread, "step.progress", key="k1", data={"n": 1})
    second = store.append_event(thread, "step.progress", key="k1", data={"n": 2})
    assert first is not None and second is None
    assert [e.data for e in runner.events(thread, kinds=["step.progress"])] == [{"n": 1}]


def test_added_map_and_wait_steps_start_at_their_entry_nodes(runner: Runner) -> None:
    from langgraph.types import Command

    from longtask import map_step, wait_for

    fail = [True]

    @function_step
    def first(ctx: StepContext) -> int:
        return 1

    @function_step
    def second(ctx: StepContext) -> int:
        if fail[0]:
            raise RuntimeError("not yet")
        return 2

    old = LongTask("grow", stages=[Stage("one", [first]), Stage("two", [second])])
    doubled = map_step(lambda c, i: i * 2, name="doubled", over=lambda c: [1, 2, 3])
    new = LongTask("grow", stages=[Stage("one", [first]), Stage("two", [second, doubled])])
    with pytest.raises(StepFailed):
        runner.start(old, thread_id="t-grow")
    fail[0] = False
    runner.resume("t-grow", task=new, allow_changed_definition=True)
    assert runner.status("t-grow").status == "completed"
    assert runner.result("t-grow", "doubled") == [2, 4, 6]
    # goto a map step by name starts the map, not its pass-through node (on a thread that
    # failed: a completed one is forked instead, never changed in place)
    fail[0] = True
    with pytest.raises(StepFailed):
        runner.start(new, thread_id="t-grow-goto")
    fail[0] = False
    runner.resume("t-grow-goto", Command(goto="doubled"), task=new)
    assert runner.result("t-grow-goto", "doubled") == [2, 4, 6]
    assert [e.data["by"] for e in runner.events("t-grow-goto", kinds=["manual.goto"])]

    fail[0] = True
    with pytest.raises(StepFailed):
        runner.start(old, thread_id="t-grow2")
    fail[0] = False
    waiting = LongTask(
        "grow", stages=[Stage("one", [first]), Stage("two", [second, wait_for("hook")])]
    )
    runner.resume("t-grow2", task=waiting, allow_changed_definition=True)
    assert runner.status("t-grow2").status == "waiting_external"
    runner.signal("t-grow2", "hook", {"ok": True}, task=waiting)
    assert runner.result("t-grow2", "hook") == {"ok": True}


def test_decision_times_must_be_aware_and_not_in_the_future(runner: Runner) -> None:
    from longtask import InvalidInput, approval

    @function_step
    def done(ctx: StepContext) -> str:
        return "shipped"

    task = LongTask(
        "gate",
        stages=[
            Stage("ask", [approval("ok", plan=lambda c: {"x": 1}, valid_for=60)]),
            Stage("go", [done]),
        ],
    )
    thread = runner.start(task)
    item = runner.pending(thread, task=task)[0]
    before = runner.status(thread).checkpoint_id
    base = {"approved": True, "by": "ann", "plan_hash": item.request["plan_hash"]}
    for at in ("2030-01-01T00:00:00", "2099-01-01T00:00:00+00:00"):
        with pytest.raises(InvalidInput) as info:
            runner.answer(thread, {**base, "at": at}, interrupt="ok", task=task)
        assert "\n" not in str(info.value)
    assert runner.status(thread).checkpoint_id == before
    runner.approve(thread, "ok", by="ann", task=task)
    assert runner.result(thread, "done") == "shipped"


@pytest.fixture
def eager_thread_switches() -> Iterator[None]:
    """Switch threads as often as Python can, as on a loaded machine: LangGraph's thread,
    woken when its last running task finishes, then often overtakes that task's thread."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


@pytest.mark.usefixtures("eager_thread_switches")
def test_a_sibling_running_when_a_step_fails_keeps_its_result(
    runner: Runner, tmp_path: Path
) -> None:
    """A step fails at once while its sibling still runs (or has not even started): the
    sibling's result is saved before the failure is raised, so a resume does not run it
    again. (Without that, LangGraph lost the result in about half the rounds: the sibling
    finished while its executor shut down.)"""

    class Down(Exception):
        retryable = False

    @function_step
    def sibling(ctx: StepContext) -> str:
        token = uuid.uuid4().hex
        with (tmp_path / f"{ctx.thread_id}.calls").open("a") as f:
            f.write(token + "\n")
        time.sleep(0.05)  # still running when the other step fails
        return token

    @function_step
    def broken(ctx: StepContext) -> str:
        if (tmp_path / "fixed").exists():
            return "fixed"
        if ctx.thread_id.endswith("-started"):
            deadline = time.monotonic() + 10  # fail once the sibling has started
            calls = tmp_path / f"{ctx.thread_id}.calls"
            while not calls.exists() and time.monotonic() < deadline:
                time.sleep(0.001)
        raise Down("upstream is down")

    @function_step
    def join(ctx: StepContext) -> str:
        return f"{ctx.result('sibling')}+{ctx.result('broken')}"

    task = LongTask("siblings", stages=[Stage("work", [sibling, broken]), Stage("wrap", [join])])
    for n in range(10):
        thread = f"t-sib-{n}" + ("-started" if n % 2 else "")
        (tmp_path / "fixed").unlink(missing_ok=True)
        with pytest.raises(StepFailed, match="upstream is down"):
            runner.start(task, thread_id=thread)
        (first,) = (tmp_path / f"{thread}.calls").read_text().split()
        states = {s.name: s.state for s in runner.status(thread).steps}
        assert states == {"sibling": "completed", "broken": "failed", "join": "pending"}

        (tmp_path / "fixed").touch()
        runner.resume(thread, task=task)
        assert runner.status(thread).status == "completed"
        # the sibling ran exactly once, and its result is the first run's
        assert (tmp_path / f"{thread}.calls").read_text().split() == [first]
        assert runner.result(thread, "join") == f"{first}+fixed"


def test_a_result_that_reads_like_a_skip_is_not_one(runner: Runner) -> None:
    """status finds skip marks by a byte search on the server: a result holding the same
    word (or the mark's shape nested inside) comes back as a candidate and is told apart."""
    task = LongTask(
        "lookalike",
        stages=[
            Stage(
                "s",
                [
                    function_step(lambda ctx: {"note": "skipped"}, name="word"),
                    function_step(
                        lambda ctx: {"inner": {"$longtask": "skipped", "reason": "x"}},
                        name="nested",
                    ),
                    function_step(lambda ctx: "skipped", name="text"),
                ],
            )
        ],
    )
    runner.start(task, thread_id="lookalike")
    st = runner.status("lookalike")
    assert st.status == "completed"
    assert {s.name: s.state for s in st.steps} == dict.fromkeys(
        ("word", "nested", "text"), "completed"
    )
    assert runner.result("lookalike", "nested") == {
        "inner": {"$longtask": "skipped", "reason": "x"}
    }


def test_a_step_error_with_unstorable_text_fails_the_step_cleanly(runner: Runner) -> None:
    """A NUL character or a lone surrogate in an error message (binary data a step tried to
    parse) is refused by PostgreSQL's jsonb, which reads every step event's data; stored
    as is, the step.failed event failed the transaction of its checkpoint and the run died
    on a database error. The text is stored with U+FFFD in their place."""

    def broken(ctx: StepContext) -> None:
        raise ValueError("bad bytes \x00 and \ud800 here")

    task = LongTask(name="unstorable", version="1", stages=[Stage("s", [function_step(broken)])])
    with pytest.raises(StepFailed, match="bad bytes"):
        runner.start(task, {}, thread_id="t-unstorable")
    st = runner.status("t-unstorable")
    assert st.status == "failed" and st.steps[0].state == "failed"
    (failed,) = runner.events("t-unstorable", kinds=["step.failed"])
    assert "bad bytes \ufffd and \ufffd here" in failed.data["error"]
    assert st.steps[0].usage is not None and st.steps[0].usage["attempts"] == 1
