"""Browser pages on other origins (Agent Chat UI on localhost:3000, a useStream app) may
call ``longtask serve``: CORS answers for loopback origins by default, for the configured
ones otherwise, never for others; tokens are required as before."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from longtask import InvalidInput, Runner
from longtask.serve import create_app
from longtask.serve._cors import cors_origins_from_env

TOKENS = {"tok-alice": "alice"}
PREFLIGHT = {
    "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "authorization,content-type",
}


@pytest.fixture
def runner(sqlite_url: str) -> Iterator[Runner]:
    with Runner(sqlite_url) as r:
        yield r


def _client(runner: Runner, **kw: Any) -> TestClient:
    return TestClient(create_app(runner, TOKENS, schedule_poll=None, **kw))


@pytest.mark.parametrize(
    "origin", ["http://localhost:3000", "http://127.0.0.1:5173", "https://[::1]:8443"]
)
def test_loopback_pages_may_call_by_default(runner: Runner, origin: str) -> None:
    with _client(runner) as client:
        pre = client.options("/info", headers={"Origin": origin, **PREFLIGHT})
        assert pre.status_code == 200, pre.text
        assert pre.headers["access-control-allow-origin"] == origin
        assert "POST" in pre.headers["access-control-allow-methods"]
        assert "authorization" in pre.headers["access-control-allow-headers"].lower()
        got = client.get("/info", headers={"Origin": origin})
        assert got.status_code == 200
        assert got.headers["access-control-allow-origin"] == origin
        assert "Content-Location" in got.headers["access-control-expose-headers"]
        # not with credentials: tokens go in a header
        assert "access-control-allow-credentials" not in got.headers


@pytest.mark.parametrize(
    "origin", ["https://evil.example", "http://localhost.evil.example", "http://127.0.0.1.nip.io"]
)
def test_other_pages_get_no_cors_answer(runner: Runner, origin: str) -> None:
    with _client(runner) as client:
        pre = client.options("/info", headers={"Origin": origin, **PREFLIGHT})
        assert pre.status_code == 400
        assert "access-control-allow-origin" not in pre.headers
        got = client.get("/info", headers={"Origin": origin})
        assert "access-control-allow-origin" not in got.headers


def test_configured_origins_replace_the_default(runner: Runner) -> None:
    with _client(runner, cors_origins=["https://chat.example.com"]) as client:
        ok = client.get("/info", headers={"Origin": "https://chat.example.com"})
        assert ok.headers["access-control-allow-origin"] == "https://chat.example.com"
        local = client.get("/info", headers={"Origin": "http://localhost:3000"})
        assert "access-control-allow-origin" not in local.headers
    with _client(runner, cors_origins=["*"]) as client:
        anyone = client.get("/info", headers={"Origin": "https://anywhere.example"})
        assert anyone.headers["access-control-allow-origin"] == "*"
    with _client(runner, cors_origins=["none"]) as client:
        pre = client.options("/info", headers={"Origin": "http://localhost:3000", **PREFLIGHT})
        assert "access-control-allow-origin" not in pre.headers
        assert pre.status_code == 405


def test_an_allowed_page_still_needs_a_token_to_act(runner: Runner) -> None:
    origin = {"Origin": "http://localhost:3000"}
    with _client(runner) as client:
        refused = client.post("/api/threads/nope/approve", json={}, headers=origin)
        assert refused.status_code == 401
        # the page can read why
        assert refused.headers["access-control-allow-origin"] == "http://localhost:3000"
        found = client.post(
            "/api/threads/nope/approve",
            json={},
            headers={**origin, "Authorization": "Bearer tok-alice"},
        )
        assert found.status_code == 404, found.text


def test_a_malformed_origin_is_refused_with_the_fix(runner: Runner) -> None:
    with pytest.raises(InvalidInput, match=r"not an origin: 'localhost:3000'.*scheme://host"):
        create_app(runner, TOKENS, schedule_poll=None, cors_origins=["localhost:3000"])
    with pytest.raises(InvalidInput, match="none cannot be combined"):
        create_app(runner, TOKENS, schedule_poll=None, cors_origins=["none", "*"])
    assert cors_origins_from_env({"LONGTASK_CORS_ORIGINS": " http://a:1, ,https://b "}) == [
        "http://a:1",
        "https://b",
    ]
    assert cors_origins_from_env({}) is None


def test_serve_refuses_a_bad_origin_before_it_starts(sqlite_url: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "longtask", "serve", "--cors-origin", "http://x/path"],
        env={**os.environ, "LONGTASK_DB": sqlite_url},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "not an origin: 'http://x/path'" in proc.stderr
    assert "serving on" not in proc.stdout


@pytest.mark.parametrize("env_origins", [None, "bad origin"])
def test_serve_off_loopback_without_a_token_refuses_before_saying_it_serves(
    sqlite_url: str, env_origins: str | None
) -> None:
    """Issue 29, point 7: nothing misleading before the refusal, whatever refuses."""
    env = {**os.environ, "LONGTASK_DB": sqlite_url}
    for name in ("LONGTASK_API_TOKEN", "LONGTASK_API_TOKENS", "LONGTASK_CORS_ORIGINS"):
        env.pop(name, None)
    if env_origins:
        env["LONGTASK_CORS_ORIGINS"] = env_origins
    proc = subprocess.run(
        [sys.executable, "-m", "longtask", "serve", "--host", "0.0.0.0", "--port", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.startswith("error: ")
    assert ("not an origin" if env_origins else "without an API token") in proc.stderr
