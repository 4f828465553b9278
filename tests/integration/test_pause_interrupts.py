"""Every pause is LangGraph's ``interrupt()``: a budget reached, a permission missing and an
effect whose outcome is unknown are interrupts in the thread's state, seen by LangGraph's own
API (``get_state().interrupts``) as by the Runner (``pending``), and answered through the raw
graph with ``Command(resume=...)`` with the same checks as the CLI. An approval's interrupt
value also carries LangChain's human-in-the-loop shape, answered with ``decisions``.

Agent steps go through the real ``ChatOpenAI`` client to the scripted server of
``tests/fakes``, on both backends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes import FakeOpenAI, Reply, by_turn
from langchain_core.runnables import RunnableConfig
from langgraph.types import Command

from longtask import (
    Budget,
    InvalidInput,
    LongTask,
    PermissionDenied,
    Runner,
    Stage,
    StepContext,
    approval,
    function_step,
)
from longtask.model import agent_step

SECRET = "sk-test-interrupts-0000"


@pytest.fixture
def llm(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Start the fake server with ``llm(script)``; the env points ChatOpenAI at it."""
    servers: list[FakeOpenAI] = []

    def start(script: Any) -> FakeOpenAI:
        server = FakeOpenAI(script).start()
        servers.append(server)
        monkeypatch.setenv("OPENAI_API_KEY", SECRET)
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        return server

    yield start
    for server in servers:
        server.stop()


def config(thread: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread}}


def interrupts(runner: Runner, task: LongTask, thread: str) -> list[Any]:
    return list(runner.graph(task).get_state(config(thread)).interrupts)


def test_a_budget_reached_is_an_interrupt_answered_through_the_raw_graph(
    runner: Runner, llm: Any
) -> None:
    def look(topic: str) -> str:
        """Look a topic up."""
        return f"notes on {topic}"

    server = llm(
        by_turn(
            [
                Reply.tool_calls([("look", {"topic": "a"})], usage=(100, 50)),
                Reply.tool_calls([("look", {"topic": "b"})], usage=(100, 50)),
                Reply.text("done", usage=(100, 50)),
            ]
        )
    )
    task = LongTask(
        "spend",
        stages=[Stage("s", [agent_step("research", prompt="Research.", tools=[look])])],
        budget=Budget(tokens=200),
    )
    thread = runner.start(task, thread_id="t-budget")
    assert len(server.requests) == 2  # paused before the third call
    (first,) = interrupts(runner, task, thread)
    assert first.value["kind"] == "budget" and first.value["step"] == "research"
    assert first.value["reason"] == "budget exceeded: tokens 300 of 200"
    assert "longtask budget t-budget" in first.value["command"]
    assert "answer" in first.value and first.value["used"]["tokens"] == 300
    # the Runner sees the same interrupt, and says what the thread waits for
    (pending,) = runner.pending(thread, task=task)
    assert (pending.kind, pending.interrupt_id) == ("budget", first.id)
    status = runner.status(thread)
    assert status.status == "waiting_user"
    assert [(w["kind"], w["interrupt_id"]) for w in status.waiting] == [("budget", first.id)]

    graph = runner.graph(task)
    # answered without a raise: the step checks again and pauses again, with no model call
    graph.invoke(Command(resume={first.id: {"continue": True}}), config(thread))
    (again,) = interrupts(runner, task, thread)
    assert again.value["kind"] == "budget" and again.id != first.id
    assert len(server.requests) == 2
    runner.raise_budget(thread, tokens=1000)
    graph.invoke(Command(resume={again.id: {"continue": True}}), config(thread))
    state = graph.get_state(config(thread))
    assert state.interrupts == () and state.next == ()
    assert runner.result(thread, "research") == "done"
    assert [r.turn for r in server.requests] == [0, 1, 2]  # the agent went on, not over


def test_a_missing_permission_is_an_interrupt_answered_through_the_raw_graph(
    runner: Runner, llm: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = llm(by_turn([Reply.text("hello")]))
    monkeypatch.delenv("OPENAI_API_KEY")
    task = LongTask("k", stages=[Stage("s", [agent_step("greeter", prompt="Hi.")])])
    thread = runner.start(task, thread_id="t-key")
    (first,) = interrupts(runner, task, thread)
    assert first.value["kind"] == "permission" and first.value["step"] == "greeter"
    assert "needs OPENAI_API_KEY" in first.value["reason"]
    assert "longtask retry t-key" in first.value["command"]
    assert [p.kind for p in runner.pending(thread, task=task)] == ["permission"]
    assert runner.status(thread).waiting[0]["interrupt_id"] == first.id

    graph = runner.graph(task)
    graph.invoke(Command(resume={first.id: {"retry": True}}), config(thread))
    (again,) = interrupts(runner, task, thread)  # still no key: paused again
    assert again.value["kind"] == "permission" and again.id != first.id
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    graph.invoke(Command(resume={again.id: {"retry": True}}), config(thread))
    assert interrupts(runner, task, thread) == []
    assert runner.result(thread, "greeter") == "hello"
    assert len(server.requests) == 1


def test_a_permission_pause_of_a_function_step_gets_fresh_attempts_on_resume(
    runner: Runner,
) -> None:
    calls: list[int] = []
    allowed = {"yes": False}

    @function_step
    def call(ctx: StepContext) -> str:
        calls.append(ctx.attempt)
        if not allowed["yes"]:
            raise PermissionDenied("key lacks scope repo:write")
        return "ok"

    task = LongTask("perm", stages=[Stage("s", [call])])
    thread = runner.start(task, thread_id="t-perm")
    (first,) = interrupts(runner, task, thread)
    assert first.value["kind"] == "permission" and first.value["attempt"] == 1
    graph = runner.graph(task)
    graph.invoke(Command(resume={first.id: {"retry": True}}), config(thread))
    (again,) = interrupts(runner, task, thread)
    assert again.value["attempt"] == 2
    assert calls == [1, 2]  # one fresh attempt per answer, none before it
    allowed["yes"] = True
    # the CLI's `retry` answers the interrupt too
    runner.retry(thread, task=task)
    assert runner.status(thread).status == "completed"
    assert calls == [1, 2, 3]
    assert runner.result(thread, "call") == "ok"


class Crash(KeyboardInterrupt):
    pass


def effect_task(calls: list[int], crash: dict[str, bool]) -> LongTask:
    def charge(amount: int) -> dict[str, int]:
        calls.append(amount)
        if crash.pop("once", False):
            raise Crash
        return {"charged": amount}

    @function_step
    def pay(ctx: StepContext) -> Any:
        return ctx.effect("charge", charge, 42)

    return LongTask("pay", stages=[Stage("pay", [pay])])


@pytest.mark.parametrize(
    ("answer", "result", "charged", "outcome"),
    [
        (
            {"succeeded": {"charged": 42, "by": "hand"}},
            {"charged": 42, "by": "hand"},
            1,
            "succeeded",
        ),
        ({"retry": True}, {"charged": 42}, 2, "retry"),
        # Agent Inbox's answers, read by the graph as every door reads them
        (
            [{"type": "response", "args": '{"charged": 42, "by": "inbox"}'}],
            {"charged": 42, "by": "inbox"},
            1,
            "succeeded",
        ),
        ([{"type": "accept", "args": None}], {"charged": 42}, 2, "retry"),
    ],
)
def test_an_unknown_effect_is_an_interrupt_settled_through_the_raw_graph(
    runner: Runner, answer: Any, result: Any, charged: int, outcome: str
) -> None:
    calls: list[int] = []
    task = effect_task(calls, {"once": True})
    with pytest.raises(Crash):
        runner.start(task, thread_id="t-eff")
    graph = runner.graph(task)
    graph.invoke(None, config("t-eff"))  # the raw graph finds the call cut off and pauses
    (intr,) = interrupts(runner, task, "t-eff")
    assert intr.value["kind"] == "effect" and intr.value["reason"] == "effect outcome unknown"
    assert "succeeded" in intr.value["answer"]
    assert [p.kind for p in runner.pending("t-eff", task=task)] == ["effect"]
    # not an answer for an effect: asked again, the ledger unchanged
    graph.invoke(Command(resume={intr.id: {"anything": 1}}), config("t-eff"))
    (again,) = interrupts(runner, task, "t-eff")
    assert [e.status for e in runner.effects("t-eff")] == ["started"]
    graph.invoke(Command(resume={again.id: answer}), config("t-eff"))
    assert interrupts(runner, task, "t-eff") == []
    assert runner.result("t-eff", "pay") == result
    assert len(calls) == charged
    (effect,) = runner.effects("t-eff")
    assert effect.status == "succeeded"
    (resolved,) = runner.events("t-eff", kinds=["manual.resolve"])
    assert resolved.data["outcome"] == outcome


def test_an_unknown_effect_resolved_as_failed_through_the_raw_graph_fails_the_step(
    runner: Runner,
) -> None:
    calls: list[int] = []
    task = effect_task(calls, {"once": True})
    with pytest.raises(Crash):
        runner.start(task, thread_id="t-efail")
    graph = runner.graph(task)
    graph.invoke(None, config("t-efail"))
    (intr,) = interrupts(runner, task, "t-efail")
    with pytest.raises(Exception, match="resolved as failed by ops: never happened"):
        graph.invoke(
            Command(resume={intr.id: {"failed": "never happened", "by": "ops"}}),
            config("t-efail"),
        )
    assert len(calls) == 1


def approval_task(approvers: list[str] | None = None) -> LongTask:
    @function_step
    def build(ctx: StepContext) -> str:
        return "v1"

    @function_step
    def ship(ctx: StepContext) -> str:
        return f"shipped {ctx.result('build')}"

    gate = approval(
        "gate",
        plan=lambda ctx: {"deploy": ctx.result("build")},
        approvers=approvers,
    )
    return LongTask(
        "ship", stages=[Stage("build", [build]), Stage("review", [gate]), Stage("go", [ship])]
    )


def test_an_approval_carries_the_hitl_shape_and_takes_decisions(runner: Runner) -> None:
    task = approval_task()
    thread = runner.start(task, thread_id="t-hitl")
    (intr,) = interrupts(runner, task, thread)
    value = intr.value
    assert value["kind"] == "approval" and value["plan"] == {"deploy": "v1"}
    (action,) = value["action_requests"]
    assert action["name"] == "gate"
    assert action["args"] == {"plan": {"deploy": "v1"}, "plan_hash": value["plan_hash"]}
    assert action["arguments"] == action["args"]  # where Agent Inbox reads them
    assert value["review_configs"] == [
        {"action_name": "gate", "allowed_decisions": ["approve", "reject"]}
    ]
    graph = runner.graph(task)
    # an edit that changes the plan fails the plan-hash check: asked again
    edit = {"type": "edit", "edited_action": {"name": "gate", "args": {"plan": {"deploy": "v2"}}}}
    graph.invoke(Command(resume={intr.id: {"decisions": [edit]}}), config(thread))
    (again,) = interrupts(runner, task, thread)
    (refused,) = runner.events(thread, kinds=["approval.refused"])
    assert "cannot be edited" in refused.data["error"]
    graph.invoke(Command(resume={again.id: {"decisions": [{"type": "approve"}]}}), config(thread))
    assert runner.result(thread, "ship") == "shipped v1"
    (resolved,) = runner.events(thread, kinds=["approval.resolved"])
    # nothing in a raw resume says who decided: recorded as such
    assert (resolved.data["outcome"], resolved.data["by"]) == ("approved", "langgraph")


def test_a_hitl_decision_meets_the_approvers_check(runner: Runner) -> None:
    task = approval_task(approvers=["ops"])
    thread = runner.start(task, thread_id="t-hitl-ops")
    (intr,) = interrupts(runner, task, thread)
    graph = runner.graph(task)
    # a raw decision names nobody: an approval limited to approvers refuses it
    graph.invoke(Command(resume={intr.id: {"decisions": [{"type": "approve"}]}}), config(thread))
    assert [p.kind for p in runner.pending(thread, task=task)] == ["approval"]
    (refused,) = runner.events(thread, kinds=["approval.refused"])
    assert "'langgraph' may not decide" in refused.data["error"]
    assert runner.events(thread, kinds=["approval.resolved"]) == []


def test_the_runner_takes_a_hitl_rejection_as_its_user(runner: Runner) -> None:
    from longtask import StepFailed
    from longtask.runtime._who import whoami

    task = approval_task()
    thread = runner.start(task, thread_id="t-hitl-no")
    answer = {"decisions": [{"type": "reject", "message": "not today"}]}
    with pytest.raises(StepFailed, match="not today"):
        runner.answer(thread, answer, interrupt="gate", task=task)
    (resolved,) = runner.events(thread, kinds=["approval.resolved"])
    assert resolved.data["outcome"] == "rejected"
    assert resolved.data["by"] == whoami() and resolved.data["comment"] == "not today"


PERM_TASK = """
from pathlib import Path

from longtask import LongTask, PermissionDenied, Stage, StepContext, function_step

ALLOWED = Path(__file__).with_name("allowed")


@function_step
def call(ctx: StepContext) -> str:
    if not ALLOWED.exists():
        raise PermissionDenied("key lacks scope repo:write")
    return "ok"


task = LongTask("perm_cli", stages=[Stage("s", [call])])
"""


def test_the_cli_shows_and_answers_a_permission_interrupt(db_url: str, tmp_path: Path) -> None:
    from conftest import run_cli

    (tmp_path / "perm_task.py").write_text(PERM_TASK)
    ref = f"{tmp_path / 'perm_task.py'}:task"
    ran = run_cli("run", ref, "--thread", "t-cli", db=db_url)
    assert ran.returncode == 3, ran.stderr
    shown = run_cli("pending", "t-cli", db=db_url)
    assert shown.returncode == 0, shown.stderr
    assert "(permission, interrupt " in shown.stdout
    assert "key lacks scope repo:write" in shown.stdout
    assert "longtask retry t-cli" in shown.stdout
    assert "longtask signal" not in shown.stdout
    again = run_cli("retry", "t-cli", db=db_url)  # still denied: paused again
    assert again.returncode == 3, again.stderr
    (tmp_path / "allowed").write_text("")
    done = run_cli("retry", "t-cli", db=db_url)
    assert done.returncode == 0, done.stderr
    assert run_cli("result", "t-cli", "call", db=db_url).stdout.strip() == "ok"


def test_a_fix_loop_out_of_rounds_asks_with_an_interrupt(runner: Runner, llm: Any) -> None:
    from longtask.model import fix_with

    llm(by_turn([Reply.text("I could not fix it")]))
    fixed = {"yes": False}

    def check(ctx: StepContext) -> str:
        if not fixed["yes"]:
            raise AssertionError("tests fail")
        return "passed"

    fixer = agent_step("fixer", prompt="Fix round {round}: {failure}")
    step = function_step(check, on_failure=fix_with(fixer, 1, on_exhausted="ask"))
    task = LongTask("fixing", stages=[Stage("verify", [step])])
    thread = runner.start(task, thread_id="t-fixask")
    (intr,) = interrupts(runner, task, thread)
    assert intr.value["kind"] == "fix" and intr.value["step"] == "check"
    assert "still failing after 1 fix round:" in intr.value["reason"]
    status = runner.status(thread)
    assert status.status == "waiting_user"
    assert [(w["kind"], w["interrupt_id"]) for w in status.waiting] == [("fix", intr.id)]
    fixed["yes"] = True
    runner.retry(thread, task=task)  # answers the interrupt: the step runs again
    assert runner.result(thread, "check") == "passed"


def test_a_tool_approval_carries_the_hitl_shape_and_takes_decisions(
    runner: Runner, llm: Any
) -> None:
    deployed: list[str] = []

    def deploy(env: str) -> str:
        """Deploy to an environment."""
        deployed.append(env)
        return f"deployed to {env}"

    llm(by_turn([Reply.tool_calls([("deploy", {"env": "prod"})]), Reply.text("shipped")]))
    release = agent_step(
        "release", prompt="Ship it.", tools=[deploy], tool_approvals={"deploy": True}
    )
    task = LongTask("ship", stages=[Stage("s", [release])])
    thread = runner.start(task, thread_id="t-tool-hitl")
    (intr,) = interrupts(runner, task, thread)
    assert intr.value["action_requests"][0]["name"] == "deploy"
    assert intr.value["action_requests"][0]["args"] == {"env": "prod"}
    assert intr.value["review_configs"][0]["allowed_decisions"] == [
        "approve",
        "edit",
        "reject",
        "respond",
    ]
    graph = runner.graph(task)
    # an edit whose arguments do not fit the tool is refused: asked again, nothing deployed
    bad = {"type": "edit", "edited_action": {"name": "deploy", "args": {"where": "staging"}}}
    graph.invoke(Command(resume={intr.id: {"decisions": [bad]}}), config(thread))
    (again,) = interrupts(runner, task, thread)
    assert deployed == []
    (refused,) = runner.events(thread, kinds=["approval.refused"])
    assert "do not fit the tool" in refused.data["error"]
    # an edit that calls another tool is refused too
    other = {"type": "edit", "edited_action": {"name": "rm", "args": {"env": "staging"}}}
    graph.invoke(Command(resume={again.id: {"decisions": [other]}}), config(thread))
    (third,) = interrupts(runner, task, thread)
    assert deployed == []
    # a corrected call runs with the person's arguments, bound to them by their hash
    edit = {"type": "edit", "edited_action": {"name": "deploy", "args": {"env": "staging"}}}
    graph.invoke(Command(resume={third.id: {"decisions": [edit]}}), config(thread))
    assert deployed == ["staging"]
    assert runner.result(thread, "release") == "shipped"
    (resolved,) = runner.events(thread, kinds=["approval.resolved"])
    assert resolved.data["decision"] == "edit"
    assert resolved.data["edited_args"] == {"env": "staging"}
    effects = [e for e in runner.effects(thread) if e.name == "tool:deploy"]
    assert [e.status for e in effects] == ["succeeded"]  # the corrected call, once


def test_a_tool_approval_answered_in_the_tools_place_does_not_run_it(
    runner: Runner, llm: Any
) -> None:
    deployed: list[str] = []

    def deploy(env: str) -> str:
        """Deploy to an environment."""
        deployed.append(env)
        return f"deployed to {env}"

    seen: list[Any] = []

    def turn(request: Any) -> Reply:
        seen.append(request)
        if request.turn == 0:
            return Reply.tool_calls([("deploy", {"env": "prod"})])
        return Reply.text("ok then")

    llm(turn)
    release = agent_step(
        "release", prompt="Ship it.", tools=[deploy], tool_approvals={"deploy": True}
    )
    task = LongTask("ship", stages=[Stage("s", [release])])
    thread = runner.start(task, thread_id="t-tool-respond")
    (pending,) = runner.pending(thread, task=task)
    # Agent Inbox's response, given through the Runner in a caller's name
    runner.answer(
        thread,
        [{"type": "response", "args": "prod is frozen today; say so"}],
        interrupt=pending.interrupt_id,
        task=task,
        by="ops",
    )
    assert deployed == []
    assert runner.result(thread, "release") == "ok then"
    (resolved,) = runner.events(thread, kinds=["approval.resolved"])
    assert (resolved.data["decision"], resolved.data["by"]) == ("respond", "ops")
    tool_messages = [m for m in seen[-1].messages if m.get("role") == "tool"]
    assert tool_messages and tool_messages[-1]["content"] == "prod is frozen today; say so"


def test_an_answer_given_in_a_callers_name_cannot_name_another_approver(
    runner: Runner,
) -> None:
    task = approval_task(approvers=["ops", "lead"])
    thread = runner.start(task, thread_id="t-hitl-by")
    (pending,) = runner.pending(thread, task=task)
    decision = {"approved": True, "by": "lead", "plan_hash": pending.request["plan_hash"]}
    with pytest.raises(InvalidInput, match="names 'lead' as its approver, but it is given by"):
        runner.answer(thread, decision, interrupt="gate", task=task, by="ops")
    assert runner.events(thread, kinds=["approval.resolved"]) == []
    # a HITL decision takes the caller's identity, checked against the approvers
    approve = {"decisions": [{"type": "approve"}]}
    runner.answer(thread, approve, interrupt="gate", task=task, by="ops")
    (resolved,) = runner.events(thread, kinds=["approval.resolved"])
    assert (resolved.data["outcome"], resolved.data["by"]) == ("approved", "ops")
    assert runner.result(thread, "ship") == "shipped v1"
