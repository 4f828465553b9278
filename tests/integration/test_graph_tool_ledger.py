"""Every tool call of a graph step's unchanged graph goes through the effect ledger (issue 51,
item 1), on both backends: a LangChain agent (``create_agent`` over ``ChatOpenAI`` against the
scripted server) whose booking tool writes to an outside store and then "crashes" (an
exception that is no ``Exception``, as a kill leaves the call cut off: its ledger row stays
``started``). The run resumed, each mark settles the cut-off call its own way; none books
twice unless told to run again."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes import FakeOpenAI, Reply, by_turn
from langchain.tools import ToolRuntime
from langchain_core.tools import tool

from longtask import (
    DefinitionError,
    EffectCall,
    LongTask,
    Runner,
    Stage,
    TaskRefError,
    graph_step,
    idempotency_key,
)

SECRET = "sk-test-SECRET-tool-ledger-5c1e"


class Crash(KeyboardInterrupt):
    """A kill in the middle of a tool call: nothing catches it, the call's row stays open."""


class Airline:
    """The outside system: bookings by the tool call that made them."""

    def __init__(self) -> None:
        self.bookings: list[dict[str, Any]] = []
        self.crash_after_commit = False

    def book(self, flight: str, tool_call_id: str | None, key: str | None) -> str:
        self.bookings.append({"flight": flight, "tool_call_id": tool_call_id, "key": key})
        if self.crash_after_commit:
            self.crash_after_commit = False
            raise Crash
        return f"booked {flight} as #{len(self.bookings)}"

    def find(self, call: EffectCall) -> str | None:
        """A reconciler: the booking the call's tool_call_id made, if the airline has one."""
        for i, b in enumerate(self.bookings, 1):
            if b["tool_call_id"] == call.tool_call_id:
                return f"booked {b['flight']} as #{i}"
        return None


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


def _tools(airline: Airline, lookups: list[str], metadata: Any = None) -> list[Any]:
    @tool
    def book_flight(flight: str, runtime: ToolRuntime) -> str:
        """Book a flight."""
        return airline.book(flight, runtime.tool_call_id, idempotency_key())

    book_flight.metadata = metadata

    @tool
    def lookup_flight(flight: str) -> str:
        """Look a flight up."""
        lookups.append(flight)
        return f"{flight} departs 9:00"

    return [book_flight, lookup_flight]


def _task(tools: list[Any], marks: Any = None) -> LongTask:
    """The agent as its author wrote it, run as a graph step; ``marks`` are the step's."""

    def build() -> Any:
        from langchain.agents import create_agent
        from langchain_openai import ChatOpenAI

        return create_agent(ChatOpenAI(model="gpt-4o-mini", max_retries=0), tools)

    return LongTask(
        "trip",
        stages=[
            Stage(
                "s",
                [
                    graph_step(
                        "agent",
                        build,
                        input=lambda ctx: {"messages": [{"role": "user", "content": "Book LX8."}]},
                        output=lambda state: state["messages"][-1].content,
                        tools=marks,
                    )
                ],
            )
        ],
    )


SCRIPT = [
    Reply.tool_calls([("lookup_flight", {"flight": "LX8"}), ("book_flight", {"flight": "LX8"})]),
    Reply.text("done"),
]


def _crash_then_resume(runner: Runner, task: LongTask, airline: Airline, thread: str) -> None:
    airline.crash_after_commit = True
    with pytest.raises(Crash):
        runner.start(task, thread_id=thread)
    booked = [e for e in runner.effects(thread) if e.name == "tool:book_flight"]
    assert [e.status for e in booked] == ["started"]  # cut off after the airline's commit
    runner.resume(thread, task=task)


def _tool_reply(server: FakeOpenAI) -> list[str]:
    """What the model was told the tools answered (its last request's tool messages)."""
    last = server.requests[-1].messages
    return [m["content"] for m in last if m.get("role") == "tool"]


def test_a_completed_call_is_not_run_again_and_a_cut_off_one_is_reconciled(
    runner: Runner, llm: Any
) -> None:
    server = llm(by_turn(SCRIPT))
    airline, lookups = Airline(), []
    tools = _tools(airline, lookups)
    task = _task(tools, {"book_flight": airline.find, "lookup_flight": "read_only"})
    _crash_then_resume(runner, task, airline, "t-rec")
    assert runner.status("t-rec").status == "completed"
    assert len(airline.bookings) == 1  # found by its tool_call_id, not booked again
    assert "booked LX8 as #1" in _tool_reply(server)
    (effect,) = runner.effects("t-rec")  # the read-only lookup is not in the ledger
    assert (effect.name, effect.status) == ("tool:book_flight", "succeeded")
    # the lookup had returned (create_agent sends each call as a task of its own, whose
    # writes are kept once it returns): not run again either
    assert lookups == ["LX8"]
    (rec,) = [e for e in runner.events("t-rec", kinds=["effect.succeeded"])]
    assert rec.data["reconciled"] is True and rec.data["tool_call_id"]
    # the model's turn with the tool calls was not asked again
    assert len(server.requests) == 2


def test_a_reconciler_is_told_the_call_as_the_outside_system_knows_it(
    runner: Runner, llm: Any
) -> None:
    llm(by_turn(SCRIPT))
    airline, lookups = Airline(), []
    seen: list[EffectCall] = []

    def find(call: EffectCall) -> Any:
        seen.append(call)
        return airline.find(call)

    task = _task(_tools(airline, lookups), {"book_flight": find, "*": "read_only"})
    _crash_then_resume(runner, task, airline, "t-told")
    (call,) = seen
    (booking,) = airline.bookings
    assert call.name == "tool:book_flight" and call.kwargs == {"flight": "LX8"}
    # the id and the key the tool was given, both known to the airline
    assert call.tool_call_id == booking["tool_call_id"] and call.tool_call_id
    assert call.idempotency_key == booking["key"] and call.idempotency_key


def test_a_reconciler_that_finds_nothing_runs_the_call_again(runner: Runner, llm: Any) -> None:
    llm(by_turn(SCRIPT))
    airline, lookups = Airline(), []
    task = _task(_tools(airline, lookups), {"book_flight": lambda call: None})
    _crash_then_resume(runner, task, airline, "t-none")
    assert runner.status("t-none").status == "completed"
    assert len(airline.bookings) == 2  # the reconciler said it did not happen


def test_an_idempotent_tool_runs_again_with_the_same_key(runner: Runner, llm: Any) -> None:
    llm(by_turn(SCRIPT))
    airline, lookups = Airline(), []
    task = _task(_tools(airline, lookups), {"*": "idempotent"})
    _crash_then_resume(runner, task, airline, "t-idem")
    assert runner.status("t-idem").status == "completed"
    first, second = airline.bookings
    assert first["key"] == second["key"] and first["key"]  # the airline deduplicates by it
    assert first["tool_call_id"] == second["tool_call_id"]


def test_an_unmarked_tool_pauses_for_a_person_who_sees_the_call(runner: Runner, llm: Any) -> None:
    server = llm(by_turn(SCRIPT))
    airline, lookups = Airline(), []
    task = _task(_tools(airline, lookups))  # the default: at most once
    _crash_then_resume(runner, task, airline, "t-once")
    st = runner.status("t-once")
    assert st.status == "waiting_user"
    [waiting] = st.waiting
    assert waiting["kind"] == "effect" and waiting["name"] == "tool:book_flight"
    assert waiting["args"]["tool"] == "book_flight"
    assert waiting["args"]["args"] == {"flight": "LX8"}
    assert waiting["tool_call_id"] == airline.bookings[0]["tool_call_id"]
    runner.resume("t-once", task=task)  # no answer: still nothing runs
    assert len(airline.bookings) == 1 and runner.status("t-once").status == "waiting_user"
    runner.resolve_effect(
        "t-once", waiting["key"], "succeeded", result="booked LX8 as #1", by="ops", task=task
    )
    assert runner.status("t-once").status == "completed"
    assert len(airline.bookings) == 1
    assert "booked LX8 as #1" in _tool_reply(server)


def test_a_tool_may_carry_its_own_mark(runner: Runner, llm: Any) -> None:
    llm(by_turn(SCRIPT))
    airline, lookups = Airline(), []
    task = _task(_tools(airline, lookups, metadata={"longtask": "idempotent"}))
    _crash_then_resume(runner, task, airline, "t-meta")
    assert runner.status("t-meta").status == "completed"
    assert len({b["key"] for b in airline.bookings}) == 1 and len(airline.bookings) == 2


def test_bad_marks_are_refused_with_every_problem() -> None:
    with pytest.raises(DefinitionError) as info:
        _task([], {"book_flight": "maybe", "": "read_only"})
    text = str(info.value)
    assert "tools['book_flight'] is 'maybe'" in text and "'read_only'" in text
    assert "tool names (or '*' for every tool), got ''" in text


def test_a_served_graphs_marks_come_from_its_langgraph_json(tmp_path: Path) -> None:
    from longtask.model import GraphApp
    from longtask.runtime import load_task
    from longtask.serve._registry import load_registry

    (tmp_path / "agent.py").write_text(
        "from langgraph.graph import StateGraph, START, END\n"
        "from typing_extensions import TypedDict\n"
        "class S(TypedDict):\n    n: int\n"
        "b = StateGraph(S)\nb.add_node('a', lambda s: {'n': 1})\n"
        "b.add_edge(START, 'a')\nb.add_edge('a', END)\ngraph = b.compile()\n"
    )
    (tmp_path / "airline.py").write_text("def find_booking(call):\n    return None\n")
    config = tmp_path / "langgraph.json"
    tools = {"book_flight": "./airline.py:find_booking", "lookup_flight": "read_only"}
    config.write_text(
        json.dumps({"graphs": {"agent": {"path": "./agent.py:graph", "tools": tools}}})
    )
    entry = load_registry([], config).get("agent")
    assert isinstance(entry.task, GraphApp)
    marks = entry.task.graph_step.tools or {}
    assert marks["lookup_flight"] == "read_only"
    assert marks["book_flight"].__name__ == "find_booking"
    # a worker loads the thread's reference: the same marks
    assert entry.ref.endswith(f"#agent@{config.resolve()}")
    again = load_task(entry.ref)
    assert isinstance(again, GraphApp)
    assert set((again.graph_step.tools or {}).keys()) == {"book_flight", "lookup_flight"}
    config.write_text(
        json.dumps(
            {
                "graphs": {
                    "agent": {
                        "path": "./agent.py:graph",
                        "tools": {"book_flight": "sometimes", "x": "./airline.py:nope"},
                    }
                }
            }
        )
    )
    with pytest.raises(TaskRefError) as info:
        load_registry([], config)
    text = str(info.value)
    assert "tools['book_flight'] is 'sometimes'" in text and "'idempotent'" in text
    assert "cannot load tools['x']" in text


def test_a_tool_that_calls_a_model_itself_stays_at_most_once(runner: Runner, llm: Any) -> None:
    """Only a graph run inside a tool call (a sub-agent) makes the call one that may run
    again; a model call the tool makes itself is part of the call."""
    llm(by_turn(SCRIPT))
    airline, lookups = Airline(), []

    @tool
    def book_flight(flight: str, runtime: ToolRuntime) -> str:
        """Book a flight, after asking a model for a seat."""
        from langchain_openai import ChatOpenAI

        ChatOpenAI(model="gpt-4o-mini", max_retries=0).invoke("pick a seat")
        return airline.book(flight, runtime.tool_call_id, idempotency_key())

    _, lookup = _tools(airline, lookups)
    task = _task([book_flight, lookup])
    _crash_then_resume(runner, task, airline, "t-model")
    st = runner.status("t-model")
    assert st.status == "waiting_user" and st.waiting[0]["kind"] == "effect"
    assert len(airline.bookings) == 1
