"""langgraph.json's ``http`` (issue 52 item 6): the app's own routes (``http.app``, a
FastAPI app here) answered beside the API behind the same gate, each by the rule it declares
(or every one ``signed_in`` with ``enable_custom_route_auth``; with neither, refused and
listed at startup); the API's groups ``disable_*`` turns off; CORS settings; bad settings
refused with what to fix."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from longtask import Runner
from longtask.errors import InvalidInput
from longtask.serve import create_app
from longtask.serve._userapp import GROUPS, load_http

HERE = Path(__file__).resolve().parent
ALICE = {"Authorization": "Bearer tok-alice"}


def _settings(tmp_path: Path, **http: Any) -> Any:
    config = tmp_path / "langgraph.json"
    config.write_text(json.dumps({"graphs": {}, "http": http}))
    return load_http(config)


@pytest.fixture
def served(runner: Runner, tmp_path: Path) -> Iterator[Any]:
    made: list[TestClient] = []

    def serve(**http: Any) -> TestClient:
        settings = _settings(tmp_path, **http)
        app = create_app(runner, {"tok-alice": "alice"}, schedule_poll=None, http=settings)
        client = TestClient(app)
        client.__enter__()
        client.user_app = settings.app if settings is not None else None  # type: ignore[attr-defined]
        made.append(client)
        return client

    yield serve
    for client in made:
        client.__exit__(None, None, None)


def test_the_apps_routes_answer_beside_the_api_by_their_own_rules(served: Any) -> None:
    client = served(app=f"{HERE / 'http_app.py'}:app")
    assert client.user_app.state.lifespan == ["started"]  # the app's lifespan runs with serve's
    r = client.get("/hello", headers=ALICE)
    assert r.status_code == 200, r.text
    assert r.json() == {"hello": "world", "user": "alice"}
    # refused without a token, as the API's own routes are when tokens are set
    r = client.get("/hello")
    assert r.status_code == 401, r.text
    assert client.get("/hello", headers={"Authorization": "Bearer wrong"}).status_code == 401
    # public: no token needed
    assert client.get("/ping").json() == {"pong": "yes"}
    # the app's own path parameters, body, errors and exception handlers
    r = client.post("/items/7", json={"a": 1}, headers=ALICE)
    assert r.json() == {"item_id": 7, "body": {"a": 1}}
    r = client.post("/items/404", json={}, headers=ALICE)
    assert (r.status_code, r.json()) == (404, {"detail": "no such item"})
    assert client.post("/items/418", json={}, headers=ALICE).status_code == 418
    assert client.post("/items/x", json={}, headers=ALICE).status_code == 422  # FastAPI's own
    assert client.post("/items/7", json={}).status_code == 401
    # the API is still there, and an app's route may take one of its paths...
    assert client.get("/info").json() == {"served_by": "the app"}
    assert client.post("/threads/search", json={}, headers=ALICE).status_code == 200
    # ...but not /ok (nor /ready, /metrics, /openapi.json, /docs)
    assert client.get("/ok").json() != {"served_by": "the app"}
    assert client.app.state.app_shadowed == ["GET '/ok'"]  # type: ignore[attr-defined]
    # /openapi.json lists the app's routes with the API's
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/hello", "/ping", "/items/{item_id}", "/threads/search"} <= set(paths)


def test_a_route_with_no_rule_is_refused_and_named_at_startup(served: Any) -> None:
    client = served(app=f"{HERE / 'http_app.py'}:app")
    assert client.app.state.app_refused == ["GET '/unruled'"]  # type: ignore[attr-defined]
    r = client.get("/unruled", headers=ALICE)
    assert r.status_code == 403
    assert "enable_custom_route_auth" in r.json()["detail"]


def test_enable_custom_route_auth_lets_any_signed_in_caller_in(served: Any) -> None:
    client = served(app=f"{HERE / 'http_app.py'}:app", enable_custom_route_auth=True)
    assert client.app.state.app_refused == []  # type: ignore[attr-defined]
    r = client.get("/unruled", headers=ALICE)
    assert r.json() == {"unruled": True, "user": "alice"}
    assert client.get("/unruled").status_code == 401
    assert client.get("/ping").status_code == 200  # its own rule still wins


def test_disable_flags_turn_the_api_groups_off(served: Any) -> None:
    client = served(**{f"disable_{group}": True for group in GROUPS})
    for method, path in [
        ("POST", "/assistants/search"),
        ("POST", "/threads/search"),
        ("POST", "/runs/crons/search"),
        ("POST", "/store/namespaces"),
        ("POST", "/mcp"),
        ("GET", "/info"),
        ("GET", "/metrics"),
        ("GET", "/openapi.json"),
    ]:
        r = client.request(method, path, headers=ALICE, json={})
        assert r.status_code in (404, 405), (method, path, r.status_code, r.text)
    assert client.get("/threads/some-thread", headers=ALICE).status_code == 404
    # /ok stays, as on LangGraph's server; longtask's own API too
    assert client.get("/ok").status_code == 200
    assert client.get("/api/threads", headers=ALICE).status_code == 200
    # one group off leaves the others
    other = served(disable_store=True)
    assert other.post("/store/namespaces", headers=ALICE, json={}).status_code in (404, 405)
    assert other.post("/threads/search", headers=ALICE, json={}).status_code == 200


def test_cors_settings_from_the_config(served: Any) -> None:
    page = "https://chat.example.com"
    preflight = {"Origin": page, "Access-Control-Request-Method": "POST"}
    default = served()
    r = default.options("/threads/search", headers=preflight)
    assert r.headers.get("access-control-allow-origin") != page
    client = served(cors={"allow_origins": [page], "max_age": 60})
    r = client.options("/threads/search", headers=preflight)
    assert r.status_code == 200, r.text
    assert r.headers["access-control-allow-origin"] == page
    assert r.headers["access-control-max-age"] == "60"


@pytest.mark.parametrize(
    ("http", "says"),
    [
        ({"app": "./nowhere.py:app"}, "no file"),
        ({"app": "no_colon"}, '"app" must name an app'),
        ({"app": f"{HERE / 'http_app.py'}:lifespan"}, "not a Starlette or FastAPI app"),
        ({"disable_threads": "yes"}, '"disable_threads" must be true or false'),
        ({"cors": {"allow_origins": "*"}}, "'allow_origins' must be a list"),
        ({"cors": {"origins": ["x"]}}, "no setting 'origins'"),
        ({"enable_custom_route_auth": 1}, "must be true or false"),
    ],
)
def test_bad_settings_are_refused_naming_the_fix(tmp_path: Path, http: Any, says: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        _settings(tmp_path, **http)
    assert says in str(caught.value)


def test_keys_not_carried_out_are_said(tmp_path: Path) -> None:
    settings = _settings(tmp_path, mount_prefix="/api", disable_meta=False)
    assert settings.notes == ['http "mount_prefix" is not carried out by longtask serve']
    assert settings.disabled == frozenset()
