"""How a graph step's ledger settles a cut-off tool call: the mark a tool gets, and which
work inside a tool call makes it one that may run again (no model, no database)."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import tool

from longtask.steps import _toolcalls
from longtask.steps._toolcalls import inner_work, mark_of


@tool
def charge(cents: int) -> str:
    """Charge the card."""
    return "charged"


def _deep_agents_task_tool() -> Any:
    subagents = pytest.importorskip("deepagents.middleware.subagents")
    agent = RunnableLambda(lambda state: {"messages": state["messages"]})
    spec = {"name": "helper", "description": "Helps.", "runnable": agent}
    return subagents._build_task_tool([spec])


def test_a_tool_is_marked_by_name_then_its_own_metadata_then_star() -> None:
    assert mark_of("charge", charge, {}) == "once"
    assert mark_of("charge", charge, {"*": "read_only"}) == "read_only"
    assert mark_of("charge", charge, {"charge": "idempotent", "*": "read_only"}) == "idempotent"
    own = charge.model_copy(update={"metadata": {"longtask": "read_only"}})
    assert mark_of("charge", own, {"*": "once"}) == "read_only"
    assert mark_of("charge", own, {"charge": "once"}) == "once"


def test_deep_agents_task_tool_runs_again_unless_marked() -> None:
    """It only runs a sub-agent: cut off, it runs again (the sub-agent starts, or goes on from
    its checkpoints), above a mark for every tool; a mark by its name still decides."""
    task = _deep_agents_task_tool()
    assert task.name == "task"
    assert mark_of("task", task, {}) == "idempotent"
    assert mark_of("task", task, {"*": "once"}) == "idempotent"
    assert mark_of("task", task, {"task": "once"}) == "once"


class _Forgets:
    def __init__(self) -> None:
        self.keys: list[str] = []

    def __call__(self, key: str, why: str) -> None:
        self.keys.append(key)


def test_only_a_graph_below_the_call_makes_it_one_that_may_run_again() -> None:
    forget = _Forgets()
    running = _toolcalls._Running("eff-1", "step:1|tools:2", forget)
    token = _toolcalls._RUNNING.set(running)
    try:
        # a model call the tool makes itself is in the tool call's own namespace
        inner_work("step:1|tools:2")
        # a sibling call's work, and work of no graph, are not the call's
        inner_work("step:1|tools:3|model:4")
        inner_work("step:1|tools:22|model:4")
        inner_work(None)
        assert forget.keys == []
        # a node of a graph the call runs (its sub-agent's), at any depth: cleared once
        inner_work("step:1|tools:2|model:5")
        inner_work("step:1|tools:2|1|tools:6")
        assert forget.keys == ["eff-1"]
    finally:
        _toolcalls._RUNNING.reset(token)
    # outside a ledgered call, nothing to clear
    inner_work("step:1|tools:2|model:5")
    assert forget.keys == ["eff-1"]
