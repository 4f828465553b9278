"""Paying for model calls (issue 51): a model call's tokens and cost are charged by the write
that stores its ``model.call`` event, on both backends: no transaction of its own, no
ancestors query per call, and a write repeated (its answer lost) charges nothing twice."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fakes import FakeOpenAI, Reply, by_turn
from langchain_core.tools import tool

from longtask import LongTask, Runner, Stage, graph_step
from longtask.checkpointers._saver_sql import Batch
from longtask.store import NewEvent
from longtask.store._events import Charge


@pytest.fixture
def llm(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    servers: list[FakeOpenAI] = []

    def start(script: Any) -> FakeOpenAI:
        server = FakeOpenAI(script).start()
        servers.append(server)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-charges")
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        return server

    yield start
    for server in servers:
        server.stop()


@tool
def look(topic: str) -> str:
    """Look a topic up."""
    return f"notes on {topic}"


def _agent() -> Any:
    from langchain.agents import create_agent
    from langchain_openai import ChatOpenAI

    return create_agent(ChatOpenAI(model="gpt-4o-mini", max_retries=0), [look])


def test_model_calls_are_charged_with_their_events_and_no_query_of_their_own(
    runner: Runner, llm: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    llm(
        by_turn(
            [
                Reply.tool_calls([("look", {"topic": "a"})], usage=(100, 50)),
                Reply.tool_calls([("look", {"topic": "b"})], usage=(100, 50)),
                Reply.text("done", usage=(100, 50)),
            ]
        )
    )
    task = LongTask(
        "charged",
        stages=[
            Stage(
                "s",
                [
                    graph_step(
                        "research",
                        _agent,
                        input=lambda ctx: {"messages": [{"role": "user", "content": "go"}]},
                        output=lambda s: s["messages"][-1].content,
                    )
                ],
            )
        ],
    )
    store = runner.db.store
    asked: list[str] = []
    for name in ("charge", "ancestors"):
        real = getattr(store, name)

        def counted(*a: Any, _real: Any = real, _name: str = name, **k: Any) -> Any:
            asked.append(_name)
            return _real(*a, **k)

        monkeypatch.setattr(store, name, counted)
    thread = runner.start(task, thread_id="t-charged")
    assert runner.status(thread).status == "completed"
    assert len(runner.events(thread, kinds=["model.call"])) == 3
    # one look-up of the thread's ancestors for the run, none per model call
    assert asked == ["ancestors"]
    budget = runner.budget(thread)
    assert budget is not None
    assert budget.used["tokens"] == 450
    assert budget.used["cost"] == pytest.approx(3 * (100 * 0.15 + 50 * 0.60) / 1e6)
    (row,) = [r for r in store.usage(thread) if r[0] == "research"]
    # the two tools the agent ran are charged too, with the model calls' events
    assert row[1:5] == (450, pytest.approx(3 * (100 * 0.15 + 50 * 0.60) / 1e6), 2, 3)


def test_a_repeated_write_charges_its_events_once(runner: Runner) -> None:
    store = runner.db.store
    store.budget_init("t-parent", {"tokens": 1000}, None)
    event = NewEvent(
        "t-child",
        "model.call",
        "run/task/model.call/1",
        step="research",
        data={"usage": {"total": 120}},
        charge=Charge(("t-child", "t-parent"), "research", tokens=120, cost=0.5, model_calls=1),
    )
    backend = runner.db.saver.backend
    plain = NewEvent("t-child", "step.progress", "run/task/progress/1", step="research")
    for _ in range(2):  # the second time: as a write repeated after its answer was lost
        backend.write("t-child", None, Batch(events=[plain, event]))
    for who in ("t-child", "t-parent"):
        budget = store.budget(who)
        assert budget is not None
        assert (budget.used["tokens"], budget.used["cost"]) == (120, 0.5)
    (row,) = store.usage("t-child")
    assert row[0] == "research"
    assert row[1:5] == (120, 0.5, 0, 1)
    assert budget.limits["tokens"] == 1000
