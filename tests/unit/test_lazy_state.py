"""A node's lazily read state (graphs._node.LazyState) is what LangGraph would have given
the node as its whole-state input: the channels at the start of its super-step."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from longtask.graphs._node import LazyState


class State(TypedDict, total=False):
    inputs: int
    a: int
    b: int
    never: int


class Small(TypedDict, total=False):
    inputs: int


NAMES = frozenset(State.__annotations__)


def test_lazy_reads_match_the_whole_state_input() -> None:
    seen: dict[str, Any] = {}

    def first(state: Any, config: RunnableConfig) -> dict[str, Any]:
        return {"a": state["inputs"] + 1}

    def sibling(state: Any, config: RunnableConfig) -> dict[str, Any]:
        lazy = LazyState(state, config, NAMES)
        # a write of the same super-step is not visible (it is applied after the step)
        seen["sibling_sees_a"] = "a" in lazy
        return {"b": 10}

    def last(state: Any, config: RunnableConfig) -> dict[str, Any]:
        lazy = LazyState(state, config, NAMES)
        seen["given"] = dict(state)
        seen["a"], seen["b"], seen["inputs"] = lazy["a"], lazy.get("b"), lazy["inputs"]
        seen["never"] = lazy.get("never", "absent")
        seen["unknown"] = lazy.get("not-a-channel", "absent")
        seen["all"] = dict(lazy)
        with pytest.raises(KeyError):
            lazy["never"]
        return {}

    graph: StateGraph[Any, Any, Any, Any] = StateGraph(State)
    graph.add_node("first", first, input_schema=Small)
    graph.add_node("sibling", sibling, input_schema=Small)
    graph.add_node("last", last, input_schema=Small)
    graph.add_edge(START, "first")
    graph.add_edge(START, "sibling")
    graph.add_edge(["first", "sibling"], "last")
    graph.add_edge("last", END)
    graph.compile().invoke({"inputs": 1})

    assert seen["given"] == {"inputs": 1}, "the node's input is the inputs channel only"
    assert seen["sibling_sees_a"] is False
    assert (seen["a"], seen["b"], seen["inputs"]) == (2, 10, 1)
    assert seen["never"] == "absent" and seen["unknown"] == "absent"
    assert seen["all"] == {"inputs": 1, "a": 2, "b": 10}


def test_without_a_reader_only_the_given_values_are_there() -> None:
    lazy = LazyState({"inputs": 3}, {"configurable": {}}, NAMES)
    assert dict(lazy) == {"inputs": 3} and len(lazy) == 1
    with pytest.raises(KeyError):
        lazy["a"]
