"""Malformed requests to ``longtask serve`` are a 4xx naming what is wrong, never a 500, and
a refused one stores nothing (issue 39, the smaller ones): bodies nested too deep for
Python's parser, a NUL byte in any route's path or query (PostgreSQL refuses one in text),
and a refused stateless run. On every backend, in process (Starlette's TestClient)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from serve_access import AdminClient
from starlette.routing import Route
from starlette.testclient import TestClient

from longtask import LongTask, Runner, Stage, StepContext, function_step
from longtask.serve import create_app
from longtask.serve._json_body import MAX_DEPTH
from longtask.serve._registry import Registered, Registry, load_registry

LG_TASKS = Path(__file__).parents[1] / "acceptance" / "lg_task.py"
RELEASE_REF = f"{LG_TASKS}:RELEASE"
ALICE = {"X-Api-Key": "tok-alice"}


class Count(BaseModel):
    n: int


@function_step
def count(ctx: StepContext) -> int:
    return 1


#: a task whose inputs are checked: a stateless run with others is refused
TYPED = LongTask("lg_typed", stages=[Stage("only", [count])], inputs=Count)


@pytest.fixture
def runner(db_url: str) -> Iterator[Runner]:
    r = Runner(db_url)
    yield r
    r.close()


@pytest.fixture
def client(runner: Runner) -> Iterator[TestClient]:
    typed = Registered("lg_typed", f"{__file__}:TYPED", TYPED)
    registry = Registry([*load_registry([RELEASE_REF]).by_name.values(), typed])
    app = create_app(runner, {"tok-alice": "alice"}, registry=registry)
    with AdminClient(app, raise_server_exceptions=False) as c:
        yield c


def paused(client: TestClient) -> str:
    """A thread of lg_release waiting for its approval."""
    thread = str(client.post("/threads", json={}, headers=ALICE).json()["thread_id"])
    body = {"assistant_id": "lg_release", "input": {}}
    got = client.post(f"/threads/{thread}/runs/wait", json=body, headers=ALICE)
    assert got.status_code == 200, got.text
    assert client.get(f"/threads/{thread}").json()["status"] == "interrupted"
    return thread


def contents(runner: Runner) -> dict[str, list[str]]:
    """Every row of every table of the database, to compare before and after a request."""
    store = runner.db.store
    if runner.db.url.raw.startswith("sqlite"):
        sql = "SELECT name FROM sqlite_master WHERE type = 'table'"
    else:
        sql = "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
    tables = sorted(str(r[0]) for r in store._run(sql))
    return {t: sorted(map(repr, store._run(f'SELECT * FROM "{t}"'))) for t in tables}


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(
    ("path", "template", "depth", "named"),
    [
        ("/threads", "[" * 200_000, 0, "the body"),  # unbalanced, as the issue sent it
        ("/threads", "@", 200_000, "the body"),
        ("/threads/{t}/state", '{"values": {"fetch_a": @}}', 5000, "'values'"),
        ("/threads/{t}/state", '{"values": {"fetch_a": @}}', MAX_DEPTH, "'values'"),
        ("/api/threads/{t}/approve", '{"comment": @}', 5000, "'comment'"),
        ("/threads/search", '{"ids": ["x"], "metadata": {"a": @}}', 3000, "'metadata'"),
        ("/threads/{t}/runs", '{"assistant_id": "lg_release", "input": @}', 999, "'input'"),
    ],
)
def test_a_body_nested_too_deep_is_a_400_naming_its_field(
    runner: Runner, client: TestClient, path: str, template: str, depth: int, named: str
) -> None:
    body = template.replace("@", nested(depth))
    thread = paused(client)
    before = contents(runner)
    got = client.post(
        path.format(t=thread),
        content=body.encode(),
        headers={**ALICE, "content-type": "application/json"},
    )
    assert got.status_code == 400, got.text
    assert got.json()["detail"].startswith(f"{named} nests"), got.json()
    assert str(MAX_DEPTH) in got.json()["detail"]
    assert contents(runner) == before


def test_a_body_as_deep_as_the_bound_is_taken(client: TestClient) -> None:
    # The body's object and "metadata" are two levels: the value may nest the rest.
    body = '{"metadata": {"a": @}}'.replace("@", nested(MAX_DEPTH - 2))
    got = client.post(
        "/threads/search", content=body.encode(), headers={"content-type": "application/json"}
    )
    assert got.status_code == 200 and got.json() == [], got.text


def _routes(client: TestClient) -> list[tuple[str, str, list[str]]]:
    """(method, path template, path parameters) of every route of the app."""
    found = []
    for route in client.app.routes:  # type: ignore[attr-defined]
        assert isinstance(route, Route), route
        for method in sorted(route.methods or ["GET"]):
            if method != "HEAD":
                found.append((method, route.path, list(route.param_convertors)))
    return found


def test_a_nul_byte_in_any_routes_path_is_a_400_naming_the_parameter(
    runner: Runner, client: TestClient
) -> None:
    thread = paused(client)
    before = contents(runner)
    tried = 0
    for method, template, params in _routes(client):
        for bad in params:
            url = template
            for name in params:
                value = "a%00b" if name == bad else thread
                url = re.sub(r"\{" + name + r"(:[a-z]+)?\}", value, url)
            got = client.request(method, url, headers=ALICE, json={})
            assert got.status_code == 400, (method, url, got.text)
            assert f"path parameter {bad!r} holds a NUL byte" in got.json()["detail"], got.text
            tried += 1
    assert tried > 20  # every route with an id in its path, not a handful
    assert contents(runner) == before


def test_a_nul_byte_in_any_routes_query_is_a_400_naming_the_parameter(
    runner: Runner, client: TestClient
) -> None:
    thread = paused(client)
    before = contents(runner)
    for method, template, params in _routes(client):
        url = template
        for name in params:
            url = re.sub(r"\{" + name + r"(:[a-z]+)?\}", thread, url)
        for query in ("status=a%00b", "before=x%00", "limit=1&sort=%00"):
            got = client.request(method, f"{url}?{query}", headers=ALICE, json={})
            assert got.status_code == 400, (method, url, query, got.text)
            key = re.findall(r"(\w+)=[^&]*%00", query)[0]
            assert f"query parameter {key!r} holds a NUL byte" in got.json()["detail"]
    assert contents(runner) == before


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/threads/{t}/history", {"before": "a\x00b"}, "before"),
        (
            "/threads/{t}/state/checkpoint",
            {"checkpoint": {"checkpoint_id": "a\x00b"}},
            "checkpoint.checkpoint_id",
        ),
    ],
)
def test_a_nul_byte_in_an_id_in_a_body_is_a_422_naming_it(
    runner: Runner, client: TestClient, path: str, body: dict[str, Any], field: str
) -> None:
    thread = paused(client)
    got = client.post(path.format(t=thread), json=body, headers=ALICE)
    assert got.status_code == 422, got.text
    assert got.json()["detail"].startswith(f"{field} holds a NUL byte"), got.text


@pytest.mark.parametrize(
    "body",
    [
        {"assistant_id": "lg_release", "input": [1]},
        {"assistant_id": "lg_typed", "input": {"n": "not a number"}},
        {"assistant_id": "lg_typed", "input": {"messages": [{"type": "human", "content": "hi"}]}},
        {"assistant_id": "lg_release", "input": {}, "stream_mode": ["no-such-mode"]},
        {"assistant_id": "lg_release", "input": {}, "config": {"configurable": "x"}},
    ],
)
@pytest.mark.parametrize("path", ["/runs/wait", "/runs", "/threads/{new}/runs"])
def test_a_refused_run_on_a_new_thread_stores_nothing(
    runner: Runner, client: TestClient, body: dict[str, Any], path: str
) -> None:
    paused(client)  # a database with something in it
    before = contents(runner)
    request = {**body, "if_not_exists": "create"} if "{new}" in path else body
    got = client.post(path.format(new="fresh-thread"), json=request, headers=ALICE)
    assert got.status_code in (409, 422), got.text
    assert contents(runner) == before


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        # what the contract run sent PostgreSQL (a 500 there before): a NUL in any text
        (
            "PUT",
            "/store/items",
            {"namespace": ["a"], "key": "k", "value": {"x": "a\x00"}},
            "value.x",
        ),
        ("POST", "/store/items/search", {"filter": {"a\x00": None}}, "a key of filter"),
        ("POST", "/threads", {"metadata": {"note": ["ok", "\x00"]}}, "metadata.note[1]"),
        ("POST", "/assistants", {"graph_id": "lg_release", "description": "\x00"}, "description"),
    ],
)
def test_a_nul_byte_in_any_text_of_a_body_is_a_422_on_every_backend(
    runner: Runner, client: TestClient, method: str, path: str, body: dict[str, Any], field: str
) -> None:
    before = contents(runner)
    got = client.request(method, path, json=body, headers=ALICE)
    assert got.status_code == 422, got.text
    assert got.json()["detail"].startswith(f"{field} holds a NUL byte"), got.text
    assert contents(runner) == before


@pytest.mark.parametrize(
    ("path", "headers"),
    [
        ("/api/threads/{t}/events?since=" + "9" * 40, {}),
        ("/api/threads/{t}/events?since=9223372036854775808", {}),
        ("/api/threads/{t}/events/stream?since=" + "9" * 40, {}),
        ("/api/threads/{t}/events/stream", {"Last-Event-ID": "9" * 40}),
    ],
)
def test_an_event_id_beyond_any_stored_one_is_a_400_on_every_backend(
    client: TestClient, runner: Runner, path: str, headers: dict[str, str]
) -> None:
    thread = paused(client)
    got = client.get(path.format(t=thread), headers={**ALICE, **headers})
    assert got.status_code == 400, got.text
    assert "from 0 to 9223372036854775807" in got.json()["detail"]
    # the largest id is taken, and nothing comes after it; in Python too, on every backend
    top = client.get(f"/api/threads/{thread}/events?since=9223372036854775807", headers=ALICE)
    assert top.status_code == 200 and top.json() == []
    assert runner.events(thread, since=10**40) == []
