"""Task references that name a plain LangGraph graph (issue 40): each loads as the one-step
LongTask around a graph step (``GraphApp``), named after the attribute or ``#name``; what is
no graph and no task is refused with the reason; langgraph.json's paths are read beside it
and its local dependencies made importable."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from longtask.errors import TaskRefError
from longtask.model import GraphApp, GraphStep, graph_kind
from longtask.runtime import load_versions
from longtask.serve._registry import load_registry

GRAPHS = """
from typing_extensions import TypedDict
from langgraph.graph import START, StateGraph

from longtask import LongTask, Stage, function_step


class S(TypedDict):
    n: int


def add(state: S) -> dict:
    return {"n": state["n"] + 1}


builder = StateGraph(S)
builder.add_node("add", add)
builder.add_edge(START, "add")
graph = builder.compile()


def make(config):
    return builder.compile()


def make_none():
    return builder


def needs(x):
    return x


async def amake(config):
    return builder.compile()


task = LongTask("plain_task", stages=[Stage("s", [function_step(lambda ctx: 1, name="one")])])
"""


@pytest.fixture
def module(tmp_path: Path) -> Path:
    path = tmp_path / "graphs_mod.py"
    path.write_text(GRAPHS)
    return path


@pytest.mark.parametrize(
    ("attr", "kind"),
    [("graph", "compiled"), ("builder", "builder"), ("make", "factory"), ("make_none", "factory")],
)
def test_a_graph_loads_as_a_one_step_task(module: Path, attr: str, kind: str) -> None:
    task = load_versions(f"{module}:{attr}").newest
    assert isinstance(task, GraphApp)
    assert task.name == attr.lower() and [s.name for s in task.steps.values()] == [attr.lower()]
    step = task.graph_step
    assert isinstance(step, GraphStep) and graph_kind(step.graph) == kind
    # the same reference loads the same definition (a worker, `check`)
    assert load_versions(f"{module}:{attr}").newest.definition_hash == task.definition_hash


def test_a_name_after_hash_names_the_task_and_its_step(module: Path) -> None:
    task = load_versions(f"{module}:graph#My-Agent").newest
    assert task.name == "My-Agent" and task.graph_step.name == "my_agent"
    other = load_versions(f"{module}:graph#ask").newest
    assert other.definition_hash != task.definition_hash


@pytest.mark.parametrize(
    ("ref", "says"),
    [
        ("needs", "takes arguments, not a LongTask"),
        ("amake", "is an async function"),
        ("task#other", "drop '#other'"),
        ("graph#", "must look like"),
    ],
)
def test_what_is_no_graph_and_no_task_is_refused(module: Path, ref: str, says: str) -> None:
    with pytest.raises(TaskRefError, match=says.replace("(", r"\(")):
        load_versions(f"{module}:{ref}")


def test_langgraph_json_paths_are_read_beside_it_and_its_src_is_importable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = tmp_path / "app"
    pkg = app / "src" / "lt_plain_pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "helpers.py").write_text("STEP = 'add'\n")
    graph = textwrap.dedent(
        """
        from typing_extensions import TypedDict
        from langgraph.graph import START, StateGraph
        from lt_plain_pkg.helpers import STEP


        class S(TypedDict):
            n: int


        builder = StateGraph(S)
        builder.add_node(STEP, lambda s: {"n": s["n"] + 1})
        builder.add_edge(START, STEP)
        graph = builder.compile()
        """
    )
    (pkg / "graph.py").write_text(graph)
    config = {"dependencies": ["."], "graphs": {"agent": "./src/lt_plain_pkg/graph.py:graph"}}
    (app / "langgraph.json").write_text(json.dumps(config))
    monkeypatch.chdir(tmp_path)  # not the app's directory
    monkeypatch.setattr(sys, "path", list(sys.path))
    registry = load_registry([], app / "langgraph.json")
    entry = registry.get("agent")
    assert entry.ref == f"{(pkg / 'graph.py').resolve()}:graph#agent"
    assert isinstance(entry.task, GraphApp) and entry.task.name == "agent"
    # what a worker does: load the recorded reference, from anywhere
    assert load_versions(entry.ref).newest.definition_hash == entry.task.definition_hash
