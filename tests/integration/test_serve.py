"""The HTTP API of ``longtask serve`` on every backend, through Starlette's TestClient: reads,
actions acting as the token's name (and refused without a valid token, changing nothing),
and the SSE stream (every event once, in order, resumable with ``Last-Event-ID``)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel
from serve_access import AdminClient
from starlette.testclient import TestClient

from longtask import InvalidInput, LongTask, Runner, Stage, StepContext, approval, function_step
from longtask import wait_for as wait_for_step
from longtask.serve import create_app, is_loopback, run_server, tokens_from_env

TOKENS = {"tok-alice": "alice", "tok-bob": "bob", "tok-mallory": "mallory"}
ALICE = {"Authorization": "Bearer tok-alice"}
BOB = {"Authorization": "Bearer tok-bob"}
#: what a browser asks for: the page (other clients get the LangGraph API's thread)
BROWSER = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}
STEP = "ship_ok"


@function_step
def build(ctx: StepContext) -> dict[str, str]:
    ctx.artifact("notes.md", "# release notes\n", media_type="text/markdown")
    return {"artifact": "app-1.0.tar.gz"}


def release_plan(ctx: StepContext) -> dict[str, Any]:
    return {"artifact": ctx.result("build")["artifact"], "channel": "stable"}


@function_step
def publish(ctx: StepContext) -> str:
    return f"published {ctx.result('build')['artifact']} for {ctx.result(STEP)['by']}"


RELEASE = LongTask(
    "serve_release",
    stages=[
        Stage("prepare", [build]),
        Stage("approve", [approval(STEP, plan=release_plan, approvers=["alice", "bob", "api"])]),
        Stage("ship", [publish]),
    ],
)


#: the file the gated step waits for (set by the test that uses it)
GATE: dict[str, Path] = {}


@function_step
def gated(ctx: StepContext) -> str:
    deadline = time.monotonic() + 20
    while not GATE["path"].exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return "through the gate" if GATE["path"].exists() else "the gate never opened"


GATED = LongTask(
    "serve_gated",
    stages=[
        Stage("approve", [approval("go", plan=lambda ctx: {"go": 1}, approvers=["alice"])]),
        Stage("work", [gated]),
    ],
)


class CiResult(BaseModel):
    status: Literal["passed", "failed"]


@function_step
def after_ci(ctx: StepContext) -> str:
    return ctx.result("ci", CiResult).status


CI = LongTask(
    "serve_ci",
    stages=[Stage("ci", [wait_for_step("ci", schema=CiResult)]), Stage("done", [after_ci])],
)


@pytest.fixture
def runner(db_url: str) -> Iterator[Runner]:
    r = Runner(db_url)
    yield r
    r.close()


@pytest.fixture
def client(runner: Runner) -> Iterator[TestClient]:
    with AdminClient(create_app(runner, TOKENS, poll=0.02)) as c:
        yield c


def paused(runner: Runner, thread: str = "rel-1") -> str:
    runner.start(RELEASE, {}, thread_id=thread)
    assert runner.status(thread).status == "waiting_user"
    return thread


def carried_out(runner: Runner, response: Any) -> str:
    """An action answers 202 at once with the run serve's executor carries it out in; wait
    for that run to finish, and return the thread's status then."""
    assert response.status_code == 202, response.text
    run_id = response.json()["run_id"]
    deadline = time.monotonic() + 60
    while True:
        run = runner.db.store.api_run(run_id)
        assert run is not None
        if run.status in ("success", "error", "interrupted"):
            return runner.status(response.json()["thread_id"]).status
        assert time.monotonic() < deadline, f"run {run_id} did not finish"
        time.sleep(0.02)


def snapshot(runner: Runner, thread: str) -> tuple[Any, ...]:
    """What an action must not change when it is refused."""
    st = runner.status(thread)
    return (st.status, st.checkpoint_id, st.runs, st.waiting, len(runner.events(thread)))


def plan_hash(client: TestClient, thread: str) -> str:
    items = client.get(f"/api/threads/{thread}/pending").json()
    return str(items[0]["request"]["plan_hash"])


# -- reads -----------------------------------------------------------------------------------


def test_reads_return_status_pending_events_and_threads(runner: Runner, client: TestClient) -> None:
    thread = paused(runner)
    status = client.get(f"/api/threads/{thread}")
    assert status.status_code == 200
    body = status.json()
    assert (body["thread_id"], body["task_name"], body["status"]) == (
        thread,
        "serve_release",
        "waiting_user",
    )
    assert [(s["name"], s["state"]) for s in body["steps"]] == [
        ("build", "completed"),
        (STEP, "waiting"),
        ("publish", "pending"),
    ]

    pending = client.get(f"/api/threads/{thread}/pending").json()
    assert [(p["step"], p["kind"]) for p in pending] == [(STEP, "approval")]
    assert pending[0]["request"]["plan"] == {"artifact": "app-1.0.tar.gz", "channel": "stable"}
    assert pending[0]["request"]["plan_hash"] == runner.pending(thread)[0].request["plan_hash"]

    events = client.get(f"/api/threads/{thread}/events").json()
    assert events == [e.to_json() for e in runner.events(thread)]
    assert events[0]["kind"] == "longtask.started"
    assert events[-1]["kind"] == "approval.required"
    ids = [e["id"] for e in events]
    assert ids == sorted(set(ids))
    later = client.get(f"/api/threads/{thread}/events", params={"since": ids[2]}).json()
    assert [e["id"] for e in later] == ids[3:]
    kinds = client.get(
        f"/api/threads/{thread}/events", params={"kind": "stage.started,approval.required"}
    ).json()
    assert [e["kind"] for e in kinds] == ["stage.started", "stage.started", "approval.required"]

    listed = client.get("/api/threads", params={"status": "waiting_user"}).json()
    assert [t["thread_id"] for t in listed] == [thread]
    assert client.get("/api/threads", params={"status": "completed"}).json() == []


def test_unknown_threads_and_bad_parameters_are_json_errors(
    runner: Runner, client: TestClient
) -> None:
    paused(runner)
    for path in ("", "/pending", "/events", "/events/stream", "/artifacts"):
        r = client.get(f"/api/threads/nope{path}")
        assert r.status_code == 404, path
        assert "no thread 'nope'" in r.json()["error"]
    r = client.post("/api/threads/nope/approve", headers=ALICE)
    assert (r.status_code, "no thread 'nope'" in r.json()["error"]) == (404, True)
    assert client.get("/api/threads/rel-1/events", params={"since": "x"}).status_code == 400
    assert client.get("/api/threads", params={"limit": "0"}).status_code == 400
    r = client.get("/api/threads/rel-1/events/stream", headers={"Last-Event-ID": "abc"})
    assert r.status_code == 400
    assert "Last-Event-ID" in r.json()["error"]


def test_artifacts_are_listed_and_served_with_their_media_type(
    runner: Runner, client: TestClient
) -> None:
    thread = paused(runner)
    listed = client.get(f"/api/threads/{thread}/artifacts").json()
    assert [(a["name"], a["media_type"]) for a in listed] == [("notes.md", "text/markdown")]
    got = client.get(f"/api/threads/{thread}/artifacts/notes.md")
    assert got.status_code == 200
    assert got.content == b"# release notes\n"
    assert got.headers["content-type"].startswith("text/markdown")
    # A step's content must not run script with the page's origin.
    assert got.headers["content-security-policy"] == "sandbox"
    missing = client.get(f"/api/threads/{thread}/artifacts/other.txt")
    assert missing.status_code == 404
    assert "other.txt" in missing.json()["error"]


# -- actions ---------------------------------------------------------------------------------


def test_approve_continues_the_thread_as_the_tokens_name(
    runner: Runner, client: TestClient
) -> None:
    thread = paused(runner)
    shown = plan_hash(client, thread)
    r = client.post(
        f"/api/threads/{thread}/approve",
        json={"step": STEP, "plan_hash": shown, "comment": "ship it"},
        headers=ALICE,
    )
    assert carried_out(runner, r) == "completed"
    resolved = runner.events(thread, kinds=["approval.resolved"])
    assert [(e.data["outcome"], e.data["by"], e.data["comment"]) for e in resolved] == [
        ("approved", "alice", "ship it")
    ]
    decision = runner.result(thread, STEP)
    assert (decision["by"], decision["plan_hash"]) == ("alice", shown)
    assert runner.result(thread, "publish") == "published app-1.0.tar.gz for alice"


def test_approve_answers_before_the_next_step_runs(
    runner: Runner, client: TestClient, tmp_path: Path
) -> None:
    # The step after the approval waits for a gate the test opens only after the answer:
    # were the step run inside the request, the request could not answer first.
    GATE["path"] = tmp_path / "gate"
    runner.start(GATED, {}, thread_id="gated-1")
    r = client.post("/api/threads/gated-1/approve", headers=ALICE)
    assert r.status_code == 202, r.text
    assert not GATE["path"].exists()
    assert runner.db.store.api_run(r.json()["run_id"]) is not None
    GATE["path"].write_text("open")
    assert carried_out(runner, r) == "completed"
    assert runner.result("gated-1", "gated") == "through the gate"


def test_reject_fails_the_thread_as_the_tokens_name(runner: Runner, client: TestClient) -> None:
    thread = paused(runner)
    r = client.post(f"/api/threads/{thread}/reject", json={"comment": "not now"}, headers=BOB)
    assert carried_out(runner, r) == "failed"
    resolved = runner.events(thread, kinds=["approval.resolved"])
    assert [(e.data["outcome"], e.data["by"]) for e in resolved] == [("rejected", "bob")]


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        ({"plan_hash": "0123456789abcdef"}, 409, "approves plan 0123456789abcdef"),
        ({"step": "publish"}, 409, "'publish' of thread 'rel-1' is not waiting"),
        ({"by": "bob"}, 400, "'by' is not accepted"),
        ({"approver": "bob"}, 400, "approver"),
        ({"comment": 3}, 400, "comment"),
    ],
)
def test_bad_decisions_are_refused_and_change_nothing(
    runner: Runner, client: TestClient, body: dict[str, Any], status: int, fragment: str
) -> None:
    thread = paused(runner)
    before = snapshot(runner, thread)
    r = client.post(f"/api/threads/{thread}/approve", json=body, headers=ALICE)
    assert r.status_code == status, r.text
    assert fragment in r.json()["error"]
    assert snapshot(runner, thread) == before


def test_a_token_whose_name_may_not_approve_is_refused(runner: Runner, client: TestClient) -> None:
    thread = paused(runner)
    before = snapshot(runner, thread)
    r = client.post(
        f"/api/threads/{thread}/approve", headers={"Authorization": "Bearer tok-mallory"}
    )
    assert r.status_code == 409
    assert "'mallory' may not decide" in r.json()["error"]
    assert snapshot(runner, thread) == before


def test_malformed_bodies_are_400(runner: Runner, client: TestClient) -> None:
    thread = paused(runner)
    before = snapshot(runner, thread)
    for content in (b"{", b"[1]", b'"x"'):
        r = client.post(f"/api/threads/{thread}/approve", content=content, headers=ALICE)
        assert r.status_code == 400, content
    huge = b'{"comment": "' + b"x" * (1024 * 1024) + b'"}'
    r = client.post(f"/api/threads/{thread}/approve", content=huge, headers=ALICE)
    assert r.status_code == 413
    assert snapshot(runner, thread) == before


ACTIONS = {
    "approve": {"comment": "x"},
    "reject": {"comment": "x"},
    "signal": {"name": "ci", "payload": {"status": "passed"}},
    "cancel": {"reason": "x"},
}
BAD_AUTH = {
    "no token": {},
    "wrong token": {"Authorization": "Bearer tok-alicex"},
    "empty bearer": {"Authorization": "Bearer "},
    "basic scheme": {"Authorization": "Basic dG9rLWFsaWNlOg=="},
    "token without scheme": {"Authorization": "tok-alice"},
}


@pytest.mark.parametrize("auth", list(BAD_AUTH))
@pytest.mark.parametrize("action", list(ACTIONS))
def test_every_action_needs_a_valid_token(
    runner: Runner, client: TestClient, action: str, auth: str
) -> None:
    thread = paused(runner)
    before = snapshot(runner, thread)
    plain = TestClient(client.app)  # without the fixture's default token
    r = plain.post(f"/api/threads/{thread}/{action}", json=ACTIONS[action], headers=BAD_AUTH[auth])
    assert r.status_code == 401, r.text
    assert r.headers["www-authenticate"].startswith("Bearer")
    assert "token" in r.json()["error"]
    assert "tok-alice" not in r.text
    assert snapshot(runner, thread) == before


def test_signal_delivers_the_payload_and_checks_its_schema(
    runner: Runner, client: TestClient
) -> None:
    runner.start(CI, {}, thread_id="ci-1")
    before = snapshot(runner, "ci-1")
    bad = client.post(
        "/api/threads/ci-1/signal", json={"name": "ci", "payload": {"status": "meh"}}, headers=BOB
    )
    assert bad.status_code == 409
    assert "does not match CiResult" in bad.json()["error"]
    assert snapshot(runner, "ci-1") == before
    no_name = client.post("/api/threads/ci-1/signal", json={"payload": {}}, headers=BOB)
    assert (no_name.status_code, "name" in no_name.json()["error"]) == (400, True)

    passed = {"name": "ci", "payload": {"status": "passed"}}
    ok = client.post("/api/threads/ci-1/signal", json=passed, headers=BOB)
    assert carried_out(runner, ok) == "completed"
    assert runner.result("ci-1", "after_ci") == "passed"
    # The event is recorded as delivered by the token's name.
    (resolved,) = runner.events("ci-1", kinds=["wait.resolved"])
    assert resolved.data == {"payload": {"status": "passed"}, "by": "bob"}


def test_cancel_is_recorded_as_the_tokens_name(runner: Runner, client: TestClient) -> None:
    thread = paused(runner)
    r = client.post(f"/api/threads/{thread}/cancel", json={"reason": "wrong week"}, headers=BOB)
    assert carried_out(runner, r) == "cancelled"
    [event] = runner.events(thread, kinds=["manual.cancel"])
    assert (event.data["by"], event.data["reason"]) == ("bob", "wrong week")
    again = client.post(f"/api/threads/{thread}/cancel", headers=BOB)
    assert again.status_code == 409


# -- the event stream ------------------------------------------------------------------------


def sse_items(response: Any) -> Iterator[dict[str, Any]]:
    """Server-Sent Events of a streamed response as they arrive: ``{"id", "event",
    "data"}``, and comments as ``{"comment": text}``."""
    fields: dict[str, Any] = {}
    for line in response.iter_lines():
        if line.startswith(":"):
            yield {"comment": line[1:].strip()}
        elif line == "":
            if "data" in fields:
                yield {**fields, "id": int(fields["id"]), "data": json.loads(fields["data"])}
            fields = {}
        else:
            key, _, value = line.partition(":")
            fields[key] = value[1:] if value.startswith(" ") else value


def sse(response: Any, limit: int | None = None) -> list[dict[str, Any]]:
    """The events of a stream (a response, or the iterator of :func:`sse_items` to go on
    reading one), until it ends or ``limit`` events were read."""
    out: list[dict[str, Any]] = []
    items = response if isinstance(response, Iterator) else sse_items(response)
    for item in items:
        if "id" in item:
            out.append(item)
            if limit is not None and len(out) >= limit:
                break
    return out


def completed(runner: Runner, client: TestClient) -> str:
    thread = paused(runner)
    r = client.post(f"/api/threads/{thread}/approve", headers=ALICE)
    assert carried_out(runner, r) == "completed"
    return thread


def test_stream_of_a_completed_thread_sends_every_event_in_order_then_ends(
    runner: Runner, client: TestClient
) -> None:
    thread = completed(runner, client)
    stored = [e.to_json() for e in runner.events(thread)]
    with client.stream("GET", f"/api/threads/{thread}/events/stream") as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        got = sse(r)
    assert [(e["id"], e["event"]) for e in got] == [(e["id"], e["kind"]) for e in stored]
    assert [e["data"] for e in got] == stored
    assert got[-1]["event"] == "longtask.completed"


@pytest.mark.parametrize("k", [1, 4, 9])
def test_reconnecting_with_last_event_id_sends_exactly_the_missed_events(
    runner: Runner, client: TestClient, k: int
) -> None:
    thread = completed(runner, client)
    stored = [e.id for e in runner.events(thread)]
    url = f"/api/threads/{thread}/events/stream"
    with client.stream("GET", url) as r:
        first = sse(r, limit=k)  # then disconnect
    assert [e["id"] for e in first] == stored[:k]
    # ?since= is the first URL's; the header (what a browser sends on reconnect) wins.
    headers = {"Last-Event-ID": str(first[-1]["id"])}
    with client.stream("GET", url, params={"since": 0}, headers=headers) as r:
        rest = sse(r)
    assert [e["id"] for e in first + rest] == stored
    with client.stream("GET", url, params={"since": stored[k - 1]}) as r:
        assert [e["id"] for e in sse(r)] == stored[k:]


def test_stream_of_a_paused_thread_stays_open_and_delivers_new_events_live(
    runner: Runner, client: TestClient
) -> None:
    thread = paused(runner)
    before = [e.id for e in runner.events(thread)]
    answers: list[int] = []

    def approve() -> None:
        answers.append(client.post(f"/api/threads/{thread}/approve", headers=ALICE).status_code)

    approver = threading.Thread(target=approve)
    with client.stream("GET", f"/api/threads/{thread}/events/stream") as r:
        items = sse_items(r)
        got = sse(items, limit=len(before))
        assert [e["id"] for e in got] == before
        # The stream is still open: the approval's events arrive on it, then it ends.
        approver.start()
        got += sse(items)
    approver.join(60)
    assert answers == [202]
    stored = [(e.id, e.kind) for e in runner.events(thread)]
    assert [(e["id"], e["event"]) for e in got] == stored
    live = [e["event"] for e in got[len(before) :]]
    assert live.count("approval.resolved") == 1
    assert live[-1] == "longtask.completed"


def test_an_idle_stream_sends_heartbeats(runner: Runner) -> None:
    thread = paused(runner)
    app = create_app(runner, TOKENS, poll=0.02, heartbeat=0.1)
    # Without heartbeats the stream would never end: cancelling the thread ends it, and the
    # test fails instead of hanging.
    watchdog = threading.Timer(30, lambda: runner.cancel(thread, reason="watchdog"))
    watchdog.start()
    try:
        with (
            AdminClient(app) as client,
            client.stream("GET", f"/api/threads/{thread}/events/stream") as r,
        ):
            items: list[dict[str, Any]] = []
            for item in sse_items(r):
                items.append(item)
                if item.get("comment") == "heartbeat":
                    break
    finally:
        watchdog.cancel()
    assert items[-1] == {"comment": "heartbeat"}
    assert [i["event"] for i in items if "id" in i][-1] == "approval.required"


# -- exposure --------------------------------------------------------------------------------


def test_closed_reads_need_a_token(runner: Runner) -> None:
    thread = paused(runner)
    app = create_app(runner, TOKENS, roles={"alice": "admin"}, poll=0.02)
    with TestClient(app) as client:
        for path in ("/api/threads", f"/api/threads/{thread}", f"/api/threads/{thread}/pending"):
            assert client.get(path).status_code == 401, path
            assert client.get(path, headers=ALICE).status_code == 200, path
        # The page's download links: the artifact's bytes, under the same token.
        notes = f"/api/threads/{thread}/artifacts/notes.md"
        assert client.get(notes).status_code == 401
        assert client.get(notes, headers=ALICE).content == b"# release notes\n"
        stream = f"/api/threads/{thread}/events/stream"
        assert client.get(stream).status_code == 401
        with client.stream("GET", stream, params={"access_token": "tok-alice"}) as r:
            assert r.status_code == 200
            assert sse(r, limit=1)[0]["event"] == "longtask.started"
        # The pages hold no data, and tell the script that reads need the token.
        page = client.get(f"/threads/{thread}", headers=BROWSER)
        assert page.status_code == 200
        assert '"readsNeedToken": true' in page.text
        # Not a browser: the LangGraph Server API's thread, which needs the token too.
        assert client.get(f"/threads/{thread}").status_code == 401
        as_sdk = client.get(f"/threads/{thread}", headers={"X-Api-Key": "tok-alice"})
        assert as_sdk.json()["status"] == "interrupted"


def test_loopback_server_refuses_other_host_names(runner: Runner) -> None:
    app = create_app(runner, TOKENS, loopback_hosts_only=True)
    with AdminClient(app, base_url="http://127.0.0.1:8765") as client:
        assert client.get("/api/threads").status_code == 200
        assert client.get("/api/threads", headers={"Host": "localhost:8765"}).status_code == 200
        assert client.get("/api/threads", headers={"Host": "[::1]:8765"}).status_code == 200
        rebound = client.get("/api/threads", headers={"Host": "evil.example:8765"})
        assert rebound.status_code == 421
        # Issue 28, item 12: what follows the last colon is no port, so no loopback name.
        for forged in ("127.0.0.1:80@evil.example", "[::1]@evil.example", "[::1]:x.evil"):
            assert client.get("/api/threads", headers={"Host": forged}).status_code == 421


def test_the_page_escapes_the_thread_id_and_sets_a_nonce_policy(runner: Runner) -> None:
    with TestClient(create_app(runner, {})) as client:  # open mode: the page says what exists
        page = client.get("/threads/%3Cscript%3Ealert(1)%3C", headers=BROWSER)
        assert page.status_code == 404
        assert "<script>alert(1)" not in page.text
        policy = page.headers["content-security-policy"]
        assert "script-src 'nonce-" in policy and "unsafe-inline" not in policy
        home = client.get("/")
        assert home.status_code == 200 and "longtask threads" in home.text


def test_the_page_of_a_missing_thread_says_so(runner: Runner) -> None:
    runner.start(CI, {}, thread_id="ci-here")
    with TestClient(create_app(runner, {})) as client:  # open mode
        assert client.get("/threads/ci-here", headers=BROWSER).status_code == 200
        page = client.get("/threads/nope", headers=BROWSER)
        assert page.status_code == 404
        assert "no such thread" in page.text
    # With closed reads the page does not tell, without a token, which threads exist: it
    # asks the API with the token it is given.
    with TestClient(create_app(runner, TOKENS)) as client:
        assert client.get("/threads/nope", headers=BROWSER).status_code == 200


def test_run_server_refuses_a_public_host_without_a_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("LONGTASK_API_TOKEN", "LONGTASK_API_TOKENS"):
        monkeypatch.delenv(name, raising=False)
    for host in ("0.0.0.0", "192.168.1.10", "example.com", "::"):
        with pytest.raises(InvalidInput, match="LONGTASK_API_TOKEN"):
            run_server(host, 0, "sqlite:///nowhere/never-opened.db")
        with pytest.raises(InvalidInput, match="LONGTASK_API_TOKEN"):
            run_server(host, 0, "sqlite:///nowhere/never-opened.db", tokens={})


def test_tokens_from_the_environment() -> None:
    env = {"LONGTASK_API_TOKENS": "alice=tok1, bob=tok2,", "LONGTASK_API_TOKEN": "tok3"}
    assert tokens_from_env(env) == {"tok1": "alice", "tok2": "bob", "tok3": "api"}
    env["LONGTASK_API_USER"] = "ci-bot"
    assert tokens_from_env(env)["tok3"] == "ci-bot"
    assert tokens_from_env({}) == {}
    with pytest.raises(InvalidInput, match="entry 2") as exc:
        tokens_from_env({"LONGTASK_API_TOKENS": "alice=tok1,secret-without-name"})
    assert "secret-without-name" not in str(exc.value)
    with pytest.raises(InvalidInput, match="same API token"):
        tokens_from_env({"LONGTASK_API_TOKENS": "alice=tok1,bob=tok1"})


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("localhost", True),
        ("::1", True),
        ("[::1]", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.1", False),
        ("localhost.example.com", False),
    ],
)
def test_loopback_hosts(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_an_answer_to_a_thread_served_by_workers_is_queued_for_them(pg_url: str) -> None:
    from longtask.runtime._queue import serve_thread

    with Runner(pg_url) as caller, Runner(pg_url, worker="w-test") as worker:
        thread = caller.submit(RELEASE, {}, thread_id="rel-w", task_ref="test_serve:RELEASE")
        serve_thread(worker, thread)
        assert caller.status(thread).status == "waiting_user"
        with AdminClient(create_app(caller, TOKENS)) as client:
            r = client.post(f"/api/threads/{thread}/approve", headers=ALICE)
            assert r.status_code == 202, r.text
            assert r.json()["run_id"] is None  # not serve's to carry out
            assert caller.db.store.inbox_peek(thread)
            assert caller.db.store.api_runs(thread) == []
        serve_thread(worker, thread)
        assert caller.status(thread).status == "completed"
        assert caller.result(thread, STEP)["by"] == "alice"
