"""LangGraph's auth handlers in ``longtask serve`` (issue 41), on both backends: the
owner-only handler file the differential test gives LangGraph's own server
(tests/acceptance/lgdiff_auth.py) identifies every caller, its ``@auth.on`` filter decides
which threads exist for whom (404 otherwise), and its metadata edit (the owner) is stored."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from longtask import Runner
from longtask.serve import create_app
from longtask.serve._registry import auth_path, load_registry
from longtask.serve.access import load_auth, matches

ACCEPTANCE = Path(__file__).parent.parent / "acceptance"
USER1 = {"Authorization": "Bearer tok-user1"}
USER2 = {"Authorization": "Bearer tok-user2"}


@pytest.fixture
def log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "auth.log"
    monkeypatch.setenv("LGDIFF_AUTH_LOG", str(path))
    return path


@pytest.fixture
def client(db_url: str, tmp_path: Path, log: Path) -> Iterator[TestClient]:
    config = tmp_path / "langgraph.json"
    handler = ACCEPTANCE / "lgdiff_auth.py"
    config.write_text(json.dumps({"graphs": {}, "auth": {"path": f"{handler}:auth"}}))
    found = auth_path(config)
    assert found is not None
    auth = load_auth(*found)
    runner = Runner(db_url)
    registry = load_registry(["test_access:TASK"])
    with TestClient(create_app(runner, {}, auth_handler=auth, registry=registry)) as c:
        c.runner = runner  # type: ignore[attr-defined]
        yield c
    runner.close()


def calls(log: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_the_handlers_decide_who_sees_which_thread(client: TestClient, log: Path) -> None:
    assert client.get("/threads/search").status_code in (401, 405)
    assert client.post("/threads", json={}).status_code == 401
    assert (
        client.post("/threads", json={}, headers={"Authorization": "Bearer x"}).json()["detail"]
        == "Invalid token"
    )
    mine = client.post("/threads", json={"metadata": {"topic": "a"}}, headers=USER1).json()
    assert mine["metadata"]["owner"] == "user1" and mine["metadata"]["topic"] == "a"
    theirs = client.post("/threads", json={}, headers=USER2).json()
    one, two = mine["thread_id"], theirs["thread_id"]
    assert client.get(f"/threads/{one}", headers=USER1).status_code == 200
    assert client.get(f"/threads/{one}", headers=USER2).status_code == 404
    assert client.get(f"/threads/{one}/state", headers=USER2).status_code == 404
    assert client.post(f"/threads/{one}/history", json={}, headers=USER2).status_code == 404
    found = client.post("/threads/search", json={}, headers=USER2).json()
    assert [t["thread_id"] for t in found] == [two]
    assert client.post("/threads/count", json={}, headers=USER1).json() == 1
    patched = client.patch(f"/threads/{one}", json={"metadata": {"x": 1}}, headers=USER2)
    assert patched.status_code == 404
    run = client.post(
        f"/threads/{one}/runs", json={"assistant_id": "access_task", "input": {}}, headers=USER2
    )
    assert run.status_code == 404
    run = client.post(
        f"/threads/{one}/runs", json={"assistant_id": "access_task", "input": {}}, headers=USER1
    )
    assert run.status_code == 200, run.text
    runner = client.runner  # type: ignore[attr-defined]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        rec = runner.db.store.get_thread(one)
        if rec is not None and rec.status == "waiting_user":
            break
        time.sleep(0.05)
    assert runner.db.store.get_thread(one).owner == "user1"
    # the handlers ran, with LangGraph's resources and actions
    seen = {(c.get("resource"), c.get("action")) for c in calls(log) if c["call"] == "on"}
    assert {("threads", a) for a in ("create", "read", "search", "update", "create_run")} <= seen
    assert any(c["call"] == "authenticate" and c["ok"] is False for c in calls(log))


def test_filters_match_as_langgraphs_server_matches_them() -> None:
    meta = {"owner": "a", "tags": ["x", "y"]}
    assert matches(meta, {"owner": "a"}) and not matches(meta, {"owner": "b"})
    assert matches(meta, {"owner": {"$eq": "a"}}) and not matches(meta, {"owner": {"$eq": "b"}})
    assert matches(meta, {"tags": {"$contains": "x"}})
    assert matches(meta, {"tags": {"$contains": ["x", "y"]}})
    assert not matches(meta, {"tags": {"$contains": "z"}})
    assert matches(meta, {"$or": [{"owner": "b"}, {"owner": "a"}]})
    assert not matches({}, {"owner": "a"})
    assert matches(meta, None)


def test_copies_and_prunes_ask_the_handlers_as_langgraphs_server_does(
    client: TestClient, log: Path
) -> None:
    mine = client.post("/threads", json={"metadata": {"topic": "a"}}, headers=USER1).json()
    one = mine["thread_id"]
    assert client.post(f"/threads/{one}/copy", headers=USER2).status_code == 404
    copied = client.post(f"/threads/{one}/copy", headers=USER1)
    assert copied.status_code == 200, copied.text
    copy = copied.json()["thread_id"]
    assert copied.json()["metadata"] == {"topic": "a", "owner": "user1"}
    assert client.get(f"/threads/{copy}", headers=USER2).status_code == 404
    # a prune naming a thread the caller may not see prunes nothing, and answers as for an
    # id no thread has: it tells nothing of the thread (issue 50)
    refused = client.post("/threads/prune", json={"thread_ids": [copy]}, headers=USER2)
    assert refused.json() == {"pruned_count": 0}, refused.text
    assert client.get(f"/threads/{copy}", headers=USER1).status_code == 200
    pruned = client.post("/threads/prune", json={"thread_ids": [copy]}, headers=USER1)
    assert pruned.json() == {"pruned_count": 1}
    assert client.get(f"/threads/{copy}", headers=USER1).status_code == 404
    seen = {(c.get("resource"), c.get("action")) for c in calls(log) if c["call"] == "on"}
    assert {("threads", "read"), ("threads", "create"), ("threads", "delete")} <= seen
    # a batch asks create_run about each of its runs
    before = sum(1 for c in calls(log) if c.get("action") == "create_run")
    batch = [{"assistant_id": "access_task", "input": {}, "metadata": "not an object"}] * 2
    assert client.post("/runs/batch", json=batch, headers=USER1).status_code == 422
    batch = [{"assistant_id": "access_task", "input": {}}] * 2
    made = client.post("/runs/batch", json=batch, headers=USER1)
    assert made.status_code == 200, made.text
    assert sum(1 for c in calls(log) if c.get("action") == "create_run") == before + 4


def test_a_cancel_of_many_runs_asks_the_update_handler_and_keeps_to_its_filter(
    client: TestClient, log: Path
) -> None:
    """``POST /runs/cancel`` asks the threads ``update`` handler, as LangGraph's server does;
    a run of a thread its filter does not pass is not found (404), and nothing changes."""
    one = client.post("/threads", json={}, headers=USER1).json()["thread_id"]
    run = client.post(
        f"/threads/{one}/runs", json={"assistant_id": "access_task", "input": {}}, headers=USER1
    ).json()
    runner = client.runner  # type: ignore[attr-defined]
    deadline = time.monotonic() + 30
    url = f"/threads/{one}/runs/{run['run_id']}"
    while client.get(url, headers=USER1).json()["status"] in ("pending", "running"):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    from test_access import tables

    before = tables(runner)
    named = {"thread_id": one, "run_ids": [run["run_id"]]}
    start = len(calls(log))
    refused = client.post("/runs/cancel", json=named, headers=USER2)
    assert refused.status_code == 404, refused.text
    assert client.post("/runs/cancel", json={"status": "all"}, headers=USER2).status_code == 404
    # the owner passes the filter: the run is found, and has ended (nothing to cancel)
    ended = client.post("/runs/cancel", json=named, headers=USER1)
    assert ended.status_code == 404 and "have ended" in ended.text, ended.text
    assert "not found" not in refused.text and "have ended" not in refused.text
    asked = [c for c in calls(log)[start:] if c["call"] == "on"]
    assert [(c["resource"], c["action"], c["user"]) for c in asked] == [
        ("threads", "update", "user2"),
        ("threads", "update", "user2"),
        ("threads", "update", "user1"),
    ]
    assert tables(runner) == before


def _mcp(client: TestClient, who: dict[str, str], name: str, arguments: dict[str, object]) -> Any:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }
    headers = {**who, "Accept": "application/json, text/event-stream"}
    got = client.post("/mcp", json=body, headers=headers)
    assert got.status_code == 200, got.text
    result = got.json()["result"]
    return result.get("isError", False), json.loads(result["content"][0]["text"])


def _a2a(client: TestClient, who: dict[str, str], method: str, params: dict[str, Any]) -> Any:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    got = client.post("/a2a/access_task", json=body, headers={**who, "Accept": "application/json"})
    assert got.status_code == 200, got.text
    return got.json()


def test_mcp_and_a2a_ask_the_handlers_as_the_routes_do(client: TestClient, log: Path) -> None:
    """The doors that name a thread inside their body pass the same handlers: a task
    started over MCP or A2A is made with the owner the ``create_run`` handler sets, so its
    starter sees it everywhere; another user's reads and answers find no such thread."""
    runner: Runner = client.runner  # type: ignore[attr-defined]
    error, started = _mcp(client, USER1, "access_task", {})
    assert not error, started
    thread = started["thread_id"]
    assert runner.db.store.api_thread(thread)[0]["owner"] == "user1"  # type: ignore[index]
    assert client.get(f"/threads/{thread}", headers=USER1).status_code == 200
    assert client.get(f"/threads/{thread}", headers=USER2).status_code == 404
    error, seen = _mcp(client, USER1, "longtask_status", {"thread_id": thread})
    assert not error and seen["status"] == "waiting_user"
    for name, args in (
        ("longtask_status", {"thread_id": thread}),
        ("longtask_answer", {"thread_id": thread, "answer": True}),
    ):
        error, refused = _mcp(client, USER2, name, args)
        assert error and f"no thread {thread!r}" in refused["error"], (name, refused)
    _, listed = _mcp(client, USER2, "longtask_threads", {"limit": 10})
    assert thread not in [t["thread_id"] for t in listed["threads"]]
    _, listed = _mcp(client, USER1, "longtask_threads", {"limit": 10})
    assert thread in [t["thread_id"] for t in listed["threads"]]
    assert runner.events(thread, kinds=["approval.resolved"]) == []

    send = {
        "message": {
            "role": "user",
            "messageId": "m1",
            "parts": [{"kind": "data", "data": {"note": "x"}}],
        }
    }
    sent = _a2a(client, USER1, "message/send", send)
    assert "result" in sent, sent
    task = sent["result"]
    assert task["status"]["state"] == "input-required", task
    other = task["contextId"]
    assert runner.db.store.api_thread(other)[0]["owner"] == "user1"  # type: ignore[index]
    refused = _a2a(client, USER2, "tasks/get", {"id": task["id"]})["error"]
    assert "Task not found" in refused["message"]
    got = _a2a(client, USER1, "tasks/get", {"id": task["id"]})["result"]
    assert got["status"]["state"] == "input-required"
    asked = {(c.get("resource"), c.get("action")) for c in calls(log) if c["call"] == "on"}
    assert {("threads", "create_run"), ("threads", "read"), ("threads", "search")} <= asked


def _asked(log: Path, start: int, action: str) -> list[Any]:
    return [c["value"] for c in calls(log)[start:] if c.get("action") == action]


def test_a_search_as_the_sdk_sends_it_gives_the_handler_langgraphs_value(
    client: TestClient, log: Path
) -> None:
    """Issue 50: the docs' handler (``value.setdefault("metadata", {}).update(...)``) made
    every plain search a 500, as the SDK's ``threads.search()`` sends no metadata (the JS
    SDK's may send null): LangGraph's server gives the handler ``{}``, and so does longtask,
    with the rest of its value (values, status, and the page)."""
    mine = client.post("/threads", json={}, headers=USER1).json()["thread_id"]
    client.post("/threads", json={}, headers=USER2)
    start = len(calls(log))
    for body in ({"limit": 10, "offset": 0}, {"metadata": None, "values": None}):
        found = client.post("/threads/search", json=body, headers=USER1)
        assert found.status_code == 200, found.text
        assert [t["thread_id"] for t in found.json()] == [mine]
    assert client.post("/threads/count", json={}, headers=USER1).json() == 1
    page = {"metadata": {}, "values": {}, "status": None, "limit": 10, "offset": 0}
    count = {**page, "limit": 0}
    assert _asked(log, start, "search") == [page, page, count]


def test_a_patch_gives_the_update_handler_its_metadata_and_stores_what_it_leaves(
    client: TestClient, log: Path
) -> None:
    """Issue 50: ``PATCH /threads/T {"metadata": {"owner": "user1"}}`` handed user2's thread
    to user1, as the ``update`` handler was asked without the request's metadata and could
    not rewrite it. It is given ``{"thread_id", "metadata"}``, as on LangGraph's server,
    and what it leaves is stored: the docs' handler stamps its caller back as owner."""
    two = client.post("/threads", json={}, headers=USER2).json()["thread_id"]
    start = len(calls(log))
    handed = client.patch(
        f"/threads/{two}", json={"metadata": {"owner": "user1", "k": "v"}}, headers=USER2
    )
    assert handed.status_code == 200, handed.text
    assert handed.json()["metadata"] == {"owner": "user2", "k": "v"}
    assert _asked(log, start, "update") == [
        {"thread_id": two, "metadata": {"owner": "user1", "k": "v"}}
    ]
    assert client.post("/threads/search", json={}, headers=USER1).json() == []
    assert client.get(f"/threads/{two}", headers=USER1).status_code == 404
    assert client.get(f"/threads/{two}", headers=USER2).json()["metadata"]["owner"] == "user2"
    # a run's cancel and delete get LangGraph's values too
    run = client.post(
        f"/threads/{two}/runs", json={"assistant_id": "access_task", "input": {}}, headers=USER2
    ).json()["run_id"]
    start = len(calls(log))
    client.post(f"/threads/{two}/runs/{run}/cancel", headers=USER2)
    client.delete(f"/threads/{two}/runs/{run}", headers=USER2)
    assert _asked(log, start, "update") == [
        {
            "thread_id": two,
            "action": "interrupt",
            "metadata": {"run_ids": [run], "status": None},
        }
    ]
    assert _asked(log, start, "delete") == [{"thread_id": two, "run_id": run}]


TEAM_HANDLER = """
from langgraph_sdk import Auth

auth = Auth()


@auth.authenticate
async def authenticate(authorization: str | None) -> str:
    return (authorization or "").removeprefix("Bearer tok-")


@auth.on.threads.search
async def red_team(ctx: Auth.types.AuthContext, value: dict) -> None:
    value["metadata"]["team"] = "red"  # no filter returned: the search's metadata says it
"""


def test_a_search_handler_that_only_edits_the_metadata_narrows_the_search(
    db_url: str, tmp_path: Path
) -> None:
    """LangGraph's server searches with the metadata its handler left: a handler that sets
    a key and returns no filter keeps the search to threads with that key."""
    (tmp_path / "team_auth.py").write_text(TEAM_HANDLER)
    auth = load_auth("team_auth.py:auth", tmp_path)
    runner = Runner(db_url)
    try:
        with TestClient(create_app(runner, {}, auth_handler=auth)) as c:
            for team in ("red", "blue"):
                made = c.post("/threads", json={"metadata": {"team": team}}, headers=USER1)
                assert made.status_code == 200, made.text
            found = c.post("/threads/search", json={}, headers=USER1).json()
            assert [t["metadata"]["team"] for t in found] == ["red"]
            assert c.post("/threads/count", json={}, headers=USER1).json() == 1
    finally:
        runner.close()
