"""Assistants created through the LangGraph Server API (issue 43), on every backend:
versioned configurations of a registered task. Create, update (a new version), versions,
set latest, search (sort, select), count, get and delete; a registered task's own assistant
cannot be changed; bad input is refused naming the fix with nothing stored; a run of a
created assistant starts its task with the assistant's context as the inputs' defaults and
its config in the run's config; assistants are kept in the database, so another serve on
it sees them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel
from starlette.testclient import TestClient

from longtask import LongTask, Runner, Stage, StepContext, function_step
from longtask.serve import create_app
from longtask.serve._registry import assistant_id, load_registry

TOKENS = {"tok-alice": "alice", "tok-bob": "bob", "tok-root": "root", "tok-vera": "vera"}
ROLES = {"root": "admin", "vera": "viewer"}
ALICE = {"Authorization": "Bearer tok-alice"}
BOB = {"Authorization": "Bearer tok-bob"}
ADMIN = {"Authorization": "Bearer tok-root"}
VIEWER = {"Authorization": "Bearer tok-vera"}


class Brief(BaseModel):
    topic: str
    depth: int = 1


@function_step
def research(ctx: StepContext) -> str:
    from langgraph.config import get_config

    config = get_config()
    tags = ",".join(sorted(config.get("tags") or []))
    tone = config["configurable"].get("tone")
    return f"{ctx.inputs.topic}:{ctx.inputs.depth}:{tags}:{tone}"


TASK = LongTask("asst_task", inputs=Brief, stages=[Stage("go", [research])])
SYSTEM = assistant_id("asst_task")


@pytest.fixture
def runner(db_url: str) -> Iterator[Runner]:
    r = Runner(db_url)
    yield r
    r.close()


def app(runner: Runner) -> Any:
    return create_app(
        runner,
        TOKENS,
        roles=ROLES,
        registry=load_registry(["test_lg_assistants:TASK"]),
        schedule_poll=None,
        poll=0.02,
    )


@pytest.fixture
def client(runner: Runner) -> Iterator[TestClient]:
    with TestClient(app(runner)) as c:
        yield c


def rows(runner: Runner) -> list[Any]:
    store = runner.db.store
    return [
        store._run("SELECT * FROM longtask_assistants ORDER BY assistant_id", ()),
        store._run("SELECT * FROM longtask_assistant_versions ORDER BY assistant_id", ()),
    ]


def create(client: TestClient, who: dict[str, str] = ALICE, **body: Any) -> dict[str, Any]:
    r = client.post("/assistants", json={"graph_id": "asst_task", **body}, headers=who)
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_create_update_versions_latest_and_delete(client: TestClient) -> None:
    made = create(client, name="deep", context={"depth": 3}, metadata={"team": "a"})
    aid = made["assistant_id"]
    assert made["version"] == 1 and made["graph_id"] == "asst_task"
    # config and context are kept equal, as on LangGraph's server
    assert made["config"] == {"configurable": {"depth": 3}} and made["context"] == {"depth": 3}
    assert client.get(f"/assistants/{aid}", headers=BOB).json() == made

    patched = client.patch(
        f"/assistants/{aid}", json={"context": {"depth": 5}, "metadata": {"x": 1}}, headers=ALICE
    )
    assert patched.status_code == 200, patched.text
    two = patched.json()
    assert two["version"] == 2 and two["context"] == {"depth": 5}
    assert two["metadata"] == {"team": "a", "x": 1} and two["name"] == "deep"

    versions = client.post(f"/assistants/{aid}/versions", json={}, headers=ALICE).json()
    assert [v["version"] for v in versions] == [2, 1]
    assert [v["context"] for v in versions] == [{"depth": 5}, {"depth": 3}]
    only = client.post(
        f"/assistants/{aid}/versions", json={"metadata": {"x": 1}}, headers=ALICE
    ).json()
    assert [v["version"] for v in only] == [2]
    paged = client.post(
        f"/assistants/{aid}/versions", json={"limit": 1, "offset": 1}, headers=ALICE
    ).json()
    assert [v["version"] for v in paged] == [1]

    back = client.post(f"/assistants/{aid}/latest", json={"version": 1}, headers=ALICE)
    assert back.status_code == 200, back.text
    assert back.json()["version"] == 1 and back.json()["context"] == {"depth": 3}
    assert client.get(f"/assistants/{aid}", headers=ALICE).json()["version"] == 1
    # a third version is numbered after every one made, not after the current one
    three = client.patch(f"/assistants/{aid}", json={"name": "deeper"}, headers=ALICE).json()
    assert three["version"] == 3 and three["context"] == {"depth": 3}

    missing = client.post(f"/assistants/{aid}/latest", json={"version": 9}, headers=ALICE)
    assert missing.status_code == 404 and "versions" in missing.text

    assert client.delete(f"/assistants/{aid}", headers=ALICE).status_code == 204
    assert client.get(f"/assistants/{aid}", headers=ALICE).status_code == 404
    assert client.post(f"/assistants/{aid}/versions", json={}, headers=ALICE).status_code == 404


def test_search_count_sort_select_and_if_exists(client: TestClient) -> None:
    a = create(client, name="alpha", metadata={"kind": "x"})
    time.sleep(0.01)  # distinct creation times: the default order is newest first
    b = create(client, name="beta", metadata={"kind": "y"})
    found = client.post("/assistants/search", json={}, headers=BOB).json()
    assert [x["assistant_id"] for x in found] == [b["assistant_id"], a["assistant_id"], SYSTEM]
    by_name = client.post(
        "/assistants/search", json={"sort_by": "name", "sort_order": "asc"}, headers=BOB
    ).json()
    assert [x["name"] for x in by_name] == ["alpha", "asst_task", "beta"]
    picked = client.post(
        "/assistants/search",
        json={"metadata": {"kind": "y"}, "select": ["assistant_id", "name"]},
        headers=BOB,
    ).json()
    assert picked == [{"assistant_id": b["assistant_id"], "name": "beta"}]
    page = client.post("/assistants/search", json={"limit": 1, "offset": 1}, headers=BOB)
    assert page.headers["X-Pagination-Next"] == "2"
    assert [x["name"] for x in page.json()] == ["alpha"]
    assert client.post("/assistants/count", json={}, headers=BOB).json() == 3
    assert client.post("/assistants/count", json={"name": "ALP"}, headers=BOB).json() == 1

    again = client.post(
        "/assistants",
        json={"graph_id": "asst_task", "assistant_id": a["assistant_id"]},
        headers=ALICE,
    )
    assert again.status_code == 409 and "do_nothing" in again.text
    same = create(client, assistant_id=a["assistant_id"], if_exists="do_nothing", name="other")
    assert same == a


BAD: list[tuple[dict[str, Any], int, str]] = [
    ({"graph_id": "nope"}, 404, "asst_task"),
    ({}, 422, "graph_id is required"),
    ({"graph_id": "asst_task", "assistant_id": "not-a-uuid"}, 422, "UUID"),
    ({"graph_id": "asst_task", "if_exists": "replace"}, 422, "do_nothing"),
    ({"graph_id": "asst_task", "config": {"callbacks": 1}}, 422, "configurable"),
    ({"graph_id": "asst_task", "config": {"configurable": []}}, 422, "config.configurable"),
    ({"graph_id": "asst_task", "config": {"tags": "a"}}, 422, "list of strings"),
    ({"graph_id": "asst_task", "context": [1]}, 422, "context must be an object"),
    ({"graph_id": "asst_task", "metadata": "m"}, 422, "metadata must be an object"),
    ({"graph_id": "asst_task", "name": 5}, 422, "name must be a string"),
    (
        {"graph_id": "asst_task", "config": {"configurable": {"a": 1}}, "context": {"a": 2}},
        400,
        "send context alone",
    ),
    (
        {"graph_id": "asst_task", "config": {"configurable": {"thread_id": "t"}}},
        422,
        "each run sets it",
    ),
]


@pytest.mark.parametrize(("body", "status", "says"), BAD)
def test_bad_input_is_refused_naming_the_fix_and_stores_nothing(
    runner: Runner, client: TestClient, body: dict[str, Any], status: int, says: str
) -> None:
    made = create(client)
    before = rows(runner)
    r = client.post("/assistants", json=body, headers=ALICE)
    assert r.status_code == status and says in r.text, r.text
    # the same fields are refused in an update (create's own fields aside)
    if body.get("graph_id") == "asst_task" and not {"assistant_id", "if_exists"} & set(body):
        patched = client.patch(f"/assistants/{made['assistant_id']}", json=body, headers=ALICE)
        assert patched.status_code == status and says in patched.text, patched.text
    assert rows(runner) == before


def test_a_registered_task_s_assistant_cannot_be_changed(
    runner: Runner, client: TestClient
) -> None:
    before = rows(runner)
    for method, path, body in (
        ("PATCH", f"/assistants/{SYSTEM}", {"name": "x"}),
        ("DELETE", f"/assistants/{SYSTEM}", None),
        ("POST", f"/assistants/{SYSTEM}/latest", {"version": 1}),
    ):
        r = client.request(method, path, json=body, headers=ADMIN)
        assert r.status_code == 409, r.text
        assert 'POST /assistants with {"graph_id": "asst_task"}' in str(r.json()), r.text
    taken = client.post(
        "/assistants", json={"graph_id": "asst_task", "assistant_id": SYSTEM}, headers=ADMIN
    )
    assert taken.status_code == 409
    versions = client.post(f"/assistants/{SYSTEM}/versions", json={}, headers=ALICE).json()
    assert [v["version"] for v in versions] == [1]
    assert rows(runner) == before


def test_who_may_change_an_assistant(runner: Runner, client: TestClient) -> None:
    made = create(client, ALICE)
    aid = made["assistant_id"]
    refused = [
        (VIEWER, "POST", "/assistants", {"graph_id": "asst_task"}, 403),
        (BOB, "PATCH", f"/assistants/{aid}", {"name": "bob's"}, 403),
        (BOB, "POST", f"/assistants/{aid}/latest", {"version": 1}, 403),
        (BOB, "DELETE", f"/assistants/{aid}", None, 403),
        (VIEWER, "PATCH", f"/assistants/{aid}", {"name": "v"}, 403),
        ({"Authorization": "Bearer nope"}, "GET", f"/assistants/{aid}", None, 401),
    ]
    before = rows(runner)
    for who, method, path, body, status in refused:
        r = client.request(method, path, json=body, headers=who)
        assert r.status_code == status, (who, method, path, r.text)
    assert rows(runner) == before
    # everyone signed in reads it; its creator and an admin change it
    assert client.get(f"/assistants/{aid}", headers=VIEWER).status_code == 200
    assert client.patch(f"/assistants/{aid}", json={"name": "n"}, headers=ADMIN).status_code == 200
    assert client.patch(f"/assistants/{aid}", json={"name": "m"}, headers=ALICE).status_code == 200
    assert client.delete(f"/assistants/{aid}", headers=ADMIN).status_code == 204


def wait_done(runner: Runner, thread: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        rec = runner.db.store.get_thread(thread)
        if rec is not None and rec.status in ("completed", "failed"):
            return
        time.sleep(0.05)
    raise AssertionError(f"thread {thread} did not finish")


def test_a_run_of_a_created_assistant_applies_its_configuration(
    runner: Runner, client: TestClient
) -> None:
    made = create(
        client,
        context={"depth": 4, "topic": "rain", "tone": "dry"},
        config={"tags": ["from-assistant"]},
    )
    aid = made["assistant_id"]
    thread = client.post("/threads", json={}, headers=BOB).json()["thread_id"]
    run = client.post(
        f"/threads/{thread}/runs",
        json={"assistant_id": aid, "input": {"topic": "snow"}, "config": {"tags": ["mine"]}},
        headers=BOB,
    )
    assert run.status_code == 200, run.text
    assert run.json()["assistant_id"] == aid
    wait_done(runner, thread)
    # the run's input over the assistant's context, whose other keys the steps read in
    # config.configurable; the run's tags over the assistant's
    assert runner.results(thread)["research"] == "snow:4:mine:dry"
    recorded = runner.db.store.api_run(run.json()["run_id"])
    assert recorded is not None
    assert recorded.request["assistant"] == {"assistant_id": aid, "version": 1}

    # an update does not change what a started thread was given; a new thread gets it
    client.patch(f"/assistants/{aid}", json={"context": {"depth": 9}}, headers=ALICE)
    second = client.post(
        "/runs/wait", json={"assistant_id": aid, "input": {"topic": "fog"}}, headers=BOB
    )
    assert second.status_code == 200, second.text
    assert runner.results(thread)["research"] == "snow:4:mine:dry"
    threads = [t for t in runner.db.store.list_threads() if t.thread_id != thread]
    (other,) = threads
    wait_done(runner, other.thread_id)
    assert runner.results(other.thread_id)["research"] == "fog:9::None"

    # an input the assistant's context makes wrong is refused, nothing recorded
    bad = create(client, context={"depth": "deep"})
    r = client.post(
        "/runs", json={"assistant_id": bad["assistant_id"], "input": {"topic": "x"}}, headers=BOB
    )
    assert r.status_code == 409 and "context gives depth" in r.text, r.text


def test_assistants_are_kept_in_the_database_for_every_serve_on_it(
    runner: Runner, db_url: str
) -> None:
    with TestClient(app(runner)) as one:
        made = create(one, name="kept")
    other = Runner(db_url)
    try:
        with TestClient(app(other)) as two:
            got = two.get(f"/assistants/{made['assistant_id']}", headers=BOB)
            assert got.status_code == 200 and got.json()["name"] == "kept"
            assert two.post("/assistants/count", json={}, headers=BOB).json() == 2
    finally:
        other.close()


def test_mcp_lists_a_created_assistant_as_a_tool_that_applies_it(
    runner: Runner, client: TestClient
) -> None:
    import json

    create(client, name="rainy research", context={"topic": "rain", "depth": 2})
    accept = {"Accept": "application/json, text/event-stream", **BOB}

    def rpc(method: str, params: dict[str, Any]) -> Any:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        got = client.post("/mcp", json=body, headers=accept)
        assert got.status_code == 200, got.text
        return got.json()["result"]

    tools = {t["name"]: t for t in rpc("tools/list", {})["tools"]}
    assert tools["asst_task"]["inputSchema"]["required"] == ["topic"]
    made = tools["rainy_research"]
    assert made["title"] == "rainy research" and "asst_task" in made["description"]
    assert made["inputSchema"].get("required") == []  # the context gives the topic
    result = rpc("tools/call", {"name": "rainy_research", "arguments": {"depth": 7}})
    started = json.loads(result["content"][0]["text"])
    wait_done(runner, started["thread_id"])
    assert runner.results(started["thread_id"])["research"] == "rain:7::None"
