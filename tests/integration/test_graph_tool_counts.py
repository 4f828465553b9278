"""A graph step's tool calls and answers in ``status``, ``report`` and the page's numbers
(issue 51, item 5), on both backends: every tool the graph runs (its ``ToolNode``'s, a
sub-agent's) is counted and charged to the step's usage and the budget with the next event
written anyway (no write per tool call); each model call's ``model.call`` event names the
namespace of the node that made it, so a sub-agent's calls are told from its parent's; the
report lists who answered a graph's interrupt with what. Model calls go through the real
``ChatOpenAI`` client to the scripted server of ``tests/fakes``; the agents are LangChain's
``create_agent``, unchanged."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from counted_agent import SCRIPT, agent
from fakes import FakeOpenAI, by_conversation
from starlette.testclient import TestClient

from longtask import LongTask, Runner, Stage, graph_step
from longtask.serve import create_app
from longtask.serve._registry import load_registry

AGENT_FILE = Path(__file__).parent / "counted_agent.py"


@pytest.fixture
def llm(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    servers: list[FakeOpenAI] = []

    def start(script: Any) -> FakeOpenAI:
        server = FakeOpenAI(script).start()
        servers.append(server)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-tool-counts")
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        return server

    yield start
    for server in servers:
        server.stop()


def _task() -> LongTask:
    return LongTask(
        "counted",
        stages=[
            Stage(
                "s",
                [
                    graph_step(
                        "research",
                        agent,
                        input=lambda ctx: {"messages": [{"role": "user", "content": "Plan it."}]},
                        output=lambda s: s["messages"][-1].content,
                    )
                ],
            )
        ],
    )


def test_a_graph_steps_tool_calls_are_counted_without_a_write_of_their_own(
    runner: Runner, llm: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    llm(by_conversation(SCRIPT))
    store = runner.db.store
    charged: list[Any] = []
    real = store.charge

    def counted(*a: Any, **k: Any) -> Any:
        charged.append(k)
        return real(*a, **k)

    monkeypatch.setattr(store, "charge", counted)
    thread = runner.start(_task(), thread_id="t-counted")
    st = runner.status(thread)
    assert st.status == "completed"
    # look a, look b, delegate, and the sub-agent's look: four tools ran
    assert st.usage is not None and st.usage.tool_calls == 4
    assert st.usage.model_calls == 5
    (step,) = st.steps
    assert step.usage is not None
    assert (step.usage["tool_calls"], step.usage["model_calls"]) == (4, 5)
    (completed,) = runner.events(thread, kinds=["step.completed"])
    assert (completed.data["tool_calls"], completed.data["model_calls"]) == (4, 5)
    assert charged == []  # charged with the model calls' events, no write of their own
    budget = runner.budget(thread)
    assert budget is not None and budget.used["tool_calls"] == 4
    # each model call says where it was made: the sub-agent's under the parent's tools
    calls = runner.events(thread, kinds=["model.call"])
    spaces = sorted(e.data["namespace"] for e in calls)
    assert spaces == ["research|model"] * 3 + ["research|tools|model"] * 2
    assert all(e.data["node"] == "model" for e in calls)
    report = runner.report(thread, tmp_path / "r.md").read_text()
    assert "- **tool calls**: 4\n" in report
    # the steps' table: ..., model calls, tool calls
    assert "| 5 | 4 |" in report


def test_status_and_report_show_the_counts_in_the_cli(
    db_url: str, llm: Any, tmp_path: Path
) -> None:
    from conftest import run_cli

    llm(by_conversation(SCRIPT))
    with Runner(db_url) as runner:
        runner.start(_task(), thread_id="t-cli-counts")
    shown = run_cli("status", "t-cli-counts", db=db_url)
    assert shown.returncode == 0, shown.stderr
    assert "5 model calls, 4 tool calls" in shown.stdout
    out = tmp_path / "report.md"
    made = run_cli("report", "t-cli-counts", "-o", str(out), "--no-charts", db=db_url)
    assert made.returncode == 0, made.stderr
    assert "- **tool calls**: 4\n" in out.read_text()


def test_a_served_graphs_tool_calls_are_counted(db_url: str, llm: Any, tmp_path: Path) -> None:
    """The same agent served from a langgraph.json, run through the Server API."""
    llm(by_conversation(SCRIPT))
    config = tmp_path / "langgraph.json"
    config.write_text(json.dumps({"graphs": {"planner": f"{AGENT_FILE}:agent"}}))
    runner = Runner(db_url)
    app = create_app(runner, {"tok-alice": "alice"}, registry=load_registry([], config))
    try:
        with TestClient(app, headers={"X-Api-Key": "tok-alice"}) as client:
            thread = client.post("/threads", json={}).json()["thread_id"]
            body = {
                "assistant_id": "planner",
                "input": {"messages": [{"role": "user", "content": "Plan it."}]},
            }
            got = client.post(f"/threads/{thread}/runs/wait", json=body)
            assert got.status_code == 200, got.text
        st = runner.status(thread)
        assert st.status == "completed"
        assert st.usage is not None
        assert (st.usage.tool_calls, st.usage.model_calls) == (4, 5)
        calls = runner.events(thread, kinds=["model.call"])
        spaces = sorted(e.data["namespace"] for e in calls)
        step = st.steps[0].name
        assert spaces == [f"{step}|model"] * 3 + [f"{step}|tools|model"] * 2
    finally:
        runner.close()
