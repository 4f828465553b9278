"""The request body limit (issue 52 item 6), one bound in front of every route: a body over
``create_app(max_body=...)`` (``serve --max-body``, ``$LONGTASK_MAX_BODY``) is a 413 that
names the limit and how to raise it, on routes that read their body in different ways (the
JSON API, the Server API, the store, A2A's JSON-RPC), whether the client says its length
or streams it; a body within the limit is taken; nothing is stored by a refused one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from longtask import Runner
from longtask.errors import InvalidInput
from longtask.serve import create_app
from longtask.serve._json_body import MAX_BODY, parse_size

LIMIT = 2048
ALICE = {"Authorization": "Bearer tok-alice"}
ROUTES = [
    ("POST", "/threads"),
    ("POST", "/threads/search"),
    ("PUT", "/store/items"),
    ("POST", "/a2a/some-assistant"),
    ("POST", "/api/threads/no-thread/approve"),
]


@pytest.fixture
def client(runner: Runner) -> Iterator[TestClient]:
    app = create_app(runner, {"tok-alice": "alice"}, schedule_poll=None, max_body=LIMIT)
    with TestClient(app, headers=ALICE) as c:
        yield c


def _body(size: int) -> bytes:
    pad = size - len(b'{"metadata": {"pad": ""}}')
    return b'{"metadata": {"pad": "' + b"x" * pad + b'"}}'


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_a_body_over_the_limit_is_413_on_every_route(
    client: TestClient, runner: Runner, method: str, path: str
) -> None:
    before = [t.thread_id for t in runner.threads()]
    r = client.request(method, path, content=_body(LIMIT + 1))
    assert r.status_code == 413, r.text
    assert f"({LIMIT} bytes)" in r.json()["detail"] and "--max-body" in r.json()["detail"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        body = _body(LIMIT + 1)
        yield body[:1000]
        yield body[1000:]

    r = client.request(method, path, content=chunks())
    assert r.status_code == 413, r.text
    assert [t.thread_id for t in runner.threads()] == before


def test_a_body_within_the_limit_is_taken(client: TestClient) -> None:
    r = client.post("/threads", content=_body(LIMIT))
    assert r.status_code == 200, r.text
    assert len(r.json()["metadata"]["pad"]) > LIMIT - 100


def test_sizes_are_read_with_their_units() -> None:
    assert parse_size("1048576") == MAX_BODY == parse_size("1MiB") == parse_size(" 1 mib ")
    assert parse_size("512KiB") == 512 * 1024
    assert parse_size("2MB") == 2_000_000
    for bad in ("", "0", "-1", "1.5MiB", "lots", "4 TiB"):
        with pytest.raises(InvalidInput, match="KiB, MiB or GiB"):
            parse_size(bad)
