"""The graph step's model: what it accepts, what it refuses at definition time, and what
of it makes the definition's hash. The model tells graphs apart by shape, without
importing LangGraph."""

from __future__ import annotations

from typing import Any

import pytest

from longtask import DefinitionError, LongTask, Stage
from longtask.model import GraphStep, graph_kind, graph_step


class Builder:
    """Shaped like a StateGraph: add_node, compile, nodes."""

    def __init__(self, *nodes: str) -> None:
        self.nodes = {n: object() for n in nodes}

    def add_node(self, *a: Any) -> None: ...

    def compile(self) -> Any: ...


class Compiled:
    """Shaped like a compiled graph: invoke, get_state, nodes (with LangGraph's own)."""

    def __init__(self, *nodes: str) -> None:
        self.nodes = {"__start__": object(), **{n: object() for n in nodes}}

    def invoke(self, *a: Any) -> Any: ...

    def get_state(self, *a: Any) -> Any: ...


def make_graph(config: Any) -> Any:
    return Builder("a")


def task(graph: Any, **kw: Any) -> LongTask:
    return LongTask("t", stages=[Stage("s", [graph_step("g", graph, **kw)])])


def test_graphs_are_told_apart_by_shape() -> None:
    assert graph_kind(Builder("a")) == "builder"
    assert graph_kind(Compiled("a")) == "compiled"
    assert graph_kind(make_graph) == "factory"
    assert graph_kind(42) is None


def test_what_is_not_a_graph_is_refused_with_every_problem() -> None:
    with pytest.raises(DefinitionError) as err:
        LongTask(
            "t",
            stages=[
                Stage(
                    "s",
                    [graph_step("g", "not a graph", output=3, recursion_limit=0)],  # type: ignore[arg-type]
                )
            ],
        )
    text = str(err.value)
    assert "graph must be a LangGraph graph" in text
    assert "output must be a callable" in text
    assert "recursion_limit must be at least 1" in text


def test_the_hash_follows_the_graphs_node_names() -> None:
    one = task(Builder("a", "b")).definition_hash
    assert task(Compiled("b", "a")).definition_hash == one  # LangGraph's own nodes left out
    assert task(Builder("a", "c")).definition_hash != one
    assert task(make_graph).definition_hash != one
    step = task(Builder("a")).steps["g"]
    assert isinstance(step, GraphStep) and step.kind == "graph" and step.may_pause
    assert step.spec()["graph"] == ["a"]
    assert task(make_graph).steps["g"].spec()["graph"] == "make_graph"
