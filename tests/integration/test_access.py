"""Who may see and do what in ``longtask serve`` (issue 41), on both backends.

Every route of the app is enumerated (none is listed here) and called by alice (a user who
owns thread A), bob (a user who owns thread B), an admin, a viewer and an unknown token.
A refused request gets the gate's 401, 404 or 403 and writes nothing (every table is
compared before and after); an allowed one reaches its handler. Actions are sent a body
their handler refuses (a JSON array), so an allowed action writes nothing either.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.routing import Route
from starlette.testclient import TestClient

from longtask import LongTask, Runner, Stage, StepContext, approval, function_step
from longtask.serve import create_app
from longtask.serve._registry import load_registry
from longtask.serve.access import Rule, rule_of

TOKENS = {
    "tok-alice": "alice",
    "tok-bob": "bob",
    "tok-carol": "carol",
    "tok-root": "root-admin",
    "tok-vera": "vera",
}
ROLES = {"root-admin": "admin", "vera": "viewer"}
CALLERS = {
    "alice": {"Authorization": "Bearer tok-alice"},
    "bob": {"Authorization": "Bearer tok-bob"},
    "admin": {"Authorization": "Bearer tok-root"},
    "viewer": {"Authorization": "Bearer tok-vera"},
    "unknown": {"Authorization": "Bearer tok-nobody"},
}
CAROL = {"Authorization": "Bearer tok-carol"}
#: POST routes that only read (LangGraph's searches, counts and state reads)
READS_BY_POST = (
    "/search",
    "/count",
    "/history",
    "/state/checkpoint",
    "/store/namespaces",
    "/versions",
)


@function_step
def prepare(ctx: StepContext) -> str:
    ctx.artifact("notes.md", "# notes\n", media_type="text/markdown")
    return "prepared"


@function_step
def finish(ctx: StepContext) -> str:
    return "finished"


TASK = LongTask(
    "access_task",
    stages=[
        Stage("prepare", [prepare]),
        Stage("ok", [approval("ok", plan=lambda ctx: {"go": 1}, approvers=["carol"])]),
        Stage("finish", [finish]),
    ],
)

#: a task whose approval names bob only
OTHER = LongTask(
    "access_other",
    stages=[
        Stage("prepare", [prepare]),
        Stage("ok", [approval("ok", plan=lambda ctx: {"go": 1}, approvers=["bob"])]),
    ],
)


@pytest.fixture
def runner(db_url: str) -> Iterator[Runner]:
    r = Runner(db_url)
    yield r
    r.close()


@pytest.fixture
def client(runner: Runner) -> Iterator[TestClient]:
    app = create_app(
        runner,
        TOKENS,
        roles=ROLES,
        registry=load_registry(["test_access:TASK"]),
        schedule_poll=None,
        poll=0.02,
    )
    with TestClient(app) as c:
        yield c


def tables(runner: Runner) -> dict[str, list[str]]:
    """Every row of every table (longtask's and the checkpoints'), to compare."""
    store = runner.db.store
    if runner.db.url.scheme == "postgresql":
        names = store._run(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()", ()
        )
    else:
        names = store._run("SELECT name FROM sqlite_master WHERE type = 'table'", ())
    out = {}
    for (name,) in names:
        rows = store._run(f"SELECT * FROM {name}", ())
        out[str(name)] = sorted(repr(tuple(r)) for r in rows)
    return out


def concrete(path: str, thread: str, checkpoint: str) -> str:
    return (
        path.replace("{thread_id}", thread)
        .replace("{run_id}", "no-such-run")
        .replace("{assistant_id}", "access_task")
        .replace("{checkpoint_id}", checkpoint)
        .replace("{name:path}", "notes.md")
        .replace("{cron_id}", "no-such-cron")
        .replace("{namespace}", "no-such-step")
    )


def writes(method: str, path: str) -> bool:
    return method not in ("GET", "HEAD") and not path.endswith(READS_BY_POST)


def expected(rule: Rule, caller: str, has_thread: bool) -> int | None:
    """The gate's answer to ``caller`` on a route with ``rule`` (None: let through)."""
    if rule is Rule.PUBLIC:
        return None
    if caller == "unknown":
        return 401
    if rule is Rule.EVERYTHING:
        return None if caller in ("admin", "viewer") else 403
    if rule is Rule.SIGNED_IN:
        return None
    # COPY reads the thread in one's own right and creates one: the owner and admins copy
    acting = rule in (Rule.ACT, Rule.ANSWER, Rule.COPY)
    if caller == "bob" and has_thread:
        return 404  # thread A is alice's, and its pause does not name bob
    if caller == "viewer" and acting:
        return 403
    return None


def call(client: TestClient, method: str, url: str, headers: dict[str, str]) -> tuple[int, str]:
    if method == "GET" and url.endswith("/stream"):
        with client.stream("GET", url, headers=headers) as r:
            return r.status_code, "" if r.status_code == 200 else r.read().decode()
    if method in ("GET", "DELETE"):
        r = client.request(method, url, headers=headers, params={"action": "refused"})
    else:
        # A body no handler takes: an allowed action is refused by its handler, unchanged.
        r = client.request(method, url, headers=headers, json=[], params={"action": "refused"})
    return r.status_code, r.text


def paused_thread(runner: Runner, owner: str, thread: str) -> str:
    runner.start(TASK, {}, thread_id=thread, by=owner)
    assert runner.status(thread).status == "waiting_user"
    return thread


def test_every_route_declares_a_rule(client: TestClient) -> None:
    assert client.app.state.uncovered == []  # type: ignore[attr-defined]
    routes = [r for r in client.app.routes if isinstance(r, Route)]  # type: ignore[attr-defined]
    assert len(routes) > 50
    for route in routes:
        rule = rule_of(route)
        assert rule is not None, route.path
        for method in route.methods or ():
            if writes(method, route.path) and rule is not Rule.SIGNED_IN:
                # Whatever writes acts on a thread (or makes one): never a read's rule.
                assert rule in (Rule.ACT, Rule.ANSWER, Rule.COPY), (method, route.path, rule)
        if rule is Rule.PUBLIC:
            assert "{" not in route.path, route.path  # nothing public names a thread


def test_a_route_without_a_rule_is_refused_and_listed(runner: Runner) -> None:
    from starlette.requests import Request
    from starlette.responses import Response

    from longtask.serve.access import Access, Tokens

    async def bare(request: Request) -> Response:
        return Response("should never be seen")

    access = Access(runner, Tokens(TOKENS), ROLES)
    guarded, uncovered = access.protect([Route("/bare", bare)])
    assert uncovered == ["GET,HEAD '/bare'"]
    from starlette.applications import Starlette

    with TestClient(Starlette(routes=guarded)) as c:
        r = c.get("/bare", headers=CALLERS["admin"])
        assert r.status_code == 403 and "no authorization rule" in r.text


@pytest.mark.parametrize("caller", list(CALLERS))
def test_every_route_answers_each_caller_as_its_rule_says(
    runner: Runner, client: TestClient, caller: str
) -> None:
    thread = paused_thread(runner, "alice", "acc-alice")
    paused_thread(runner, "bob", "acc-bob")
    checkpoint = runner.history(thread, limit=1)[0].checkpoint_id
    before = tables(runner)
    headers = CALLERS[caller]
    seen = 0
    for route in client.app.routes:  # type: ignore[attr-defined]
        assert isinstance(route, Route)
        rule = rule_of(route)
        assert rule is not None
        url = concrete(route.path, thread, checkpoint)
        for method in sorted((route.methods or set()) - {"HEAD"}):
            seen += 1
            status, text = call(client, method, url, headers)
            want = expected(rule, caller, "{thread_id}" in route.path)
            where = f"{caller}: {method} {route.path} -> {status} {text[:200]}"
            if want is None:
                assert status not in (401, 403), where
                assert f"no thread {thread!r}" not in text, where
                plain = not any(k in route.path for k in ("{run_id}", "{name:path}"))
                if method == "GET" and rule is Rule.READ and "{thread_id}" in route.path and plain:
                    assert status == 200, where
            else:
                assert status == want, where
                if want == 404:
                    assert f"no thread {thread!r}" in text, where
    assert seen > 60
    assert tables(runner) == before, f"{caller}'s requests changed stored state"


def test_lists_searches_and_counts_show_only_what_the_caller_may_see(
    runner: Runner, client: TestClient
) -> None:
    paused_thread(runner, "alice", "acc-alice")
    paused_thread(runner, "bob", "acc-bob")
    runner.start(TASK, {}, thread_id="acc-old", by="someone-else")
    # a thread stored before owners were recorded
    runner.db.store._run(
        "UPDATE longtask_threads SET owner = NULL WHERE thread_id = ?", ("acc-old",)
    )
    made = client.post("/threads", json={"thread_id": "acc-api"}, headers=CALLERS["bob"])
    assert made.status_code == 200
    every = {"acc-alice", "acc-bob", "acc-old", "acc-api"}
    sees = {
        "alice": {"acc-alice"},
        "bob": {"acc-bob", "acc-api"},
        "admin": every,
        "viewer": every,
    }
    for caller, want in sees.items():
        headers = CALLERS[caller]
        listed = client.get("/api/threads", headers=headers).json()
        assert {t["thread_id"] for t in listed} >= want - {"acc-api"}
        assert {t["thread_id"] for t in listed} <= want, caller
        found = client.post("/threads/search", json={"limit": 100}, headers=headers).json()
        assert {t["thread_id"] for t in found} == want, caller
        count = client.post("/threads/count", json={}, headers=headers).json()
        assert count == len(want), caller
    # An owner is recorded with the thread and shown with it.
    assert runner.db.store.get_thread("acc-alice").owner == "alice"  # type: ignore[union-attr]
    assert client.get("/threads/acc-api", headers=CALLERS["alice"]).status_code == 404
    assert client.get("/threads/acc-api", headers=CALLERS["bob"]).status_code == 200
    # /metrics spans every thread: the roles that see everything only.
    assert client.get("/metrics", headers=CALLERS["alice"]).status_code == 403
    assert client.get("/metrics", headers=CALLERS["viewer"]).status_code == 200


def test_a_thread_started_through_the_api_is_owned_by_who_started_it(
    runner: Runner, client: TestClient
) -> None:
    r = client.post(
        "/threads/acc-run/runs",
        json={"assistant_id": "access_task", "input": {}, "if_not_exists": "create"},
        headers=CALLERS["bob"],
    )
    assert r.status_code == 200, r.text
    deadline = time.monotonic() + 30
    while runner.db.store.get_thread("acc-run") is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert runner.db.store.get_thread("acc-run").owner == "bob"  # type: ignore[union-attr]
    assert client.get("/api/threads/acc-run", headers=CALLERS["alice"]).status_code == 404
    assert client.get("/api/threads/acc-run", headers=CALLERS["bob"]).status_code == 200


def test_an_approver_who_is_not_the_owner_sees_the_pause_answers_it_and_nothing_else(
    runner: Runner, client: TestClient
) -> None:
    thread = paused_thread(runner, "alice", "acc-alice")
    runner.start(OTHER, {}, thread_id="acc-bob", by="bob")
    # carol owns nothing, but the approval of alice's thread names her
    pending = client.get(f"/api/threads/{thread}/pending", headers=CAROL)
    assert pending.status_code == 200
    assert pending.json()[0]["request"]["approvers"] == ["carol"]
    assert client.get(f"/api/threads/{thread}", headers=CAROL).status_code == 200
    listed = client.get("/api/threads", headers=CAROL).json()
    assert [t["thread_id"] for t in listed] == [thread]
    found = client.post("/threads/search", json={}, headers=CAROL).json()
    assert [t["thread_id"] for t in found] == [thread]
    # bob's thread does not name her: it does not exist for her
    assert client.get("/api/threads/acc-bob", headers=CAROL).status_code == 404
    assert client.get("/threads/acc-bob/state", headers=CAROL).status_code == 404
    # she may answer the pause, not act on the thread otherwise
    before = tables(runner)
    for action in ("cancel", "retry"):
        r = client.post(f"/api/threads/{thread}/{action}", json={}, headers=CAROL)
        assert r.status_code == 403, r.text
    assert client.post(f"/threads/{thread}/runs", json={}, headers=CAROL).status_code == 403
    # nor copy it into a thread of her own
    assert client.post(f"/threads/{thread}/copy", headers=CAROL).status_code == 403
    assert tables(runner) == before
    r = client.post(f"/api/threads/{thread}/approve", json={"step": "ok"}, headers=CAROL)
    assert r.status_code == 202, r.text
    deadline = time.monotonic() + 30
    while runner.status(thread).status != "completed" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert runner.status(thread).status == "completed"
    resolved = [e for e in runner.events(thread) if e.kind == "approval.resolved"]
    assert resolved[-1].data["by"] == "carol"
    # Answered, the pause names her no more, but she keeps reading the thread she
    # answered (her decision and its outcome): reads only.
    assert client.get(f"/api/threads/{thread}", headers=CAROL).json()["status"] == "completed"
    events = client.get(f"/api/threads/{thread}/events", headers=CAROL).json()
    assert any(e["kind"] == "approval.resolved" and e["data"]["by"] == "carol" for e in events)
    assert client.get(f"/threads/{thread}/state", headers=CAROL).status_code == 200
    listed = client.get("/api/threads", headers=CAROL).json()
    assert [t["thread_id"] for t in listed] == [thread]
    found = client.post("/threads/search", json={}, headers=CAROL).json()
    assert [t["thread_id"] for t in found] == [thread]
    before = tables(runner)
    assert client.post(f"/api/threads/{thread}/cancel", json={}, headers=CAROL).status_code == 403
    assert client.post(f"/threads/{thread}/copy", headers=CAROL).status_code == 403
    assert client.patch(f"/threads/{thread}", json={}, headers=CAROL).status_code == 403
    assert tables(runner) == before
    # bob never answered it: it does not exist for him
    assert client.get(f"/api/threads/{thread}", headers=CALLERS["bob"]).status_code == 404


def test_crons_are_seen_by_their_owner_and_the_roles_that_see_everything(
    runner: Runner, client: TestClient
) -> None:
    """Each cron route × caller, on a cron of alice's: she and the admin change it, the
    viewer reads it, bob and carol do not know it exists, an unknown token is refused."""
    made = client.post(
        "/runs/crons",
        json={"assistant_id": "access_task", "schedule": "0 3 * * *"},
        headers=CALLERS["alice"],
    )
    assert made.status_code == 200, made.text
    cron = made.json()["cron_id"]
    one = f"/runs/crons/{cron}"
    daily = {"assistant_id": "access_task", "schedule": "@daily"}
    #: (method, path, body, {caller: status}), in order
    want: list[tuple[str, str, Any, dict[str, int]]] = [
        ("GET", one, None, {"bob": 404, "viewer": 200, "admin": 200, "alice": 200}),
        ("POST", "/runs/crons/search", {}, {"bob": 200, "viewer": 200, "alice": 200}),
        ("POST", "/runs/crons/count", {}, {"bob": 200, "viewer": 200, "alice": 200}),
        ("PATCH", one, {"enabled": False}, {"bob": 404, "viewer": 403, "admin": 200}),
        ("PATCH", one, {"enabled": True}, {"alice": 200}),
        ("POST", "/runs/crons", daily, {"viewer": 403, "bob": 200}),
        ("DELETE", one, None, {"bob": 404, "viewer": 403, "alice": 204}),
    ]
    for method, path, body, by_caller in want:
        for caller, status in {**by_caller, "unknown": 401}.items():
            r = client.request(method, path, json=body, headers=CALLERS[caller])
            assert r.status_code == status, (caller, method, path, r.text)
    counted = {
        c: client.post("/runs/crons/count", json={}, headers=CALLERS[c]).json()
        for c in CALLERS
        if c != "unknown"
    }
    # alice's is deleted; bob's remains, seen by him and the roles that see everything
    assert counted == {"alice": 0, "bob": 1, "admin": 1, "viewer": 1}
    assert client.post("/runs/crons/count", json={}, headers=CAROL).json() == 0


def test_open_mode_reads_everything_and_acts_on_nothing(runner: Runner) -> None:
    thread = paused_thread(runner, "alice", "acc-alice")
    with TestClient(create_app(runner, {}, schedule_poll=None)) as c:
        assert c.get(f"/api/threads/{thread}").status_code == 200
        assert c.get("/metrics").status_code == 200
        before = tables(runner)
        r = c.post(f"/api/threads/{thread}/approve", json={"step": "ok"})
        assert r.status_code == 401
        assert tables(runner) == before


def test_with_a_token_configured_loopback_is_no_longer_trusted(runner: Runner) -> None:
    thread = paused_thread(runner, "alice", "acc-alice")
    app = create_app(runner, TOKENS, roles=ROLES, loopback_hosts_only=True, schedule_poll=None)
    with TestClient(app, base_url="http://127.0.0.1:8765") as c:
        assert c.get(f"/api/threads/{thread}").status_code == 401
        assert c.get("/api/threads").status_code == 401
        assert c.get("/ok").status_code == 200
        assert c.get(f"/api/threads/{thread}", headers=CALLERS["alice"]).status_code == 200


def test_roles_are_read_from_the_token_variable() -> None:
    from longtask.errors import InvalidInput
    from longtask.serve.access import check_roles, roles_from_env, tokens_from_env

    env = {"LONGTASK_API_TOKENS": "alice=t1:admin,bob=t:2,vera=t3:viewer,carl=t4"}
    assert tokens_from_env(env) == {"t1": "alice", "t:2": "bob", "t3": "vera", "t4": "carl"}
    assert roles_from_env(env) == {"alice": "admin", "vera": "viewer"}
    with pytest.raises(InvalidInput, match="a role is one of admin, viewer, user"):
        check_roles({"alice": "root"})


def test_the_cli_records_who_started_a_thread(db_url: str) -> None:
    from conftest import run_cli

    from longtask.runtime._who import whoami

    task = f"{Path(__file__)}:TASK"
    named = run_cli("run", task, "--thread", "cli-named", "--by", "carol", db=db_url)
    assert named.returncode == 3, named.stdout + named.stderr
    plain = run_cli("run", task, "--thread", "cli-plain", db=db_url)
    assert plain.returncode == 3, plain.stdout + plain.stderr
    bad = run_cli("run", task, "--thread", "cli-bad", "--by", "a\nb", db=db_url)
    assert bad.returncode == 2 and "--by" in bad.stderr
    with Runner(db_url) as runner:
        assert runner.db.store.get_thread("cli-named").owner == "carol"  # type: ignore[union-attr]
        assert runner.db.store.get_thread("cli-plain").owner == whoami()  # type: ignore[union-attr]
        assert runner.db.store.get_thread("cli-bad") is None


def test_a_schedule_s_threads_are_owned_by_who_added_it(runner: Runner) -> None:
    from datetime import timedelta

    from longtask import Schedule
    from longtask.runtime._who import whoami

    rec, change = runner.add_schedule(
        TASK, Schedule(cron="* * * * *", name="acc-every"), task_ref="test_access:TASK"
    )
    assert change == "added" and rec.owner == whoami()
    # another owner than this process's user: the thread must take the schedule's
    runner.db.store._run(
        "UPDATE longtask_schedules SET owner = ? WHERE name = ?", ("sched-owner", "acc-every")
    )
    later = rec.next_fire_at + timedelta(seconds=1)
    fired = runner.fire_due(later, launch=lambda thread_id: None)
    assert [f.schedule for f in fired if f.thread_id] == ["acc-every"]
    thread = fired[0].thread_id
    assert thread is not None
    assert runner.db.store.get_thread(thread).owner == "sched-owner"  # type: ignore[union-attr]


def _assistant_answer(route: str, caller: str) -> int:
    """What each caller gets from an assistants route (issue 43), on alice's assistant."""
    if caller == "unknown":
        return 401
    if route in ("get", "versions", "search", "count", "schemas"):
        return 200  # every signed-in caller reads assistants
    if caller == "viewer":
        return 403  # reads only
    if route == "create" or caller in ("alice", "admin"):
        return 200 if route != "delete" else 204
    return 403  # bob: only who created it, or an admin, changes it


def test_assistant_routes_answer_each_caller_as_their_rules_say(
    runner: Runner, client: TestClient
) -> None:
    for caller, headers in CALLERS.items():
        made = client.post(
            "/assistants", json={"graph_id": "access_task"}, headers=CALLERS["alice"]
        )
        aid = made.json()["assistant_id"]
        one = f"/assistants/{aid}"
        calls = [
            ("get", "GET", one, None),
            ("versions", "POST", one + "/versions", {}),
            ("search", "POST", "/assistants/search", {}),
            ("count", "POST", "/assistants/count", {}),
            ("schemas", "GET", one + "/schemas", None),
            ("create", "POST", "/assistants", {"graph_id": "access_task"}),
            ("update", "PATCH", one, {"name": "renamed"}),
            ("latest", "POST", one + "/latest", {"version": 1}),
            ("delete", "DELETE", one, None),
        ]
        for route, method, path, body in calls:
            want = _assistant_answer(route, caller)
            before = tables(runner) if want >= 400 else None
            r = client.request(method, path, json=body, headers=headers)
            assert r.status_code == want, f"{caller}: {method} {path} -> {r.status_code} {r.text}"
            if before is not None:
                assert tables(runner) == before, f"{caller}'s refused {route} changed state"
    # who created an assistant is recorded with it
    made = client.post("/assistants", json={"graph_id": "access_task"}, headers=CALLERS["bob"])
    row = runner.db.store.assistant_get(made.json()["assistant_id"])
    assert row is not None and row.owner == "bob"


def a2a(client: TestClient, caller: dict[str, str], method: str, params: dict[str, Any]) -> Any:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    r = client.post("/a2a/access_task", json=body, headers={**caller, "Accept": "application/json"})
    assert r.status_code == 200, r.text
    return r.json()


def test_each_a2a_method_is_allowed_as_the_route_it_stands_for(
    runner: Runner, client: TestClient
) -> None:
    """``/a2a`` is for anyone signed in; each method asks what its route would: starting a
    task acts (not a viewer), answering needs answering the pause (its approver too),
    reading needs seeing the thread (else "task not found"), cancelling acts."""
    data = [{"kind": "data", "data": {"note": "x"}}]
    send = {"message": {"role": "user", "messageId": "m1", "parts": data}}
    started = a2a(client, CALLERS["alice"], "message/send", send)["result"]
    assert started["status"]["state"] == "input-required", started
    task = {"id": started["id"]}
    thread = started["contextId"]
    ids = {"taskId": started["id"], "contextId": thread}
    answer = {"message": {"role": "user", "messageId": "m2", "parts": [{"text": "approve"}], **ids}}
    before = tables(runner)

    for caller in ("viewer", "admin"):  # roles that read every thread
        got = a2a(client, CALLERS[caller], "tasks/get", task)["result"]
        assert got["status"]["state"] == "input-required", caller
    refusals = {
        "viewer": [
            ("message/send", send, "may not start a task"),
            ("message/send", answer, "may not answer"),
            ("tasks/cancel", task, "may not act"),
        ],
        "bob": [  # alice's thread, whose pause does not name him: no such task
            ("tasks/get", task, "Task not found"),
            ("message/send", answer, "Task not found"),
            ("tasks/cancel", task, "Task not found"),
        ],
        "carol": [("tasks/cancel", task, "may not act")],  # she answers, and only that
    }
    for caller, calls in refusals.items():
        headers = CALLERS.get(caller, CAROL)
        for method, params, why in calls:
            error = a2a(client, headers, method, params)["error"]
            assert why in error["message"], (caller, method, error)
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": task}
    assert client.post("/a2a/access_task", json=rpc, headers=CALLERS["unknown"]).status_code == 401
    # message/stream asks what message/send asks; its refusal is the stream's one event
    stream = {"jsonrpc": "2.0", "id": 1, "method": "message/stream", "params": send}
    accept = {"Accept": "text/event-stream"}
    r = client.post("/a2a/access_task", json=stream, headers={**CALLERS["viewer"], **accept})
    assert r.status_code == 200 and r.text.count("data:") == 1, r.text
    assert "may not start a task" in r.text
    assert tables(runner) == before, "a refused A2A call changed stored state"

    done = a2a(client, CAROL, "message/send", answer)["result"]
    assert done["status"]["state"] == "completed", done
    resolved = [e for e in runner.events(thread) if e.kind == "approval.resolved"]
    assert resolved[-1].data["by"] == "carol"
    assert runner.db.store.get_thread(thread).owner == "alice"  # type: ignore[union-attr]
