"""Agent Inbox's exact answers through the LangGraph Server API, on every backend: its
``HumanResponse`` list (accept, edit, response; ignore is not offered) against a tool
approval, an approval step and a wait, each checked like any other answer, carried out by
the executor and recorded under the token's identity. The request's arguments are where
Agent Inbox reads them (``action_requests[].arguments``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes import FakeOpenAI, Reply, by_turn
from starlette.testclient import TestClient

from longtask import Runner
from longtask.serve import create_app
from longtask.serve._registry import load_registry

TASKS = Path(__file__).parent / "inbox_task.py"
ALICE = {"X-Api-Key": "tok-alice"}
BOB = {"X-Api-Key": "tok-bob"}


@pytest.fixture
def deployed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "deployed"
    monkeypatch.setenv("LT_INBOX_DEPLOYED", str(path))
    return path


@pytest.fixture
def llm(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    server = FakeOpenAI(
        by_turn([Reply.tool_calls([("deploy", {"env": "prod"})]), Reply.text("released")])
    ).start()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-inbox")
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    yield server
    server.stop()


@pytest.fixture
def runner(db_url: str) -> Iterator[Runner]:
    r = Runner(db_url)
    yield r
    r.close()


@pytest.fixture
def client(runner: Runner, deployed: Path, llm: FakeOpenAI) -> Iterator[TestClient]:
    registry = load_registry([f"{TASKS}:INBOX"])
    tokens = {"tok-alice": "alice", "tok-bob": "bob"}
    with TestClient(create_app(runner, tokens, registry=registry), headers=ALICE) as c:
        yield c


def _run(client: TestClient, thread: str, body: dict[str, Any], who: dict[str, str]) -> Any:
    """Create a run and wait for it to end; returns the HTTP response of the create."""
    got = client.post(
        f"/threads/{thread}/runs", json={"assistant_id": "inbox", **body}, headers=who
    )
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


def _interrupt(client: TestClient, thread: str) -> dict[str, Any]:
    (intr,) = client.get(f"/threads/{thread}/state").json()["interrupts"]
    return dict(intr["value"])


def _resume(client: TestClient, thread: str, value: Any, who: dict[str, str] = ALICE) -> Any:
    return _run(client, thread, {"command": {"resume": value}}, who)


def _started(client: TestClient) -> str:
    thread = client.post("/threads", json={}, headers=ALICE).json()["thread_id"]
    assert _run(client, thread, {"input": {}}, ALICE).status_code == 200
    return str(thread)


def test_agent_inbox_edits_a_tool_call_accepts_an_approval_and_edits_a_waits_payload(
    client: TestClient, runner: Runner, deployed: Path
) -> None:
    thread = _started(client)
    tool = _interrupt(client, thread)
    (action,) = tool["action_requests"]
    assert action["name"] == "deploy" and action["arguments"] == {"env": "prod"}
    assert tool["review_configs"][0]["allowed_decisions"] == [
        "approve",
        "edit",
        "reject",
        "respond",
    ]
    # ignore is not offered: refused, nothing recorded, nothing run
    ignored = _resume(client, thread, [{"type": "ignore", "args": None}])
    assert ignored.status_code == 409 and "does not offer ignore" in ignored.json()["error"]
    assert not deployed.exists()

    edit = [{"type": "edit", "args": {"action": "deploy", "args": {"env": "staging"}}}]
    assert _resume(client, thread, edit).status_code == 200
    assert deployed.read_text().split() == ["staging"]  # the corrected call, not the model's
    (by_tool,) = runner.events(thread, kinds=["approval.resolved"])
    assert (by_tool.data["decision"], by_tool.data["by"]) == ("edit", "alice")

    approval = _interrupt(client, thread)
    assert approval["step"] == "ok" and approval["action_requests"][0]["arguments"]["plan"] == {
        "ship": True
    }
    # bob neither owns the thread nor is named by its pause: it does not exist for him
    assert _resume(client, thread, [{"type": "accept", "args": None}], BOB).status_code == 404
    assert _resume(client, thread, [{"type": "accept", "args": None}]).status_code == 200
    assert runner.result(thread, "ok")["by"] == "alice"

    wait = _interrupt(client, thread)
    assert wait["kind"] == "wait" and wait["action_requests"][0]["arguments"] == {
        "status": "passed",
        "url": "",
    }
    # a payload that does not fit the schema is refused in the request
    bad = [{"type": "edit", "args": {"action": "ci", "args": {"status": "maybe"}}}]
    assert _resume(client, thread, bad).status_code == 409
    good = [{"type": "edit", "args": {"action": "ci", "args": {"status": "passed"}}}]
    assert _resume(client, thread, good).status_code == 200
    (resolved,) = runner.events(thread, kinds=["wait.resolved"])
    assert resolved.data["by"] == "alice"
    assert runner.status(thread, usage=False).status == "completed"
    assert runner.result(thread, "finish") == "released / passed"


def test_agent_inbox_responses_answer_a_tool_reject_an_approval_and_carry_a_payload(
    client: TestClient, runner: Runner, deployed: Path
) -> None:
    thread = _started(client)
    answer = [{"type": "response", "args": "prod is frozen; released nothing"}]
    assert _resume(client, thread, answer).status_code == 200
    assert not deployed.exists()  # answered in the tool's place: it never ran
    (by_tool,) = runner.events(thread, kinds=["approval.resolved"])
    assert by_tool.data["decision"] == "respond"

    # a response to an approval step rejects it, the text as the comment
    thread2 = _started(client)
    assert _resume(client, thread2, [{"type": "accept", "args": None}]).status_code == 200
    assert _resume(client, thread2, [{"type": "response", "args": "not today"}]).status_code == 200
    rejected = [e for e in runner.events(thread2, kinds=["approval.resolved"]) if e.step == "ok"]
    assert [e.data.get("outcome") for e in rejected] == ["rejected"]
    assert rejected[0].data.get("comment") == "not today"

    # a wait takes its payload as JSON text in a response
    thread3 = _started(client)
    for value in ([{"type": "accept", "args": None}], [{"type": "accept", "args": None}]):
        assert _resume(client, thread3, value).status_code == 200
    not_json = _resume(client, thread3, [{"type": "response", "args": "passed"}])
    assert not_json.status_code == 409 and "as JSON" in not_json.json()["error"]
    text = '{"status": "failed", "url": "https://ci/9"}'
    assert _resume(client, thread3, [{"type": "response", "args": text}]).status_code == 200
    assert runner.result(thread3, "ci") == {"status": "failed", "url": "https://ci/9"}


def _until_status(runner: Runner, thread: str, wanted: str) -> None:
    deadline = time.monotonic() + 60
    while runner.status(thread).status != wanted:
        assert time.monotonic() < deadline, runner.status(thread).status
        time.sleep(0.02)


def test_mark_as_resolved_ends_the_pause_by_a_recorded_cancel(
    client: TestClient, runner: Runner, deployed: Path
) -> None:
    # Agent Inbox's "Mark as Resolved": threads.updateState(id, {values: null, asNode: END})
    thread = _started(client)
    assert _interrupt(client, thread)["action_requests"][0]["name"] == "deploy"
    # bob may not: the thread is alice's
    refused = client.post(
        f"/threads/{thread}/state", json={"values": None, "as_node": "__end__"}, headers=BOB
    )
    assert refused.status_code in (403, 404), refused.text
    assert runner.status(thread).status == "waiting_user"
    r = client.post(f"/threads/{thread}/state", json={"values": None, "as_node": "__end__"})
    assert r.status_code == 200, r.text
    assert r.json()["checkpoint"]["thread_id"] == thread
    _until_status(runner, thread, "cancelled")
    (ended,) = runner.events(thread, kinds=["longtask.cancelled"])
    assert ended.data["by"] == "alice" and "Mark as Resolved" in ended.data["reason"]
    assert not deployed.exists()  # the tool call waiting for approval never ran
    assert not runner.events(thread, kinds=["approval.resolved"])  # nothing was answered
    # once nothing waits, the same request says what to do instead, and changes nothing
    again = client.post(f"/threads/{thread}/state", json={"values": None, "as_node": "__end__"})
    assert again.status_code == 409
    assert "is cancelled" in again.json()["detail"] and "cancel" in again.json()["detail"]
    assert len(runner.events(thread, kinds=["longtask.cancelled"])) == 1
