"""The compiled graph is a plain LangGraph graph: its own APIs work on it."""

from __future__ import annotations

from collections import Counter

import pytest
from langgraph.types import Command

from longtask import LongTask, Runner, Stage, StepContext, function_step
from longtask.errors import InvalidInput


def build(calls: Counter[str]) -> LongTask:
    def make(name: str, fn):  # type: ignore[no-untyped-def]
        def wrapper(ctx: StepContext) -> object:
            calls[name] += 1
            return fn(ctx)

        wrapper.__qualname__ = name
        return function_step(wrapper, name=name)

    return LongTask(
        "compat",
        stages=[
            Stage("one", [make("a", lambda c: 1), make("b", lambda c: 2)]),
            Stage("two", [make("c", lambda c: c.result("a") + c.result("b"))]),
            Stage("three", [make("d", lambda c: c.result("c") * 10)]),
        ],
    )


def test_one_node_per_step_and_parallel_superstep(runner: Runner) -> None:
    task = build(Counter())
    graph = runner.graph(task)
    nodes = set(graph.get_graph().nodes) - {"__start__", "__end__"}
    assert nodes == {"a", "b", "c", "d"}
    thread = runner.start(task)
    config = {"configurable": {"thread_id": thread}}
    steps_by_checkpoint = [set(h.completed) for h in reversed(runner.history(thread))]
    assert {"a", "b"} in steps_by_checkpoint  # parallel steps finish in one super-step
    snapshot = graph.get_state(config)
    assert snapshot.next == ()
    assert snapshot.values["out.d"] == 30  # the plain value, no envelope
    history = list(graph.get_state_history(config))
    assert len(history) == len(runner.history(thread, limit=100))


def test_update_state_and_command_goto(runner: Runner) -> None:
    calls: Counter[str] = Counter()
    task = build(calls)
    thread = runner.start(task)
    graph = runner.graph(task)
    config = {"configurable": {"thread_id": thread}}
    # A finished thread is not changed in place: update_state at its head is refused...
    with pytest.raises(InvalidInput, match="fork it from a checkpoint"):
        graph.update_state(config, {"out.c": 7}, as_node="c")
    # ...while LangGraph's own fork (update_state at a named checkpoint) re-runs d.
    head = graph.get_state(config).config["configurable"]["checkpoint_id"]
    at_head = {"configurable": {"thread_id": thread, "checkpoint_id": head}}
    graph.update_state(at_head, {"out.c": runner.codec.encode(7)}, as_node="c")
    runner.resume(thread, task=task)
    assert runner.result(thread, "d") == 70
    assert calls["d"] == 2 and calls["c"] == 1
    # Command passed through the Runner: refused on the completed thread, by step name on a
    # fork of it, then go to a step.
    with pytest.raises(InvalidInput, match="fork it from a checkpoint"):
        runner.resume(thread, Command(update={"c": 5}, goto="d"), task=task)
    head = graph.get_state(config).config["configurable"]["checkpoint_id"]
    runner.fork(thread, head, update={"c": 5}, task=task)
    runner.resume(thread, Command(goto="d"), task=task)
    assert runner.result(thread, "d") == 50
    assert calls["d"] == 3 and calls["a"] == 1
