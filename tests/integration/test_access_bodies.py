"""A door that names a thread in its body asks what a door that names it in its path asks
(issue 50, DESIGN promise 10), on both backends.

Every route of the app that writes and has no thread in its path is enumerated: each one
either names a thread in its body (a case below, or the test fails) or is listed as naming
none. Bob names alice's thread in each: he never gets its data, is never told it exists,
and gets what he gets for an id no thread has (a create is the one door where a free id
differs: it makes the thread; there every id he may not see gets the same refusal).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.routing import Route
from starlette.testclient import TestClient

from longtask import LongTask, Runner, Stage, approval
from longtask.serve import create_app
from longtask.serve._registry import load_registry

TOKENS = {"tok-alice": "alice", "tok-bob": "bob", "tok-root": "root-admin"}
ROLES = {"root-admin": "admin"}
ALICE = {"Authorization": "Bearer tok-alice"}
BOB = {"Authorization": "Bearer tok-bob"}
#: in alice's plan: a response that holds it showed bob her thread
SECRET = "alice-secret-plan-7f3a"

BODY_TASK = LongTask(
    "body_task",
    stages=[
        Stage(
            "ok",
            # only alice's thread's plan holds the secret (bob's runs start threads too)
            [
                approval(
                    "ok",
                    plan=lambda ctx: {"secret": SECRET if ctx.thread_id == "body-alice" else ""},
                    approvers=["alice"],
                )
            ],
        )
    ],
)

#: routes that write with no thread in their path and name none in their body
NAMES_NO_THREAD = {
    "/assistants",
    "/assistants/{assistant_id}",
    "/assistants/{assistant_id}/latest",
    "/assistants/search",
    "/assistants/count",
    "/assistants/{assistant_id}/versions",
    "/runs/crons/{cron_id}",
    "/store/items",
    "/store/items/search",
    "/store/namespaces",
    "/mcp",  # DELETE ends a session; POST is a case below
    "/mcp/",
    "/a2a/{assistant_id}/",  # the same methods as /a2a/{assistant_id}, a case below
}


def _mcp(name: str, **arguments: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }


def _a2a(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def _runs_body(t: str) -> dict[str, Any]:
    return {"assistant_id": "body_task", "input": {}, "config": {"configurable": {"thread_id": t}}}


#: path -> bodies naming thread ``T``, and whether a free id is answered as a taken one
#: (False: a free id is used, as a create uses it)
CASES: dict[str, list[tuple[str, Any, bool]]] = {
    "/threads": [
        ("POST", {"thread_id": "T"}, False),
        ("POST", {"thread_id": "T", "if_exists": "do_nothing"}, False),
        ("POST", {"thread_id": "T", "if_exists": "raise"}, False),
    ],
    "/threads/prune": [("POST", {"thread_ids": ["T"]}, True)],
    "/threads/search": [("POST", {"ids": ["T"]}, True)],
    "/threads/count": [("POST", {"ids": ["T"]}, True)],
    "/runs": [("POST", _runs_body("T"), True)],
    "/runs/wait": [("POST", _runs_body("T"), True)],
    "/runs/stream": [("POST", _runs_body("T"), True)],
    "/runs/batch": [("POST", [_runs_body("T")], True)],
    "/runs/cancel": [("POST", {"thread_id": "T", "run_ids": ["no-such-run"]}, True)],
    "/runs/crons": [
        ("POST", {"assistant_id": "body_task", "schedule": "@daily", "thread_id": "T"}, True)
    ],
    "/runs/crons/search": [("POST", {"thread_id": "T"}, True)],
    "/runs/crons/count": [("POST", {"thread_id": "T"}, True)],
    "/mcp": [
        ("POST", _mcp("longtask_status", thread_id="T"), True),
        ("POST", _mcp("longtask_answer", thread_id="T", answer=True), True),
    ],
    "/a2a/{assistant_id}": [
        ("POST", _a2a("tasks/get", {"id": "T:run"}), True),
        ("POST", _a2a("tasks/cancel", {"id": "T:run"}), True),
        (
            "POST",
            _a2a(
                "message/send",
                {
                    "message": {
                        "role": "user",
                        "messageId": "m1",
                        "parts": [{"kind": "data", "data": {}}],
                        "contextId": "T",
                    }
                },
            ),
            False,
        ),
    ],
}


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
        registry=load_registry(["test_access_bodies:BODY_TASK"]),
        schedule_poll=None,
        poll=0.02,
    )
    with TestClient(app) as c:
        yield c


def _send(client: TestClient, method: str, path: str, body: Any, thread: str) -> tuple[int, str]:
    url = path.replace("{assistant_id}", "body_task")
    text = json.dumps(body).replace('"T', f'"{thread}')
    headers = {
        **BOB,
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
    }
    if path.endswith("/stream"):
        with client.stream(method, url, content=text, headers=headers) as r:
            return r.status_code, r.read().decode()
    r = client.request(method, url, content=text, headers=headers)
    return r.status_code, r.text


def _shape(text: str, thread: str) -> str:
    """A response with the id it names, and what differs from call to call, taken out."""
    import re

    text = text.replace(thread, "ID")
    text = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "UUID", text)
    text = re.sub(r"\d{4}-\d\d-\d\dT[0-9:.]+(Z|[+-]\d\d:\d\d)?", "TIME", text)
    text = re.sub(r"(?m)^id: \d+-\d+$", "id: EVENT", text)  # a stream event's place
    return re.sub(r"\b[0-9a-f]{16,32}\b", "HEX", text)


def _alices(runner: Runner, thread: str) -> tuple[Any, ...]:
    st = runner.status(thread)
    store = runner.db.store
    runs = store.api_runs(thread, limit=100)
    return (st.status, st.checkpoint_id, len(runner.events(thread)), len(runs))


def test_every_door_naming_a_thread_in_its_body_hides_one_the_caller_may_not_see(
    runner: Runner, client: TestClient
) -> None:
    writes = {
        r.path
        for r in client.app.routes  # type: ignore[attr-defined]
        if isinstance(r, Route)
        and (set(r.methods or ()) - {"GET", "HEAD"})
        and "{thread_id}" not in r.path
    }
    unknown = writes - set(CASES) - NAMES_NO_THREAD
    assert not unknown, f"doors that may name a thread in their body: add a case: {unknown}"
    for one in ("alice", "other"):
        r = client.post(
            f"/threads/body-{one}/runs/wait",
            json={"assistant_id": "body_task", "input": {}, "if_not_exists": "create"},
            headers=ALICE if one == "alice" else {"Authorization": "Bearer tok-root"},
        )
        assert r.status_code == 200 and (SECRET in r.text) == (one == "alice"), r.text
    before = {t: _alices(runner, t) for t in ("body-alice", "body-other")}
    wrong: list[str] = []
    n = 0
    for path, calls in CASES.items():
        for method, body, same_as_free in calls:
            n += 1
            status, text = _send(client, method, path, body, "body-alice")
            where = f"{method} {path} {json.dumps(body)[:80]}: {status} {text[:200]}"
            if SECRET in text:
                wrong.append(f"shows alice's thread: {where}")
            if "exist" in text.replace("not exist", "").replace("if_exists", ""):
                wrong.append(f"says it exists: {where}")
            # another taken id bob may not see: the same answer, but for the id
            other = _send(client, method, path, body, "body-other")
            if (other[0], _shape(other[1], "body-other")) != (status, _shape(text, "body-alice")):
                wrong.append(f"differs from another hidden thread's: {where} / {other}")
            if same_as_free:
                free = _send(client, method, path, body, f"body-free-{n}")
                if free[0] != status or (
                    not path.startswith("/runs")
                    and _shape(free[1], f"body-free-{n}") != _shape(text, "body-alice")
                ):
                    wrong.append(f"differs from a free id's: {where} / {free}")
    assert not wrong, "\n".join(wrong)
    assert {t: _alices(runner, t) for t in before} == before, "bob changed a thread not his"
    # A create with a taken id is refused alike, whatever if_exists says; alice, who sees
    # her thread, gets it with do_nothing and is told it exists otherwise.
    r = client.post("/threads", json={"thread_id": "body-alice"}, headers=BOB)
    assert r.status_code == 409 and "cannot be used" in r.text, r.text
    r = client.post(
        "/threads", json={"thread_id": "body-alice", "if_exists": "do_nothing"}, headers=ALICE
    )
    assert r.status_code == 200 and r.json()["thread_id"] == "body-alice"
    r = client.post("/threads", json={"thread_id": "body-alice"}, headers=ALICE)
    assert r.status_code == 409 and "exists already" in r.text
