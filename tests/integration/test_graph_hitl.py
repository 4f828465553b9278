"""A graph step's LangChain agent with ``HumanInTheLoopMiddleware`` (issue 51), on every
backend and in both of the middleware's modes (batched, per_call): an answer of any shape
that says a decision unambiguously (Agent Inbox's ``HumanResponse`` list, LangChain's
decisions, longtask's approve / reject) does what it says; one the interrupt cannot take
is refused before the graph sees it, naming the shape, and the pause stays answerable.
Model calls go through the real ``ChatOpenAI`` client to the scripted server of
``tests/fakes``; the graph is the middleware's, unchanged (``hitl_graph_task.py``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes import FakeOpenAI, Reply, by_turn
from starlette.testclient import TestClient

from longtask import Runner
from longtask.errors import BadAnswer
from longtask.serve import create_app
from longtask.serve._registry import load_registry

TASK_FILE = Path(__file__).parent / "hitl_graph_task.py"
REF = f"{TASK_FILE}:task"
ALICE = {"X-Api-Key": "tok-alice"}
MODES = ["batched", "per_call"]


@pytest.fixture
def deployed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "deployed"
    monkeypatch.setenv("LT_HITL_DEPLOYED", str(path))
    return path


@pytest.fixture
def llm(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    server = FakeOpenAI(
        by_turn([Reply.tool_calls([("deploy", {"env": "prod"})]), Reply.text("released")])
    ).start()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-hitl")
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    yield server
    server.stop()


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("LT_HITL_MODE", request.param)
    return str(request.param)


def _task() -> Any:
    from longtask.runtime._taskref import load_task

    return load_task(REF)


def _tool_messages(runner: Runner, thread: str) -> list[dict[str, Any]]:
    messages = runner.result(thread, "release")["messages"]
    return [m["data"] for m in messages if m["type"] == "tool"]


def _envs(deployed: Path) -> list[str]:
    return deployed.read_text().split() if deployed.exists() else []


ANSWERS: list[tuple[str, Any, list[str], str | None]] = [
    # (what, answer, environments deployed to, the tool message's text, if not the tool's)
    ("inbox accept", [{"type": "accept", "args": None}], ["prod"], None),
    (
        "inbox edit",
        [{"type": "edit", "args": {"action": "deploy", "args": {"env": "staging"}}}],
        ["staging"],
        None,
    ),
    ("inbox response", [{"type": "response", "args": "prod is frozen"}], [], "prod is frozen"),
    ("inbox ignore", [{"type": "ignore", "args": None}], [], "User rejected"),
    ("decisions approve", {"decisions": [{"type": "approve"}]}, ["prod"], None),
    (
        "decisions reject",
        {"decisions": [{"type": "reject", "message": "not today"}]},
        [],
        "not today",
    ),
    ("longtask true", True, ["prod"], None),
    ("longtask rejected", {"approved": False, "comment": "no"}, [], "reason: no"),
]


#: every shape in the batched mode, and one of each kind (approve, edit, text) per call: the
#: conversion is the same code for both, the modes differ in what the graph is then given
SHAPE_CASES = [("batched", *a) for a in ANSWERS] + [
    ("per_call", *a) for a in ANSWERS if a[0] in ("inbox accept", "inbox edit", "decisions reject")
]


@pytest.mark.parametrize(
    ("shape_mode", "what", "answer", "envs", "said"),
    SHAPE_CASES,
    ids=[f"{c[0]}-{c[1]}" for c in SHAPE_CASES],
)
def test_each_answer_shape_does_what_it_says(
    db_url: str,
    llm: FakeOpenAI,
    deployed: Path,
    monkeypatch: pytest.MonkeyPatch,
    shape_mode: str,
    what: str,
    answer: Any,
    envs: list[str],
    said: str | None,
) -> None:
    monkeypatch.setenv("LT_HITL_MODE", shape_mode)
    task = _task()
    with Runner(db_url) as runner:
        thread = runner.start(task, thread_id="t-hitl")
        (item,) = runner.pending(thread)
        assert item.kind == "interrupt"
        (action,) = item.request["actions"]
        assert (action["name"], action["args"]) == ("deploy", {"env": "prod"})
        assert action["allowed_decisions"] == ["approve", "edit", "reject", "respond"]
        runner.answer(thread, answer, task=task, by="ann")
        assert runner.status(thread, usage=False).status == "completed"
        assert _envs(deployed) == envs
        (tool,) = _tool_messages(runner, thread)
        if said is None:
            assert tool["content"].endswith(f"deployed to {envs[0]}")
        else:
            assert said in tool["content"]
        (resolved,) = runner.events(thread, kinds=["interrupt.resolved"])
        assert resolved.data["by"] == "ann"


BAD: list[tuple[str, Any, str]] = [
    ("inbox list as decisions", {"decisions": {"type": "approve"}}, 'holds "decisions"'),
    ("not a decision", {"ok": 1}, "is not a decision"),
    ("two responses for one call", [{"type": "accept"}, {"type": "accept"}], "2 response(s)"),
    ("edit not allowed", [{"type": "edit", "args": {"action": "deploy", "args": {}}}], "allow"),
    ("respond not allowed", {"decisions": [{"type": "respond", "message": "x"}]}, "allow"),
    ("unknown type", {"decisions": [{"type": "accept"}]}, "type is one of"),
]


def test_an_answer_the_review_cannot_take_is_refused_and_it_stays_answerable(
    db_url: str, llm: FakeOpenAI, deployed: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LT_HITL_ALLOWED", "approve,reject")
    task = _task()
    with Runner(db_url) as runner:
        thread = runner.start(task, thread_id="t-bad")
        (item,) = runner.pending(thread)
        config = {"configurable": {"thread_id": thread}}
        head = runner.engine.graph(task).get_state(config).config
        events = len(runner.events(thread))
        for _what, answer, problem in BAD:
            with pytest.raises(BadAnswer) as refused:
                runner.answer(thread, answer, task=task, by="ann")
            text = str(refused.value)
            assert problem in text, text
            assert "it takes" in text and '{"type": "approve"}' in text, text
            # nothing recorded, nothing run, the same pause waits
            assert runner.engine.graph(task).get_state(config).config == head
            assert len(runner.events(thread)) == events
            assert runner.status(thread, usage=False).status == "waiting_user"
            assert [p.interrupt_id for p in runner.pending(thread)] == [item.interrupt_id]
        assert not deployed.exists()
        # Agent Inbox's response where respond is not allowed rejects, with its text
        runner.answer(thread, [{"type": "response", "args": "wait for CI"}], task=task, by="ann")
        assert runner.status(thread, usage=False).status == "completed"
        assert not deployed.exists()
        (tool,) = _tool_messages(runner, thread)
        assert "wait for CI" in tool["content"] and tool["status"] == "error"


def test_approve_with_an_edit_answers_a_tool_review(
    db_url: str, llm: FakeOpenAI, deployed: Path, mode: str, tmp_path: Path
) -> None:
    task = _task()
    with Runner(db_url) as runner:
        thread = runner.start(task, thread_id="t-edit")
        runner.decide(thread, approved=True, by="ann", edited_args={"env": "staging"}, task=task)
        st = runner.status(thread)
        assert st.status == "completed"
        assert _envs(deployed) == ["staging"]
        # the reviewed call ran once: counted, and the report says who answered what
        assert st.usage is not None and st.usage.tool_calls == 1
        report = runner.report(thread, tmp_path / "r.md", charts=False).read_text()
        (row,) = [line for line in report.splitlines() if line.startswith("| release | answered")]
        assert "| ann |" in row and "staging" in row
        (resolved,) = runner.events(thread, kinds=["interrupt.resolved"])
        assert resolved.data["by"] == "ann"
        decision = resolved.data["value"]
        decision = decision if mode == "per_call" else decision["decisions"][0]
        assert decision == {
            "type": "edit",
            "edited_action": {"name": "deploy", "args": {"env": "staging"}},
        }


# -- the Server API ----------------------------------------------------------------------


@pytest.fixture
def client(db_url: str, llm: FakeOpenAI, deployed: Path, mode: str) -> Iterator[TestClient]:
    runner = Runner(db_url)
    app = create_app(runner, {"tok-alice": "alice"}, registry=load_registry([REF]))
    with TestClient(app, headers=ALICE) as c:
        c.runner = runner  # type: ignore[attr-defined]
        yield c
    runner.close()


def _run(client: TestClient, thread: str, body: dict[str, Any]) -> Any:
    got = client.post(f"/threads/{thread}/runs", json={"assistant_id": "hitl", **body})
    if got.status_code == 200:
        deadline = time.monotonic() + 60
        run_id = got.json()["run_id"]
        while client.get(f"/threads/{thread}/runs/{run_id}").json()["status"] in (
            "pending",
            "running",
        ):
            assert time.monotonic() < deadline, "the run did not end"
            time.sleep(0.02)
    return got


def test_the_server_api_refuses_a_malformed_answer_with_422_then_takes_agent_inbox(
    client: TestClient, deployed: Path, mode: str
) -> None:
    thread = client.post("/threads", json={}).json()["thread_id"]
    assert _run(client, thread, {"input": {}}).status_code == 200
    (intr,) = client.get(f"/threads/{thread}/state").json()["interrupts"]
    asks = intr["value"]["value"]  # the middleware's own request, in the step's pause
    assert intr["value"]["actions"][0]["name"] == "deploy"
    if mode == "per_call":
        assert asks["type"] == "tool_approval" and asks["name"] == "deploy"
    else:
        assert asks["action_requests"][0]["name"] == "deploy"

    bad = _run(client, thread, {"command": {"resume": {"approve": True}}})
    assert bad.status_code == 422, bad.text
    assert "it takes" in bad.json()["error"] and '{"type": "approve"}' in bad.json()["error"]
    assert client.get(f"/threads/{thread}").json()["status"] == "interrupted"
    assert client.get(f"/threads/{thread}/state").json()["interrupts"] == [intr]

    edit = [{"type": "edit", "args": {"action": "deploy", "args": {"env": "staging"}}}]
    assert _run(client, thread, {"command": {"resume": edit}}).status_code == 200
    assert client.get(f"/threads/{thread}").json()["status"] == "idle"
    assert _envs(deployed) == ["staging"]
    runner: Runner = client.runner  # type: ignore[attr-defined]
    (resolved,) = runner.events(thread, kinds=["interrupt.resolved"])
    assert resolved.data["by"] == "alice"


@pytest.mark.parametrize(("what", "answer", "envs", "said"), ANSWERS, ids=[a[0] for a in ANSWERS])
def test_each_answer_shape_through_the_server_api_does_what_it_says(
    client: TestClient,
    deployed: Path,
    mode: str,
    what: str,
    answer: Any,
    envs: list[str],
    said: str | None,
) -> None:
    if mode == "per_call" and what not in ("inbox accept", "inbox edit", "decisions reject"):
        pytest.skip("the modes differ only in what the graph is given (one of each kind)")
    thread = client.post("/threads", json={}).json()["thread_id"]
    assert _run(client, thread, {"input": {}}).status_code == 200
    assert client.get(f"/threads/{thread}").json()["status"] == "interrupted"
    got = _run(client, thread, {"command": {"resume": answer}})
    assert got.status_code == 200, got.text
    assert client.get(f"/threads/{thread}").json()["status"] == "idle"
    assert _envs(deployed) == envs
    runner: Runner = client.runner  # type: ignore[attr-defined]
    (tool,) = _tool_messages(runner, thread)
    if said is None:
        assert tool["content"].endswith(f"deployed to {envs[0]}")
    else:
        assert said in tool["content"]


# -- the CLI ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("what", "answer", "envs", "said"),
    [a for a in ANSWERS if a[0] in ("inbox response", "decisions approve", "inbox ignore")],
    ids=["inbox-response", "decisions-approve", "inbox-ignore"],
)
def test_each_answer_shape_through_cli_resume_does_what_it_says(
    db_url: str,
    llm: FakeOpenAI,
    deployed: Path,
    what: str,
    answer: Any,
    envs: list[str],
    said: str | None,
) -> None:
    import json

    from conftest import run_cli

    thread = f"t-{what.replace(' ', '-')}"
    assert run_cli("run", REF, "--thread", thread, db=db_url).returncode == 3
    bad = run_cli("resume", thread, "--resume", '{"approve": true}', db=db_url)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "it takes" in bad.stderr
    done = run_cli("resume", thread, "--resume", json.dumps(answer), db=db_url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _envs(deployed) == envs
    with Runner(db_url) as runner:
        (tool,) = _tool_messages(runner, thread)
        assert (
            tool["content"].endswith(f"deployed to {envs[0]}")
            if said is None
            else (said in tool["content"])
        )


def test_the_cli_shows_the_tool_call_and_approve_edit_answers_it(
    db_url: str, llm: FakeOpenAI, deployed: Path, mode: str
) -> None:
    from conftest import run_cli

    ran = run_cli("run", REF, "--thread", "t-cli", db=db_url)
    assert ran.returncode == 3, ran.stderr
    shown = run_cli("pending", "t-cli", db=db_url)
    assert shown.returncode == 0, shown.stderr
    assert "tool call: deploy" in shown.stdout
    assert '"env": "prod"' in shown.stdout
    assert "allowed: approve, edit, reject, respond" in shown.stdout
    assert "longtask approve t-cli " in shown.stdout and "--edit" in shown.stdout

    bad = run_cli("approve", "t-cli", "--by", "ann", "--edit", "[1]", db=db_url)
    assert bad.returncode == 1, bad.stderr
    assert "edited_action.args" in bad.stderr and "it takes" in bad.stderr
    assert run_cli("pending", "t-cli", db=db_url).stdout == shown.stdout

    done = run_cli("approve", "t-cli", "--by", "ann", "--edit", '{"env": "staging"}', db=db_url)
    assert done.returncode == 0, done.stderr
    assert _envs(deployed) == ["staging"]


def test_the_cli_rejects_a_tool_review_with_a_reason(
    db_url: str, llm: FakeOpenAI, deployed: Path, mode: str
) -> None:
    from conftest import run_cli

    assert run_cli("run", REF, "--thread", "t-no", db=db_url).returncode == 3
    done = run_cli("reject", "t-no", "--by", "ann", "--comment", "frozen", db=db_url)
    assert done.returncode == 0, done.stderr
    assert not deployed.exists()
    with Runner(db_url) as runner:
        (tool,) = _tool_messages(runner, "t-no")
        assert "frozen" in tool["content"]
