"""Graph steps (issue 40): the user's own LangGraph graph run as a step, on both backends.
Model calls go through the real ``ChatOpenAI`` client to the scripted OpenAI-compatible
server of ``tests/fakes``."""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterator
from typing import Annotated, Any

import pytest
from fakes import FakeOpenAI, Reply, by_turn
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from typing_extensions import TypedDict

from longtask import (
    Budget,
    DefinitionChanged,
    DefinitionError,
    InvalidInput,
    LongTask,
    Runner,
    Stage,
    Transient,
    function_step,
    graph_step,
    ledgered,
)

SECRET = "sk-test-SECRET-graph-steps-91b2"


class State(TypedDict, total=False):
    n: int
    trail: Annotated[list[str], operator.add]
    answer: Any


def _add(name: str, k: int, calls: list[str] | None = None) -> Any:
    def node(state: State) -> dict[str, Any]:
        if calls is not None:
            calls.append(name)
        return {"n": state.get("n", 0) + k, "trail": [name]}

    node.__name__ = name
    return node


def chain(*names: str, calls: list[str] | None = None) -> StateGraph[Any, Any, Any, Any]:
    builder: StateGraph[Any, Any, Any, Any] = StateGraph(State)
    for i, name in enumerate(names, 1):
        builder.add_node(name, _add(name, i, calls))
    builder.add_edge(START, names[0])
    for a, b in itertools.pairwise(names):
        builder.add_edge(a, b)
    builder.add_edge(names[-1], END)
    return builder


@pytest.fixture
def llm(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
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


def test_builder_compiled_and_factory_graphs_run_as_steps(runner: Runner) -> None:
    calls: list[str] = []
    seen_config: list[str] = []

    def factory(config: RunnableConfig) -> Any:
        seen_config.append(str((config.get("configurable") or {}).get("thread_id")))
        return chain("f1", "f2", calls=calls).compile()

    task = LongTask(
        "graphs",
        stages=[
            Stage("one", [function_step(lambda ctx: ctx.inputs["start"] * 10, name="seed")]),
            Stage(
                "two",
                [
                    # a builder, its input from a dependency's result
                    graph_step(
                        "built",
                        chain("a", "b", "c", calls=calls),
                        input=lambda ctx: {"n": ctx.result("seed")},
                    ),
                    # a compiled graph, the default input (the task's inputs: no "n" key
                    # is read), its result made by output=
                    graph_step(
                        "compiled",
                        chain("x", "y", calls=calls).compile(),
                        input=lambda ctx: {},
                        output=lambda state: state["n"],
                    ),
                    graph_step("made", factory, input=lambda ctx: {"n": 100}),
                ],
            ),
        ],
    )
    thread = runner.start(task, {"start": 4}, thread_id="t-graphs")
    assert runner.status(thread).status == "completed"
    assert runner.result(thread, "built") == {"n": 46, "trail": ["a", "b", "c"]}
    assert runner.result(thread, "compiled") == 3
    assert runner.result(thread, "made") == {"n": 103, "trail": ["f1", "f2"]}
    assert sorted(calls) == sorted(["a", "b", "c", "x", "y", "f1", "f2"])
    assert seen_config == ["t-graphs"]
    # the graph's own checkpoints, one per super-step: its input, the input applied, a, b, c
    inner = runner.inner_history(thread, "built")
    assert [c.step for c in inner] == [3, 2, 1, 0, -1]
    assert [c.source for c in inner][-1] == "input"
    assert inner[0].updated == ["n", "trail"]
    assert all(c.checkpoint_ns.startswith("built:") for c in inner)
    with pytest.raises(InvalidInput, match="not a graph step"):
        runner.inner_history(thread, "seed")
    steps = {s.name: s for s in runner.status(thread).steps}
    assert steps["built"].kind == "graph" and steps["built"].state == "completed"
    # the graph was checkpointed in the thread, in the step node's namespace
    graph = runner.engine.graph(task)
    sub = graph.get_state({"configurable": {"thread_id": thread}}, subgraphs=True)
    assert sub.values["out.built"] is not None


def test_a_graph_step_is_checked_at_definition_time() -> None:
    with pytest.raises(DefinitionError, match="graph must be a LangGraph graph"):
        LongTask("bad", stages=[Stage("s", [graph_step("g", 42)])])
    # the graph's node names are part of the definition: renaming one changes the hash
    one = LongTask("h", stages=[Stage("s", [graph_step("g", chain("a", "b"))])])
    two = LongTask("h", stages=[Stage("s", [graph_step("g", chain("a", "c"))])])
    same = LongTask("h", stages=[Stage("s", [graph_step("g", chain("a", "b").compile())])])
    assert one.definition_hash != two.definition_hash
    assert one.definition_hash == same.definition_hash


def _asking() -> StateGraph[Any, Any, Any, Any]:
    def ask(state: State) -> dict[str, Any]:
        answer = interrupt({"question": "how much?", "n": state["n"]})
        return {"n": state["n"] + answer["add"], "trail": ["ask"], "answer": answer}

    builder: StateGraph[Any, Any, Any, Any] = StateGraph(State)
    builder.add_node("first", _add("first", 1))
    builder.add_node("ask", ask)
    builder.add_node("last", _add("last", 100))
    builder.add_edge(START, "first")
    builder.add_edge("first", "ask")
    builder.add_edge("ask", "last")
    builder.add_edge("last", END)
    return builder


def test_interrupts_of_the_graph_are_pauses_answered_by_id(runner: Runner) -> None:
    tools_ran: list[str] = []
    stopping = chain("plan", "tools", calls=tools_ran).compile(interrupt_before=["tools"])
    task = LongTask(
        "asks",
        stages=[
            Stage(
                "s",
                [
                    graph_step("asks", _asking(), input=lambda ctx: {"n": 0}),
                    graph_step("stops", stopping, input=lambda ctx: {"n": 0}),
                ],
            )
        ],
    )
    thread = runner.start(task, thread_id="t-asks")
    status = runner.status(thread)
    assert status.status == "waiting_user"
    pending = {p.step: p for p in runner.pending(thread)}
    assert set(pending) == {"asks", "stops"}
    assert {p.kind for p in pending.values()} == {"interrupt"}
    assert pending["asks"].request["value"] == {"question": "how much?", "n": 1}
    assert pending["stops"].request["value"] is None
    assert pending["stops"].request["next"] == ["tools"]
    assert tools_ran == ["plan"]
    # the CLI's status shows the command that answers it
    for w in status.waiting:
        assert f"`longtask resume t-asks --interrupt {w['interrupt_id']} --resume" in w["command"]
    assert [w.get("value") for w in status.waiting if w["step"] == "asks"] == [
        {"question": "how much?", "n": 1}
    ]

    # a bad answer changes nothing
    head = runner.engine.graph(task).get_state({"configurable": {"thread_id": thread}})
    with pytest.raises(InvalidInput):
        runner.answer(thread, {"add": {1, 2}}, interrupt=pending["asks"].interrupt_id, task=task)
    assert (
        runner.engine.graph(task).get_state({"configurable": {"thread_id": thread}}).config
        == head.config
    )

    # answering one leaves the other (a stop, which LangGraph would pass on any resume)
    runner.answer(thread, {"add": 5}, interrupt=pending["asks"].interrupt_id, by="ana", task=task)
    assert runner.status(thread).status == "waiting_user"
    assert [p.step for p in runner.pending(thread)] == ["stops"]
    assert tools_ran == ["plan"]

    runner.answer(thread, {}, interrupt="stops", by="bo", task=task)
    assert runner.status(thread).status == "completed"
    assert tools_ran == ["plan", "tools"]
    assert runner.result(thread, "stops") == {"n": 3, "trail": ["plan", "tools"]}
    assert runner.result(thread, "asks") == {
        "n": 106,
        "trail": ["first", "ask", "last"],
        "answer": {"add": 5},
    }
    resolved = runner.events(thread, kinds=["interrupt.resolved"])
    assert [(e.step, e.data["by"]) for e in resolved] == [("asks", "ana"), ("stops", "bo")]
    required = runner.events(thread, kinds=["interrupt.required"])
    assert sorted(e.step for e in required) == ["asks", "stops"]


def test_a_refused_answer_records_nobody_as_answering(runner: Runner) -> None:
    # The answer passes its own checks, and the run refuses it (the thread's definition
    # changed since): no `interrupt.resolved` says it was answered.
    task = LongTask(
        "refused", stages=[Stage("s", [graph_step("asks", _asking(), input=lambda ctx: {"n": 0})])]
    )
    thread = runner.start(task, {}, thread_id="t-refused")
    (pending,) = runner.pending(thread)
    changed = LongTask(
        "refused",
        version="2",
        stages=[Stage("s", [graph_step("asks", _asking(), input=lambda ctx: {"n": 0})])],
    )
    with pytest.raises(DefinitionChanged):
        runner.answer(thread, {"add": 1}, interrupt=pending.interrupt_id, by="ana", task=changed)
    assert runner.events(thread, kinds=["interrupt.resolved"]) == []
    assert [p.interrupt_id for p in runner.pending(thread)] == [pending.interrupt_id]
    runner.answer(thread, {"add": 1}, interrupt=pending.interrupt_id, by="bo", task=task)
    resolved = runner.events(thread, kinds=["interrupt.resolved"])
    assert [(e.data["by"], e.data["value"]) for e in resolved] == [("bo", {"add": 1})]


def _agent(tools: list[Any], **kw: Any) -> Any:
    """A LangChain agent, built when the step runs (ChatOpenAI reads the environment)."""

    def build() -> Any:
        from langchain.agents import create_agent
        from langchain_openai import ChatOpenAI

        return create_agent(ChatOpenAI(model="gpt-4o-mini", max_retries=0), tools, **kw)

    return build


def _messages(ctx: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": f"Research {ctx.inputs['topic']}."}]}


def _look(asynchronous: bool) -> Any:
    """A read-only tool; as a coroutine, the agent's graph runs on LangGraph's async API."""

    def look(topic: str) -> str:
        """Look a topic up."""
        return f"notes on {topic}"

    async def alook(topic: str) -> str:
        """Look a topic up."""
        return look(topic)

    return tool("look")(alook if asynchronous else look)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_model_calls_are_recorded_and_the_budget_stops_the_next(
    runner: Runner, llm: Any, asynchronous: bool
) -> None:
    look = _look(asynchronous)

    server = llm(
        by_turn(
            [
                Reply.tool_calls([("look", {"topic": "a"})], usage=(100, 50)),
                Reply.tool_calls([("look", {"topic": "b"})], usage=(100, 50)),
                Reply.text("done", usage=(100, 50), model="gpt-4o-mini-2024-07-18"),
            ]
        )
    )
    task = LongTask(
        "spend",
        stages=[
            Stage(
                "s",
                [
                    graph_step(
                        "research",
                        _agent([look]),
                        input=_messages,
                        output=lambda state: state["messages"][-1].content,
                    )
                ],
            )
        ],
        budget=Budget(tokens=200),
    )
    thread = runner.start(task, {"topic": "graphs"}, thread_id="t-spend")
    status = runner.status(thread)
    assert status.status == "waiting_user"
    assert status.waiting[0]["kind"] == "budget"
    assert status.waiting[0]["reason"] == "budget exceeded: tokens 300 of 200"
    assert len(server.requests) == 2  # stopped before the third call
    calls = runner.events(thread, kinds=["model.call"])
    assert [e.data["usage"] for e in calls] == [{"input": 100, "output": 50, "total": 150}] * 2
    assert all(e.data["latency"] >= 0 and e.data["node"] == "model" for e in calls)
    assert calls[0].data["cost"] == pytest.approx((100 * 0.15 + 50 * 0.60) / 1e6)
    assert SECRET not in str([e.data for e in runner.events(thread)])

    runner.raise_budget(thread, tokens=1000)
    runner.resume(thread, task=task)
    assert runner.result(thread, "research") == "done"
    # the graph continued after its last checkpoint: each request was sent once
    assert len(server.requests) == 3
    calls = runner.events(thread, kinds=["model.call"])
    assert len(calls) == 3 and calls[-1].data["model"] == "gpt-4o-mini-2024-07-18"
    budget = runner.budget(thread)
    assert budget is not None and budget.used["tokens"] == 450
    # the tools it ran (sync or async) are counted once each, across the budget pause
    assert budget.used["tool_calls"] == 2
    # the agent's messages are kept, as an agent step's are
    transcript = runner.transcript(thread, "research")
    assert [m["type"] for m in transcript] == ["human", "ai", "tool", "ai", "tool", "ai"]


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_a_ledgered_tool_is_not_repeated_when_its_node_runs_again(
    runner: Runner, llm: Any, asynchronous: bool
) -> None:
    charged: list[int] = []
    flaky_calls: list[int] = []

    def charge_(cents: int) -> str:
        """Charge the card."""
        charged.append(cents)
        return f"charged {cents}"

    def fetch_(page: int) -> str:
        """Fetch a page (fails once)."""
        flaky_calls.append(page)
        if len(flaky_calls) == 1:
            raise Transient("connection reset")
        return f"page {page}"

    async def acharge(cents: int) -> str:
        """Charge the card."""
        return charge_(cents)

    async def afetch(page: int) -> str:
        """Fetch a page (fails once)."""
        return fetch_(page)

    charge = tool("charge")(acharge if asynchronous else charge_)
    fetch = tool("fetch")(afetch if asynchronous else fetch_)

    llm(
        by_turn(
            [
                Reply.tool_calls([("charge", {"cents": 250}), ("fetch", {"page": 2})]),
                Reply.text("paid"),
            ]
        )
    )
    task = LongTask(
        "pay",
        stages=[
            Stage(
                "s",
                [
                    graph_step(
                        "pay",
                        _agent([ledgered(charge), fetch]),
                        input=_messages,
                        output=lambda state: state["messages"][-1].content,
                        retry=3,
                    )
                ],
            )
        ],
    )
    thread = runner.start(task, {"topic": "x"}, thread_id="t-pay")
    assert runner.result(thread, "pay") == "paid"
    # the tools node ran twice (the fetch failed once); the charge happened once
    assert flaky_calls == [2, 2]
    assert charged == [250]
    effects = {e.name: e for e in runner.effects(thread)}
    assert effects["tool:charge"].status == "succeeded"
    assert effects["tool:charge"].result == {"content": "charged 250", "status": "success"}
    # the unwrapped fetch is in the graph step's ledger too: its failed call ran again
    assert effects["tool:fetch"].status == "succeeded"
    (retry,) = runner.events(thread, kinds=["step.retry"])
    assert retry.step == "pay" and retry.data["error_class"] == "transient"


def test_a_ledgered_function_outside_a_step_says_where_it_works() -> None:
    @ledgered
    def send(to: str) -> str:
        return to

    with pytest.raises(Exception, match="only while a step runs"):
        send("x")


def test_a_failed_graph_step_resumes_at_the_failed_node(runner: Runner) -> None:
    calls: list[str] = []
    broken = [True]

    def check(state: State) -> dict[str, Any]:
        calls.append("check")
        if broken[0]:
            raise InvalidInput("the data is wrong")
        return {"trail": ["check"]}

    builder = chain("a", "b", calls=calls)
    builder.add_node("check", check)
    builder.add_edge("b", "check")  # a -> b -> check (and b -> END)
    task = LongTask(
        "fails", stages=[Stage("s", [graph_step("g", builder, input=lambda ctx: {"n": 0})])]
    )
    with pytest.raises(Exception, match="the data is wrong"):
        runner.start(task, thread_id="t-fails")
    status = runner.status("t-fails")
    assert status.status == "failed" and status.error is not None
    assert status.error["error_class"] == "invalid_input"  # not retried
    assert calls == ["a", "b", "check"]
    broken[0] = False
    runner.resume("t-fails", task=task)
    # a and b finished before the failure: only the failed node ran again
    assert calls == ["a", "b", "check", "check"]
    assert runner.result("t-fails", "g") == {"n": 3, "trail": ["a", "b", "check"]}


def test_over_budget_with_on_limit_fail_fails_before_the_next_call(
    runner: Runner, llm: Any
) -> None:
    @tool
    def look(topic: str) -> str:
        """Look a topic up."""
        return f"notes on {topic}"

    server = llm(
        by_turn(
            [
                Reply.tool_calls([("look", {"topic": "a"})], usage=(100, 50)),
                Reply.text("done", usage=(100, 50)),
            ]
        )
    )
    task = LongTask(
        "strict",
        stages=[Stage("s", [graph_step("research", _agent([look]), input=_messages)])],
        budget=Budget(tokens=100),
        on_limit="fail",
    )
    with pytest.raises(Exception, match="budget exceeded"):
        runner.start(task, {"topic": "graphs"}, thread_id="t-strict")
    assert runner.status("t-strict").status == "failed"
    assert len(server.requests) == 1  # the second call was never made
    (exceeded,) = runner.events("t-strict", kinds=["budget.exceeded"])
    assert exceeded.step == "research"


def test_a_retry_before_the_graph_ran_gives_it_its_input(runner: Runner) -> None:
    tries: list[int] = []

    def given(ctx: Any) -> dict[str, Any]:
        tries.append(ctx.attempt)
        if len(tries) == 1:
            raise Transient("the source of the input is down")
        return {"n": 7}

    task = LongTask(
        "late", stages=[Stage("s", [graph_step("g", chain("a"), input=given, retry=2)])]
    )
    thread = runner.start(task, thread_id="t-late")
    assert runner.result(thread, "g") == {"n": 8, "trail": ["a"]}
    assert len(tries) == 2


def test_a_ledgered_async_function_in_an_async_node_is_not_repeated(runner: Runner) -> None:
    """An ``async def`` node (the graph runs with ``ainvoke``) awaits a ledgered ``async
    def``; the node fails after it and runs again: the function ran once, and the retry got
    its recorded result."""
    sent: list[str] = []
    tries: list[int] = []

    @ledgered
    async def send(to: str) -> str:
        sent.append(to)
        return f"sent to {to}"

    async def notify(state: State) -> dict[str, Any]:
        receipt = await send("ops@example.com")
        tries.append(1)
        if len(tries) == 1:
            raise Transient("the queue after the send is down")
        return {"answer": receipt}

    builder: StateGraph[Any, Any, Any, Any] = StateGraph(State)
    builder.add_node("notify", notify)
    builder.add_edge(START, "notify")
    builder.add_edge("notify", END)
    task = LongTask(
        "notify",
        stages=[Stage("s", [graph_step("notify", builder, output=lambda s: s["answer"], retry=2)])],
    )
    thread = runner.start(task, thread_id="t-notify")
    assert runner.result(thread, "notify") == "sent to ops@example.com"
    assert sent == ["ops@example.com"] and len(tries) == 2
    (effect,) = runner.effects(thread)
    assert (effect.name, effect.status, effect.result) == (
        "tool:send",
        "succeeded",
        "sent to ops@example.com",
    )
