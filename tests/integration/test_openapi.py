"""``GET /openapi.json`` (issue 52 item 6): an OpenAPI 3 document, public as LangGraph's
server's is, that lists every route the server serves (each path and method, enumerated
from the app itself) and nothing it does not (the unserved endpoints of LangGraph's API,
answered with what to use instead, are not listed)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from openapi_spec_validator import validate
from starlette.routing import Route
from starlette.testclient import TestClient

from longtask import Runner
from longtask.serve import create_app
from longtask.serve.lgapi import _unserved


@pytest.fixture
def client(runner: Runner) -> Iterator[TestClient]:
    app = create_app(runner, {"tok-alice": "alice"}, schedule_poll=None)
    with TestClient(app) as c:
        yield c


def _operations(routes: list[Route]) -> set[tuple[str, str]]:
    return {
        (method.lower(), re.sub(r"\{(\w+):\w+\}", r"{\1}", r.path))
        for r in routes
        for method in (r.methods or {"GET"}) - {"HEAD"}
    }


def test_openapi_json_describes_every_served_route_and_validates(client: TestClient) -> None:
    r = client.get("/openapi.json")  # no token: public
    assert r.status_code == 200, r.text
    spec = r.json()
    validate(spec)  # raises on a document that is not OpenAPI 3.1
    assert spec["openapi"].startswith("3.")
    listed = {(m, p) for p, ops in spec["paths"].items() for m in ops}
    routes = [x for x in client.app.routes if isinstance(x, Route)]  # type: ignore[attr-defined]
    unserved = _operations(_unserved.routes())
    served = _operations(routes) - unserved
    assert len(served) > 80
    assert listed == served, (sorted(served - listed), sorted(listed - served))
    ids = [op["operationId"] for ops in spec["paths"].values() for op in ops.values()]
    assert len(ids) == len(set(ids)), "operationIds must be unique"
    # every path parameter is declared
    for path, ops in spec["paths"].items():
        for op in ops.values():
            named = {p["name"] for p in op.get("parameters", [])}
            assert named == set(re.findall(r"\{(\w+)\}", path)), (path, named)
    assert ("get", "/openapi.json") in listed
    assert ("get", "/docs") not in listed  # unserved: answered with where the docs are
