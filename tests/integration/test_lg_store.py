"""The Server API's store on LangGraph's own SqliteStore/PostgresStore, on every backend:
put, get, search with a filter, namespaces, delete, TTL, and bad input refused with a 422
that names what is wrong, changing nothing. Writes need a token."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from longtask import Runner
from longtask.checkpointers._kvstore import open_kv_store
from longtask.serve import create_app
from longtask.serve._registry import load_registry

LG_TASKS = Path(__file__).parents[1] / "acceptance" / "lg_task.py"
ALICE = {"X-Api-Key": "tok-alice"}


@pytest.fixture
def runner(db_url: str) -> Iterator[Runner]:
    r = Runner(db_url)
    yield r
    r.close()


@pytest.fixture
def client(runner: Runner) -> Iterator[TestClient]:
    registry = load_registry([f"{LG_TASKS}:RELEASE"])
    with TestClient(
        create_app(runner, {"tok-alice": "alice"}, registry=registry), headers=ALICE
    ) as c:
        yield c


def _put(client: TestClient, ns: list[str], key: str, value: object, **extra: object) -> int:
    body = {"namespace": ns, "key": key, "value": value, **extra}
    return client.put("/store/items", json=body, headers=ALICE).status_code


def test_items_are_put_read_searched_listed_and_deleted(client: TestClient) -> None:
    assert _put(client, ["alice", "a"], "prefs", {"theme": "dark", "lang": "en"}) == 204
    assert _put(client, ["alice", "a"], "notes", {"theme": "light"}) == 204
    assert _put(client, ["alice", "b"], "prefs", {"theme": "dark"}) == 204

    got = client.get("/store/items", params={"namespace": "alice.a", "key": "prefs"})
    item = got.json()
    assert item["namespace"] == ["alice", "a"] and item["key"] == "prefs"
    assert item["value"] == {"theme": "dark", "lang": "en"}
    assert {"created_at", "updated_at"} <= set(item)
    none = client.get("/store/items", params={"namespace": "alice.a", "key": "nope"})
    assert none.status_code == 200 and none.json() is None

    found = client.post(
        "/store/items/search",
        json={"namespace_prefix": ["alice"], "filter": {"theme": "dark"}, "limit": 10},
    ).json()["items"]
    assert sorted((tuple(i["namespace"]), i["key"]) for i in found) == [
        (("alice", "a"), "prefs"),
        (("alice", "b"), "prefs"),
    ]
    spaces = client.post("/store/namespaces", json={"prefix": ["alice"]}).json()["namespaces"]
    assert sorted(spaces) == [["alice", "a"], ["alice", "b"]]
    shallow = client.post("/store/namespaces", json={"max_depth": 1}).json()["namespaces"]
    assert shallow == [["alice"]]

    gone = client.request(
        "DELETE",
        "/store/items",
        json={"namespace": ["alice", "b"], "key": "prefs"},
        headers=ALICE,
    )
    assert gone.status_code == 204
    assert (
        client.get("/store/items", params={"namespace": "alice.b", "key": "prefs"}).json() is None
    )


def test_an_item_put_with_a_ttl_expires(client: TestClient, runner: Runner) -> None:
    assert _put(client, ["alice", "cache"], "short", {"v": 1}, ttl=0.01) == 204  # 0.6 s
    assert _put(client, ["alice", "cache"], "long", {"v": 2}, ttl=60) == 204
    assert _put(client, ["alice", "cache"], "ever", {"v": 3}) == 204
    time.sleep(2.5)  # past the expiry, by SQLite's clock too (whole seconds)
    opened = open_kv_store(runner.db.url, sweep=False)
    try:
        assert opened.store.sweep_ttl() == 1  # type: ignore[attr-defined]
    finally:
        opened.close()
    keys = [
        i["key"]
        for i in client.post(
            "/store/items/search", json={"namespace_prefix": ["alice", "cache"]}
        ).json()["items"]
    ]
    assert sorted(keys) == ["ever", "long"]


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"namespace": "users", "key": "k", "value": {}}, "namespace must be a list"),
        ({"namespace": ["a.b"], "key": "k", "value": {}}, "without periods"),
        ({"namespace": [""], "key": "k", "value": {}}, "non-empty"),
        ({"namespace": ["a"], "key": "", "value": {}}, "key must be"),
        ({"namespace": ["a"], "key": "k", "value": [1]}, "value must be an object"),
        ({"namespace": ["a"], "key": "k", "value": {}, "ttl": -1}, "ttl is a number"),
        # PostgreSQL cannot read the interval LangGraph's store writes for it (found by the
        # 50-example contract run)
        ({"namespace": ["a"], "key": "k", "value": {}, "ttl": 2.95e-35}, "from 0.001"),
        ({"namespace": ["a"], "key": "k", "value": {}, "index": "x"}, "index is"),
    ],
)
def test_bad_items_are_refused_and_store_nothing(
    client: TestClient, body: dict[str, object], named: str
) -> None:
    got = client.put("/store/items", json=body, headers=ALICE)
    assert got.status_code == 422 and named in got.json()["detail"], got.text
    listed = client.post("/store/namespaces", json={}).json()["namespaces"]
    assert listed == []


def test_the_store_needs_a_token_and_a_viewer_only_reads_it(runner: Runner) -> None:
    registry = load_registry([f"{LG_TASKS}:RELEASE"])
    tokens = {"tok-alice": "alice", "tok-audit": "audit"}
    app = create_app(runner, tokens, registry=registry, roles={"audit": "viewer"})
    body = {"namespace": ["alice"], "key": "k", "value": {"x": 1}}
    with TestClient(app) as client:
        wrong = {"X-Api-Key": "wrong"}
        assert client.put("/store/items", json=body, headers=wrong).status_code == 401
        assert client.put("/store/items", json=body).status_code == 401
        viewer = {"X-Api-Key": "tok-audit"}
        assert client.put("/store/items", json=body, headers=viewer).status_code == 403
        query = {"namespace": "alice", "key": "k"}
        assert client.get("/store/items", params=query, headers=viewer).json() is None
        assert client.put("/store/items", json=body, headers=ALICE).status_code == 204
        assert client.get("/store/items", params=query, headers=viewer).json()["value"] == {"x": 1}


def test_with_built_in_tokens_each_user_keeps_to_the_namespaces_under_their_name(
    runner: Runner,
) -> None:
    """Issue 50: the store was one namespace for every user (bob read and overwrote
    ``["alice", "notes"]``). A user reads and writes the namespaces whose first label is
    their name; a search or a list without a prefix is confined to theirs; another's is a
    403 that changes nothing. An admin uses every namespace, a viewer reads every one."""
    registry = load_registry([f"{LG_TASKS}:RELEASE"])
    tokens = {"tok-alice": "alice", "tok-bob": "bob", "tok-ops": "ops", "tok-audit": "audit"}
    roles = {"ops": "admin", "audit": "viewer"}
    app = create_app(runner, tokens, registry=registry, roles=roles)
    bob, ops, audit = ({"X-Api-Key": f"tok-{n}"} for n in ("bob", "ops", "audit"))
    notes = {"namespace": ["alice", "notes"], "key": "k", "value": {"x": 1}}
    query = {"namespace": "alice.notes", "key": "k"}
    with TestClient(app) as client:
        assert client.put("/store/items", json=notes, headers=ALICE).status_code == 204
        own = {"namespace": ["bob", "notes"], "key": "k", "value": {"x": 2}}
        assert client.put("/store/items", json=own, headers=bob).status_code == 204
        # bob neither overwrites, reads, deletes nor finds alice's
        overwrite = {**notes, "value": {"x": "bob's"}}
        refused = client.put("/store/items", json=overwrite, headers=bob)
        assert refused.status_code == 403, refused.text
        assert "under their own name" in refused.json()["detail"]
        assert client.get("/store/items", params=query, headers=bob).status_code == 403
        gone = {"namespace": ["alice", "notes"], "key": "k"}
        assert client.request("DELETE", "/store/items", json=gone, headers=bob).status_code == 403
        for path, body in (
            ("/store/items/search", {"namespace_prefix": ["alice"]}),
            ("/store/namespaces", {"prefix": ["alice"]}),
            ("/store/items", {"namespace": [], "key": "k", "value": {}}),  # the root
        ):
            method = "PUT" if path == "/store/items" else "POST"
            got = client.request(method, path, json=body, headers=bob)
            assert got.status_code == 403, (path, got.text)
        everywhere = client.post("/store/items/search", json={}, headers=bob).json()["items"]
        assert [(i["namespace"], i["value"]) for i in everywhere] == [(["bob", "notes"], {"x": 2})]
        listed = client.post("/store/namespaces", json={}, headers=bob).json()["namespaces"]
        assert listed == [["bob", "notes"]]
        assert client.get("/store/items", params=query, headers=ALICE).json()["value"] == {"x": 1}
        # a viewer reads every namespace, an admin writes every one
        seen = client.post("/store/items/search", json={}, headers=audit).json()["items"]
        assert sorted(i["namespace"][0] for i in seen) == ["alice", "bob"]
        assert client.get("/store/items", params=query, headers=audit).json()["value"] == {"x": 1}
        assert client.put("/store/items", json=overwrite, headers=ops).status_code == 204
        assert client.get("/store/items", params=query, headers=ops).json()["value"] == {
            "x": "bob's"
        }
        spaces = client.post("/store/namespaces", json={}, headers=ops).json()["namespaces"]
        assert sorted(spaces) == [["alice", "notes"], ["bob", "notes"]]


def test_the_stores_auth_handler_keeps_each_user_to_their_namespaces(runner: Runner) -> None:
    from longtask.serve.access import load_auth

    auth = load_auth(f"{Path(__file__).parent / 'store_auth.py'}:auth", Path(__file__).parent)
    registry = load_registry([f"{LG_TASKS}:RELEASE"])
    app = create_app(runner, {}, auth_handler=auth, registry=registry)
    ann = {"Authorization": "Bearer tok-ann"}
    ben = {"Authorization": "Bearer tok-ben"}
    body = {"namespace": ["ann", "prefs"], "key": "k", "value": {"x": 1}}
    with TestClient(app) as client:
        assert client.put("/store/items", json=body, headers=ann).status_code == 204
        refused = client.put("/store/items", json=body, headers=ben)
        assert refused.status_code == 403 and "Not authorized" in refused.text
        query = {"namespace": "ann.prefs", "key": "k"}
        assert client.get("/store/items", params=query, headers=ann).json()["value"] == {"x": 1}
        assert client.get("/store/items", params=query, headers=ben).status_code == 403
        search = {"namespace_prefix": ["ann"]}
        assert client.post("/store/items/search", json=search, headers=ben).status_code == 403
        found = client.post("/store/items/search", json=search, headers=ann).json()["items"]
        assert [i["key"] for i in found] == ["k"]
        gone = {"namespace": ["ann", "prefs"], "key": "k"}
        assert client.request("DELETE", "/store/items", json=gone, headers=ben).status_code == 403
        assert client.put("/store/items", json=body).status_code == 401
