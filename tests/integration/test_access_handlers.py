"""LangGraph's auth handlers in ``longtask serve`` (issue 41), on both backends: the
owner-only handler file the differential test gives LangGraph's own server
(tests/acceptance/lgdiff_auth.py) identifies every caller, its ``@auth.on`` filter decides
which threads exist for whom (404 otherwise), and its metadata edit (the owner) is stored."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from longtask import Runner
from longtask.serve import create_app
from longtask.serve._handlers import load_auth, matches
from longtask.serve._registry import auth_path, load_registry

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
    # a prune naming a thread the caller may not act on prunes nothing
    refused = client.post("/threads/prune", json={"thread_ids": [copy]}, headers=USER2)
    assert refused.status_code == 404
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
