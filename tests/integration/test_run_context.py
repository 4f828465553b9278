"""The run context of graph steps (LangGraph's runtime context), on both backends: a graph
with a context schema gets the schema's defaults when no context is given (it failed with
``runtime.context`` None before), the context a thread is started with reaches its graph in
every later run of the thread (a resume by another Runner, after the graph's interrupt) and
in ``config["configurable"]``, a new input brings its own, a graph step may make its graph's
context from the task's inputs, and a context that is not plain JSON, or given to a task
nothing reads it in, is refused, storing nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import context_graph
import pytest
from context_graph import graph
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Command
from typing_extensions import TypedDict

from longtask import (
    InvalidInput,
    LongTask,
    Runner,
    Stage,
    StepFailed,
    function_step,
    graph_step,
    subtask_step,
)
from longtask.model import graph_app

APP = graph_app("ctx", graph)


def _final(runner: Runner, tid: str) -> str:
    return str(runner.results(tid)["ctx"]["final"])


def _draft(runner: Runner, tid: str) -> str:
    """The draft the graph's interrupt() shows (the step has no result while it waits)."""
    (waiting,) = runner.pending(tid)
    return str(waiting.request["value"]["draft"])


def test_a_graph_gets_its_context_schemas_defaults_without_a_context(runner: Runner) -> None:
    tid = runner.start(APP, {"topic": "tides"})
    assert _draft(runner, tid) == "hello tides (small)"
    assert runner.run_context(tid) == {}
    runner.resume(tid, Command(resume="ok"), task=APP)
    assert _final(runner, tid) == "hello tides (small) / ok / hello / None"


def test_the_context_a_thread_started_with_reaches_its_later_runs(db_url: str) -> None:
    with Runner(db_url) as first:
        # a key the schema does not have is kept with the thread, not given to the graph
        tid = first.start(APP, {"topic": "tides"}, context={"greeting": "hi", "team": "a"})
        assert _draft(first, tid) == "hi tides (small)"
    with Runner(db_url) as later:  # another process, as after a restart
        assert later.run_context(tid) == {"greeting": "hi", "team": "a"}
        later.resume(tid, Command(resume="ok"), task=APP)
        assert _final(later, tid) == "hi tides (small) / ok / hi / hi"


def test_a_new_input_brings_its_own_context(runner: Runner) -> None:
    tid = runner.start(APP, {"topic": "tides"}, context={"greeting": "hi"})
    runner.resume(tid, Command(resume="ok"), task=APP)
    runner.run_again(tid, {"topic": "waves"}, context={"model": "large"}, task=APP)
    assert runner.run_context(tid) == {"model": "large"}
    assert _draft(runner, tid) == "hello waves (large)"
    runner.resume(tid, Command(resume="fine"), task=APP)
    assert _final(runner, tid) == "hello waves (large) / fine / hello / None"
    # without one: the schema's defaults, as a run without a context on LangGraph's server
    runner.run_again(tid, {"topic": "foam"}, task=APP)
    assert runner.run_context(tid) == {}
    assert _draft(runner, tid) == "hello foam (small)"


class Greeting(TypedDict, total=False):
    text: str


def _greet(state: Greeting, runtime: Runtime[dict[str, Any]]) -> Greeting:
    return {"text": f"{runtime.context['greeting']}, {runtime.context['who']}"}


def _greeter() -> Any:
    builder: StateGraph[Any, Any, Any, Any] = StateGraph(Greeting)
    builder.add_node("greet", _greet)
    builder.add_edge(START, "greet")
    builder.add_edge("greet", END)
    return builder.compile()


def test_a_graph_step_makes_its_graphs_context_and_steps_read_the_threads(
    runner: Runner,
) -> None:
    task = LongTask(
        name="greetings",
        stages=[
            Stage(
                "all",
                [
                    function_step(lambda ctx: ctx.run_context, name="settings"),
                    graph_step(
                        "greet",
                        _greeter(),
                        input=lambda ctx: {},
                        context=lambda ctx: {**ctx.run_context, "who": ctx.inputs["who"]},
                        output=lambda state: state["text"],
                    ),
                ],
            )
        ],
    )
    tid = runner.start(task, {"who": "Ada"}, context={"greeting": "Good morning"})
    assert runner.results(tid) == {
        "settings": {"greeting": "Good morning"},
        "greet": "Good morning, Ada",
    }


def test_a_context_callable_that_returns_no_dict_fails_the_step(runner: Runner) -> None:
    task = LongTask(
        name="badcontext",
        stages=[Stage("all", [graph_step("greet", _greeter(), context=lambda ctx: ["x"])])],
    )
    with pytest.raises(StepFailed, match="returned a list; return a dict"):
        runner.start(task, {})


@pytest.mark.parametrize(
    ("task", "context", "says"),
    [
        (APP, ["greeting"], "must be a JSON object with string keys"),
        (APP, {"greeting": float("nan")}, "must be plain JSON"),
        (APP, {"greeting": object()}, "must be plain JSON"),
        (
            LongTask(name="plain", stages=[Stage("s", [function_step(lambda ctx: 1, name="a")])]),
            {"greeting": "hi"},
            "task 'plain' has no graph step, so nothing reads a run context",
        ),
    ],
    ids=["not-an-object", "nan", "not-json", "no-graph-step"],
)
def test_a_bad_context_is_refused_storing_nothing(
    runner: Runner, task: LongTask, context: Any, says: str
) -> None:
    with pytest.raises(InvalidInput, match=says):
        runner.start(task, {"topic": "tides"} if task is APP else {}, context=context)
    assert runner.threads() == []


def test_a_bad_context_with_a_new_input_leaves_the_thread_as_it_was(runner: Runner) -> None:
    tid = runner.start(APP, {"topic": "tides"}, context={"greeting": "hi"})
    runner.resume(tid, Command(resume="ok"), task=APP)
    before = runner.history(tid)
    with pytest.raises(InvalidInput, match="must be plain JSON"):
        runner.run_again(tid, {"topic": "waves"}, context={"x": float("inf")}, task=APP)
    assert runner.history(tid) == before
    assert runner.run_context(tid) == {"greeting": "hi"}
    assert runner.status(tid).status == "completed"


def test_a_graph_loaded_by_reference_is_loaded_again_by_its_threads(
    runner: Runner, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``load_task`` of a graph's file reference makes a task no module holds: its threads
    record the reference (absolute), so a new input without ``task=`` loads it again."""
    from longtask.runtime import load_task

    monkeypatch.chdir(Path(context_graph.__file__).parent)
    app = load_task("context_graph.py:graph#ctx")
    tid = runner.start(app, {"topic": "tides"}, context={"greeting": "hi"})
    record = runner.db.store.get_thread(tid)
    assert record is not None
    assert record.task_ref == f"{Path(context_graph.__file__).resolve()}:graph#ctx"
    runner.resume(tid, Command(resume="ok"))
    runner.run_again(tid, {"topic": "waves"})
    assert _draft(runner, tid) == "hello waves (small)"


def test_a_sub_task_with_a_graph_step_starts_with_its_parents_context(runner: Runner) -> None:
    child = LongTask(
        name="greeter",
        stages=[
            Stage(
                "s",
                [
                    graph_step(
                        "greet",
                        _greeter(),
                        input=lambda ctx: {},
                        context=lambda ctx: {**ctx.run_context, "who": "the child"},
                        output=lambda state: state["text"],
                    )
                ],
            )
        ],
    )
    parent = LongTask(
        name="parent",
        stages=[
            Stage(
                "s",
                [
                    graph_step(
                        "own",
                        _greeter(),
                        context=lambda ctx: {"who": "x", **ctx.run_context},
                        input=lambda ctx: {},
                        output=lambda state: state["text"],
                    )
                ],
            ),
            Stage("children", [subtask_step("child", child)]),
        ],
    )
    tid = runner.start(parent, {}, context={"greeting": "Hi", "who": "the parent"})
    assert runner.results(tid) == {"own": "Hi, the parent", "child": "Hi, the child"}
    (kid,) = runner.status(tid).subtasks["child"]
    assert runner.run_context(kid["thread_id"]) == {"greeting": "Hi", "who": "the parent"}


@pytest.mark.parametrize(
    ("context", "says"),
    [
        (b'{"greeting": NaN}', "must be plain JSON"),
        (b'["greeting"]', "context must be an object"),
    ],
    ids=["nan", "not-an-object"],
)
def test_the_server_api_refuses_a_bad_context_when_the_run_is_asked(
    runner: Runner, context: bytes, says: str
) -> None:
    """Checked when the run is asked (422), not when the executor would start the thread
    with it; nothing is stored."""
    from starlette.testclient import TestClient
    from test_access import tables

    from longtask.serve import create_app
    from longtask.serve._registry import load_registry

    app = create_app(
        runner,
        {"tok-alice": "alice"},
        registry=load_registry(["context_graph:graph#ctx"]),
        schedule_poll=None,
        poll=0.02,
    )
    alice = {"Authorization": "Bearer tok-alice", "Content-Type": "application/json"}
    with TestClient(app) as client:
        before = tables(runner)
        body = b'{"assistant_id": "ctx", "input": {"topic": "tides"}, "context": ' + context + b"}"
        refused = client.post("/runs/wait", content=body, headers=alice)
        assert refused.status_code == 422, refused.text
        assert says in refused.json()["detail"]
        assert tables(runner) == before
