"""A task's graph read and written with LangGraph's own API, against every backend: plain
values in the channels, ``update_state`` applied as a step's result or refused, a thread
started through LangGraph adopted by the Runner, and a status told by the checkpoint."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from langgraph.types import Command
from pydantic import BaseModel

from longtask import InvalidInput, LongTask, Runner, Stage, StepContext, approval, function_step
from longtask.steps import INPUTS_CHANNEL

ran: Counter[str] = Counter()


class Summary(BaseModel):
    title: str
    words: int


@function_step
def small(ctx: StepContext) -> dict[str, Any]:
    ran["small"] += 1
    return {"n": 1, "tags": ["a"]}


@function_step
def big(ctx: StepContext) -> str:
    ran["big"] += 1
    return "x" * 5000


@function_step
def summary(ctx: StepContext) -> Summary:
    ran["summary"] += 1
    return Summary(title="t", words=ctx.result("small")["n"] + len(ctx.result("big")))


@function_step
def total(ctx: StepContext) -> int:
    ran["total"] += 1
    return int(ctx.result("summary").words) * 2


task = LongTask(
    "native",
    stages=[Stage("one", [small, big]), Stage("two", [summary]), Stage("three", [total])],
)


@function_step
def prepare(ctx: StepContext) -> str:
    ran["prepare"] += 1
    return "plan"


@function_step
def publish(ctx: StepContext) -> str:
    ran["publish"] += 1
    return "published"


gated = LongTask(
    "native_gated",
    stages=[
        Stage("plan", [prepare]),
        Stage("gate", [approval("go", plan=lambda ctx: ctx.result("prepare"))]),
        Stage("ship", [publish]),
    ],
)


def _config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def _at_head(graph: Any, thread_id: str) -> dict[str, Any]:
    """The head checkpoint named: an update there is a fork, which a finished thread takes
    (an update of a finished thread in place is refused)."""
    return dict(graph.get_state(_config(thread_id)).config)


def test_channels_hold_plain_values(runner: Runner) -> None:
    ran.clear()
    thread = runner.start(task, thread_id="plain")
    values = runner.graph(task).get_state(_config(thread)).values
    assert values["out.small"] == {"n": 1, "tags": ["a"]}
    assert values["out.total"] == 10002
    # A large result is a small reference to the blob table; a model keeps its class.
    assert values["out.big"]["$longtask"] == "blob" and values["out.big"]["size"] == 5002
    assert values["out.summary"] == {
        "$longtask": "model",
        "model": f"{__name__}:Summary",
        "value": {"title": "t", "words": 5001},
    }
    assert runner.result(thread, "big") == "x" * 5000
    assert runner.result(thread, "summary") == Summary(title="t", words=5001)


def test_every_node_is_handed_the_inputs_only(runner: Runner) -> None:
    # A node reads the results it needs when it asks (graphs._node.LazyState): LangGraph
    # reads a node's input channels for every task, so whole-state inputs made each step
    # cost more the longer the task (and the compile quadratic).
    graph = runner.graph(task)
    nodes = {name: node.channels for name, node in graph.nodes.items() if name != "__start__"}
    assert set(nodes) == {"small", "big", "summary", "total"}
    assert all(channels == [INPUTS_CHANNEL] for channels in nodes.values()), nodes


def test_update_state_applies_a_result(runner: Runner) -> None:
    ran.clear()
    thread = runner.start(task, thread_id="upd")
    graph = runner.graph(task)
    config = _config(thread)
    # By step name (as Runner.resume's Command does), and as a channel.
    graph.update_state(
        _at_head(graph, thread), {"summary": Summary(title="u", words=7)}, as_node="summary"
    )
    assert graph.get_state(config).values["out.summary"]["value"] == {"title": "u", "words": 7}
    runner.resume(thread, task=task)
    assert runner.result(thread, "total") == 14 and ran["total"] == 2
    # A large value goes to the blob table like a step's own result.
    graph.update_state(_at_head(graph, thread), {"out.big": "y" * 3000}, as_node="big")
    assert graph.get_state(config).values["out.big"]["$longtask"] == "blob"
    assert runner.result(thread, "big") == "y" * 3000


@pytest.mark.parametrize(
    ("update", "message"),
    [
        ({"out.small": {1, 2}}, "not JSON-serialisable"),
        ({"out.nope": 1}, "'out.nope' is not a step of task 'native'"),
        ({"nope": 1}, "steps: small, big, summary, total"),
        (
            {"out.big": {"$longtask": "blob", "digest": "f" * 40, "size": 3}},
            "refers to a stored value that is not in this database",
        ),
        ({"small": 1, "out.small": 2}, "sets 'out.small' twice"),
        ("not a dict", "a non-empty object of step name to result"),
    ],
)
def test_update_state_refuses_what_it_cannot_apply(
    runner: Runner, update: Any, message: str
) -> None:
    thread = runner.start(task, thread_id="refuse")
    graph = runner.graph(task)
    config = _config(thread)
    before = len(list(graph.get_state_history(config)))
    head = graph.get_state(config).config
    with pytest.raises(InvalidInput, match=message):
        graph.update_state(_at_head(graph, thread), update, as_node="small")
    assert len(list(graph.get_state_history(config))) == before
    assert graph.get_state(config).config == head


def test_update_state_refuses_inputs_the_model_rejects(runner: Runner) -> None:
    class Inputs(BaseModel):
        topic: str

    typed = LongTask("native_inputs", inputs=Inputs, stages=[Stage("one", [small])])
    thread = runner.start(typed, {"topic": "x"}, thread_id="inputs")
    graph = runner.graph(typed)
    with pytest.raises(InvalidInput, match="topic"):
        graph.update_state(_at_head(graph, thread), {"lt.inputs": {"topic": 3}}, as_node="small")
    graph.update_state(_at_head(graph, thread), {"lt.inputs": {"topic": "y"}}, as_node="small")
    assert graph.get_state(_config(thread)).values["lt.inputs"] == {"topic": "y"}


def test_a_thread_started_through_langgraph_is_adopted(runner: Runner) -> None:
    ran.clear()
    graph = runner.graph(task)
    out = graph.invoke({"lt.inputs": {}}, _config("raw-1"))
    assert out["out.total"] == 10002
    status = runner.status("raw-1")
    assert status.status == "completed" and status.progress == 1.0
    assert [t.thread_id for t in runner.threads()] == ["raw-1"]
    kinds = [e.kind for e in runner.events("raw-1")]
    assert kinds.count("step.completed") == 4
    # Every row of it belongs to a thread the store knows: nothing orphaned.
    assert runner.db.store.get_thread("raw-1") is not None
    # And the Runner carries on with it like any other thread.
    assert runner.results("raw-1")["total"] == 10002


def test_a_pause_reached_through_langgraph_shows_in_status(runner: Runner) -> None:
    ran.clear()
    graph = runner.graph(gated)
    graph.invoke({"lt.inputs": {}}, _config("raw-gate"))
    status = runner.status("raw-gate")
    assert status.status == "waiting_user"
    assert [w["step"] for w in status.waiting] == ["go"]
    assert {s.name: s.state for s in status.steps}["go"] == "waiting"
    # Answered through LangGraph's own Command as well: the status follows the checkpoint.
    intr = graph.get_state(_config("raw-gate")).interrupts[0]
    answer = {"approved": True, "by": "ana", "plan_hash": intr.value["plan_hash"]}
    graph.invoke(Command(resume={intr.id: answer}), _config("raw-gate"))
    assert runner.status("raw-gate").status == "completed"
    assert runner.result("raw-gate", "publish") == "published" and ran["prepare"] == 1


def test_a_thread_of_another_task_is_refused_before_any_step(runner: Runner) -> None:
    ran.clear()
    runner.start(gated, thread_id="theirs")
    ran.clear()
    with pytest.raises(InvalidInput, match="belongs to task 'native_gated', not 'native'"):
        runner.graph(task).invoke({"lt.inputs": {}}, _config("theirs"))
    assert sum(ran.values()) == 0
    assert runner.status("theirs").task_name == "native_gated"


def test_status_follows_the_checkpoint_after_a_lost_status_write(runner: Runner) -> None:
    """A process that died between its pause checkpoint and its status write."""
    thread = runner.start(gated, thread_id="lost-write")
    assert runner.status(thread).status == "waiting_user"
    runner.db.store.set_status(thread, "running")
    status = runner.status(thread)
    assert status.status == "waiting_user" and status.waiting[0]["kind"] == "approval"
    runner.approve(thread, "go", by="ana", task=gated)
    assert runner.status(thread).status == "completed"


def test_results_only_in_pending_writes_do_not_complete_a_thread(runner: Runner) -> None:
    """A super-step cut off after its writes and before its checkpoint (a kill) still needs
    a resume: the status says so, not 'completed'."""
    fails = {"n": 1}

    @function_step
    def last(ctx: StepContext) -> int:
        if fails["n"]:
            fails["n"] -= 1
            raise RuntimeError("boom")
        return 7

    chain = LongTask("native_cut", stages=[Stage("one", [small]), Stage("two", [last])])
    with pytest.raises(Exception, match="boom"):
        runner.start(chain, thread_id="cut")
    head = runner.db.saver.get_tuple(_config("cut"))
    assert head is not None
    runner.db.saver.put_writes(head.config, [("out.last", 7)], "cut-task")
    runner.db.store.set_status("cut", "running")  # the process died before its status write
    assert runner.status("cut").status == "running"
    runner.resume("cut", task=chain)
    assert runner.status("cut").status == "completed" and runner.result("cut", "last") == 7
