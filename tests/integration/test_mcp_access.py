"""``/mcp``'s tools under serve's one authorization layer, on every backend: each tool is
allowed as the route it stands for would be — a viewer reads but starts and answers
nothing, a user who may not see a thread gets "no thread", an approver the pause names
answers it, and the thread list holds only what the caller sees. JSON-RPC as an MCP client
sends it (stateless Streamable HTTP); tests/acceptance/test_mcp.py drives the real client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from longtask import Runner
from longtask.serve import create_app
from longtask.serve._registry import load_registry

LG_TASKS = Path(__file__).parents[1] / "acceptance" / "lg_task.py"
TOKENS = {"tok-alice": "alice", "tok-bob": "bob", "tok-audit": "audit", "tok-carol": "carol"}
HEADERS = {"Accept": "application/json, text/event-stream"}


@pytest.fixture
def runner(db_url: str) -> Iterator[Runner]:
    r = Runner(db_url)
    yield r
    r.close()


@pytest.fixture
def client(runner: Runner) -> Iterator[TestClient]:
    registry = load_registry([f"{LG_TASKS}:RELEASE", f"{LG_TASKS}:LONG"])
    app = create_app(runner, TOKENS, registry=registry, roles={"audit": "viewer"})
    with TestClient(app) as c:
        yield c


def tool(client: TestClient, token: str, name: str, arguments: dict[str, Any]) -> Any:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }
    got = client.post("/mcp", json=body, headers={**HEADERS, "X-Api-Key": token})
    assert got.status_code == 200, got.text
    result = got.json()["result"]
    return result.get("isError", False), json.loads(result["content"][0]["text"])


def test_each_tool_is_allowed_as_its_route_would_be(client: TestClient, runner: Runner) -> None:
    error, started = tool(client, "tok-alice", "lg_release", {})
    assert not error and started["status"] == "waiting_user"
    thread = started["thread_id"]

    # a viewer reads every thread, and starts and answers nothing
    error, seen = tool(client, "tok-audit", "longtask_status", {"thread_id": thread})
    assert not error and seen["status"] == "waiting_user"
    error, refused = tool(client, "tok-audit", "lg_release", {})
    assert error and "viewer" in refused["error"]
    error, refused = tool(
        client, "tok-audit", "longtask_answer", {"thread_id": thread, "answer": True}
    )
    assert error and "may not answer" in refused["error"]

    # bob neither owns it nor is named by its pause: it does not exist for him
    for name, args in (
        ("longtask_status", {"thread_id": thread}),
        ("longtask_answer", {"thread_id": thread, "answer": True}),
    ):
        error, refused = tool(client, "tok-bob", name, args)
        assert error and f"no thread {thread!r}" in refused["error"], (name, refused)
    error, listed = tool(client, "tok-bob", "longtask_threads", {"limit": 10})
    assert not error and thread not in [t["thread_id"] for t in listed["threads"]]
    error, listed = tool(client, "tok-alice", "longtask_threads", {"limit": 10})
    assert thread in [t["thread_id"] for t in listed["threads"]]
    assert runner.status(thread).status == "waiting_user"  # nothing refused changed it
    assert runner.events(thread, kinds=["approval.resolved"]) == []

    # the owner answers; the approval is made in her name
    error, answered = tool(
        client, "tok-alice", "longtask_answer", {"thread_id": thread, "answer": True}
    )
    assert not error and answered["results"]["ship_ok"]["by"] == "alice"
