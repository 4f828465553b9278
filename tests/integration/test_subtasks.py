"""Sub-task steps (issue 44) on both backends, in one process: children are threads of
their own with ids derived from (parent, step, item, attempt), started once, awaited at a
pause, and their end continues the parent; failures follow the step's policy; a child's
approval is answered on the child; a cancel of the parent cancels its children once."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import BaseModel
from starlette.testclient import TestClient

from longtask import (
    Budget,
    DefinitionError,
    LongTask,
    Runner,
    Stage,
    StepContext,
    StepFailed,
    approval,
    function_step,
    subtask_step,
)
from longtask.model import child_thread_id
from longtask.serve import create_app
from longtask.serve._registry import Registered, Registry

#: bodies run, by thread
RAN: Counter[str] = Counter()
#: compensations run, by thread
UNDONE: Counter[str] = Counter()


class N(BaseModel):
    n: int


class Numbers(BaseModel):
    numbers: list[int]


@function_step
def square(ctx: StepContext) -> int:
    RAN[ctx.thread_id] += 1
    if ctx.inputs.n < 0:
        raise ValueError(f"no square of {ctx.inputs.n} today")
    return int(ctx.inputs.n) ** 2


SQUARE = LongTask("square", stages=[Stage("s", [square])], inputs=N, retry=1)


@function_step
def plan(ctx: StepContext) -> list[int]:
    return list(ctx.inputs.numbers)


@function_step
def total(ctx: StepContext) -> int:
    return int(sum(ctx.result("squares")))


def _over(ctx: StepContext) -> list[int]:
    return list(ctx.result("plan"))


def _inputs(ctx: StepContext, n: int) -> dict[str, int]:
    return {"n": n}


FAN_OUT = LongTask(
    "fan_out",
    inputs=Numbers,
    stages=[
        Stage("plan", [plan]),
        Stage("fan", [subtask_step("squares", SQUARE, over=_over, inputs=_inputs)]),
        Stage("sum", [total]),
    ],
)

RETRIED = LongTask(
    "retried",
    inputs=Numbers,
    stages=[
        Stage("plan", [plan]),
        Stage("fan", [subtask_step("squares", SQUARE, over=_over, inputs=_inputs, retry=2)]),
    ],
)

COLLECTED = LongTask(
    "collected",
    inputs=Numbers,
    stages=[
        Stage("plan", [plan]),
        Stage(
            "fan",
            [subtask_step("squares", SQUARE, over=_over, inputs=_inputs, on_item_error="collect")],
        ),
    ],
)

ONE = LongTask(
    "one",
    stages=[Stage("one", [subtask_step("five", SQUARE, lambda ctx: {"n": 5}, output="square")])],
)


def _undo(ctx: StepContext, result: Any) -> None:
    UNDONE[ctx.thread_id] += 1


@function_step(compensate=_undo)
def book(ctx: StepContext) -> str:
    RAN[ctx.thread_id] += 1
    return "booked"


GATED = LongTask("gated_child", stages=[Stage("book", [book]), Stage("ok", [approval("ok")])])
WAITS = LongTask(
    "waits_for_gated",
    stages=[Stage("fan", [subtask_step("gated", GATED, over=lambda ctx: [{}, {}])])],
)


def _children(runner: Runner, parent: str) -> list[str]:
    return [r.child for r in runner.db.store.subtask_rows(parent)]


def _kinds(runner: Runner, thread: str, prefix: str) -> list[str]:
    return [e.kind for e in runner.events(thread) if e.kind.startswith(prefix)]


def test_map_form_gives_the_children_results_in_item_order(runner: Runner) -> None:
    thread = runner.start(FAN_OUT, {"numbers": [3, 1, 2]})
    assert runner.status(thread).status == "completed"
    assert runner.result(thread, "squares") == [9, 1, 4]
    assert runner.result(thread, "total") == 14
    children = _children(runner, thread)
    assert children == [child_thread_id(thread, "squares", i, 1) for i in range(3)]
    for index, child in enumerate(children):
        assert RAN[child] == 1
        assert runner.status(child).status == "completed"
        started = next(e for e in runner.events(child) if e.kind == "longtask.started")
        assert started.data["parent"] == {
            "thread_id": thread,
            "step": "squares",
            "item": index,
            "attempt": 1,
        }
    assert _kinds(runner, thread, "subtask.") == ["subtask.started"] * 3 + ["subtask.completed"] * 3


def test_single_form_result_is_the_named_step_of_the_child(runner: Runner) -> None:
    thread = runner.start(ONE)
    assert runner.result(thread, "five") == 25
    assert _children(runner, thread) == [child_thread_id(thread, "five", 0, 1)]


def test_a_failed_child_is_retried_as_a_fresh_child_then_fails_the_step(runner: Runner) -> None:
    with pytest.raises(StepFailed, match="no square of -1"):
        runner.start(RETRIED, {"numbers": [2, -1]})
    thread = next(t.thread_id for t in runner.threads() if t.task_name == "retried")
    rows = runner.db.store.subtask_rows(thread)
    assert [(r.index, r.attempt, r.status) for r in rows] == [
        (0, 1, "completed"),
        (1, 1, "failed"),
        (1, 2, "failed"),
    ]
    assert rows[2].child == child_thread_id(thread, "squares", 1, 2) != rows[1].child
    rec = runner.status(thread)
    assert rec.status == "failed"
    assert rec.error is not None and rec.error["type"] == "SubtaskFailed"
    assert _kinds(runner, thread, "subtask.").count("subtask.failed") == 2


def test_collect_lists_the_failed_children(runner: Runner) -> None:
    thread = runner.start(COLLECTED, {"numbers": [1, -3, 2]})
    result = runner.result(thread, "squares")
    assert result["results"] == [1, 4]
    [error] = result["errors"]
    assert error["index"] == 1 and error["item"] == {"n": -3}
    assert error["thread_id"] == child_thread_id(thread, "squares", 1, 1)
    assert "no square of -3" in error["error"]


def test_bad_child_inputs_fail_the_step_and_start_no_child(runner: Runner) -> None:
    bad = LongTask(
        "bad_inputs", stages=[Stage("s", [subtask_step("sq", SQUARE, lambda ctx: {"m": 1})])]
    )
    with pytest.raises(StepFailed, match="n"):
        runner.start(bad)
    thread = next(t.thread_id for t in runner.threads() if t.task_name == "bad_inputs")
    assert _children(runner, thread) == []
    assert [t.task_name for t in runner.threads()] == ["bad_inputs"]


def test_a_childs_approval_continues_the_parent(runner: Runner) -> None:
    thread = runner.start(WAITS)
    status = runner.status(thread)
    assert status.status == "waiting_external"
    assert [w["kind"] for w in status.waiting] == ["subtask"]
    first, second = _children(runner, thread)
    assert runner.status(first).status == "waiting_user"
    # A plain resume of the parent looks again and starts no second child.
    runner.resume(thread)
    assert _children(runner, thread) == [first, second]
    assert RAN[first] == RAN[second] == 1
    runner.approve(first, "ok", by="alice")
    assert runner.status(thread).status == "waiting_external"
    runner.approve(second, "ok", by="alice")
    assert runner.status(thread).status == "completed"
    assert _kinds(runner, thread, "subtask.") == ["subtask.started"] * 2 + ["subtask.completed"] * 2


def test_cancelling_the_parent_cancels_each_child_once(runner: Runner) -> None:
    thread = runner.start(WAITS)
    children = _children(runner, thread)
    assert runner.cancel(thread, reason="changed plans", by="alice")
    assert runner.status(thread).status == "cancelled"
    for child in children:
        assert runner.status(child).status == "cancelled"
        assert UNDONE[child] == 1
    with pytest.raises(Exception, match="cancel"):
        runner.cancel(thread)
    assert [UNDONE[c] for c in children] == [1, 1]


@function_step
def spend(ctx: StepContext) -> int:
    RAN[ctx.thread_id] += 1
    ctx.charge(tokens=100, cost=0.5)
    return 100


SPENDER = LongTask("spender", stages=[Stage("one", [spend])], retry=1)
SPENDER2 = LongTask(
    "spender2",
    stages=[Stage("one", [spend]), Stage("two", [function_step(spend.fn, name="spend_more")])],
    retry=1,
)
BOUNDED = LongTask(
    "bounded",
    budget=Budget(tokens=250),
    stages=[Stage("fan", [subtask_step("spenders", SPENDER, over=lambda ctx: [{}] * 5)])],
)
DEEP = LongTask(
    "deep",
    budget=Budget(tokens=100),
    stages=[
        Stage(
            "fan",
            [
                subtask_step(
                    "middle",
                    LongTask(
                        "middle",
                        stages=[Stage("fan", [subtask_step("leaf", SPENDER2)])],
                    ),
                )
            ],
        )
    ],
)


def test_a_parents_budget_bounds_its_children_together(runner: Runner) -> None:
    thread = runner.start(BOUNDED)
    children = _children(runner, thread)
    # Charged to the child and to the parent: three children spent 300 tokens, and the
    # parent's 250 stopped the others before they ran.
    budget = runner.budget(thread)
    assert budget is not None and budget.used["tokens"] == 300
    assert [RAN[c] for c in children] == [1, 1, 1, 0, 0]
    for child in children[3:]:
        status = runner.status(child)
        assert status.status == "waiting_user"
        [waiting] = status.waiting
        assert waiting["kind"] == "budget"
        assert f"ancestor {thread}" in waiting["reason"]
        assert f"longtask budget {thread}" in waiting["command"]
    assert runner.status(thread).status == "waiting_external"
    # More budget for the parent, then the children go on and the parent completes.
    runner.raise_budget(thread, tokens=1000, by="alice")
    for child in children[3:]:
        runner.resume(child)
    assert runner.status(thread).status == "completed"
    assert runner.result(thread, "spenders") == [100] * 5
    after = runner.budget(thread)
    assert after is not None and after.used["tokens"] == 500


def test_a_grandchild_is_bound_by_its_grandparents_budget(runner: Runner) -> None:
    thread = runner.start(DEEP)
    [middle] = _children(runner, thread)
    [leaf] = _children(runner, middle)
    # The leaf's first step charged 100 to itself, the middle and the top, using up the
    # top's 100: its second step does not start.
    assert runner.budget(thread).used["tokens"] == 100  # type: ignore[union-attr]
    assert runner.budget(middle).used["tokens"] == 100  # type: ignore[union-attr]
    assert RAN[leaf] == 1
    leaf_status = runner.status(leaf)
    assert leaf_status.status == "waiting_user"
    assert f"ancestor {thread}" in leaf_status.waiting[0]["reason"]
    assert runner.status(thread).status == "waiting_external"
    assert runner.status(middle).status == "waiting_external"


def test_definition_problems_are_reported() -> None:
    with pytest.raises(DefinitionError, match="must be a LongTask"):
        LongTask("p", stages=[Stage("s", [subtask_step("x", "square")])])  # type: ignore[arg-type]
    with pytest.raises(DefinitionError, match="output 'nope' is not a step"):
        LongTask("p", stages=[Stage("s", [subtask_step("x", SQUARE, output="nope")])])
    with pytest.raises(DefinitionError, match="on_item_error is for the map form"):
        LongTask("p", stages=[Stage("s", [subtask_step("x", SQUARE, on_item_error="skip")])])


def test_a_childs_approval_over_http_continues_the_parent(runner: Runner) -> None:
    """The JSON API (what the page's buttons call) and the LangGraph Server API answer a
    child's approval; serve's executor runs the child, and its end continues the parent."""
    registry = Registry([Registered("gated_child", f"{__file__}:GATED", GATED)])
    alice = {"Authorization": "Bearer tok-alice"}
    with TestClient(
        create_app(runner, {"tok-alice": "alice"}, registry=registry, poll=0.02), headers=alice
    ) as client:
        # alice owns the tree: her children are hers too (she sees and answers them)
        thread = runner.start(WAITS, by="alice")
        first, second = _children(runner, thread)
        shown = client.get(f"/api/threads/{thread}").json()
        assert [r["thread_id"] for r in shown["subtasks"]["gated"]] == [first, second]
        assert client.get(f"/api/threads/{first}").json()["parent"]["thread_id"] == thread

        pending = client.get(f"/api/threads/{first}/pending").json()
        r = client.post(
            f"/api/threads/{first}/approve",
            json={"step": "ok", "plan_hash": pending[0]["request"]["plan_hash"]},
            headers=alice,
        )
        assert r.status_code == 202, r.text
        _until(lambda: runner.status(first).status == "completed")
        assert runner.status(thread).status == "waiting_external"

        r = client.post(
            f"/threads/{second}/runs",
            json={
                "assistant_id": "gated_child",
                "command": {"resume": {"decisions": [{"type": "approve"}]}},
            },
            headers=alice,
        )
        assert r.status_code == 200, r.text
        _until(lambda: runner.status(thread).status == "completed")
        assert runner.result(second, "ok")["by"] == "alice"


def _until(ok: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
