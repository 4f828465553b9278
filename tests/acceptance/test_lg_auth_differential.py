"""The same ``langgraph_sdk.Auth`` handler file on LangGraph's own server and on
``longtask serve`` (issue 41): two users create, read, search, run, and read the state and
history of threads, and both servers give the same answers (status codes, and who sees
which thread); the handlers are called on longtask (they append to a file the test reads).

The handler (``lgdiff_auth.py``) is the owner-only one of LangGraph's docs, the one
docs/howto/users.md prints line for line: authenticate from a bearer token, ``@auth.on``
adds ``owner`` metadata and returns ``{"owner": user}``. The script searches as the SDK
does (``threads.search()``), and a PATCH that names another owner is rewritten by the
handler on both servers (issue 50).
LangGraph's server is installed into a cache on first use (``lgdiff_servers.py``).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import lgdiff_servers
import pytest
from fakes import FakeOpenAI, Reply, Request
from test_lg_differential import _needed

HERE = Path(__file__).parent
AUTH = f"{HERE / 'lgdiff_auth.py'}:auth"
USER1 = {"Authorization": "Bearer tok-user1"}
USER2 = {"Authorization": "Bearer tok-user2"}
NOBODY = {"Authorization": "Bearer tok-nobody"}
CHAT = {"messages": [{"role": "user", "content": "What is the weather?"}]}
ASSISTANT = {"graph_id": "chat", "metadata": {"k": "v"}, "context": {"tone": "brief"}}


def _script(request: Request) -> Reply:
    if request.turn == 0:
        return Reply.tool_calls([("lookup", {"topic": "weather"})])
    return Reply.text("It is sunny.")


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(_script) as server:
        yield server


def drive(url: str) -> list[tuple[str, Any]]:
    """Two users through one script; each answer kept as what must be the same on both
    servers: its status, and for threads who owns them and how many one sees."""
    out: list[tuple[str, Any]] = []
    with httpx.Client(base_url=url, timeout=120) as c:

        def step(label: str, method: str, path: str, who: dict[str, str], **kw: Any) -> Any:
            r = c.request(method, path, headers=who, **kw)
            body = r.json() if r.content else None
            out.append((label, r.status_code))
            return body

        one = step("user1 creates", "POST", "/threads", USER1, json={"metadata": {"k": "v"}})
        out.append(("owner set by the handler", one["metadata"].get("owner")))
        two = step("user2 creates", "POST", "/threads", USER2, json={})
        t1, t2 = one["thread_id"], two["thread_id"]
        step("nobody creates", "POST", "/threads", NOBODY, json={})
        step("user1 reads own", "GET", f"/threads/{t1}", USER1)
        step("user2 reads user1's", "GET", f"/threads/{t1}", USER2)
        step("nobody reads", "GET", f"/threads/{t1}", NOBODY)
        for who, name in ((USER1, "user1"), (USER2, "user2")):
            found = step(f"{name} searches", "POST", "/threads/search", who, json={})
            mine = t1 if name == "user1" else t2
            out.append(
                (
                    f"{name} finds",
                    sorted(
                        "own" if t["thread_id"] == mine else "other"
                        for t in (found if isinstance(found, list) else [])  # an error: none
                    ),
                )
            )
        # A search as the SDK sends it (Agent Chat UI's thread list): no metadata; the
        # handler sees {} on both servers.
        for who, name in ((USER1, "user1"), (USER2, "user2")):
            out.append((f"{name}'s SDK search finds", _sdk_search(url, who, t1, t2)))
        step("user2 updates user1's", "PATCH", f"/threads/{t1}", USER2, json={"metadata": {}})
        # The update handler gets the PATCH's metadata and rewrites it: a user cannot hand a
        # thread to another (plant it in their list) by its metadata.
        handed = step(
            "user2 hands own thread to user1",
            "PATCH",
            f"/threads/{t2}",
            USER2,
            json={"metadata": {"owner": "user1", "k": "w"}},
        )
        out.append(
            ("the owner after the PATCH", ((handed or {}).get("metadata") or {}).get("owner"))
        )
        found = step("user1 searches again", "POST", "/threads/search", USER1, json={})
        found = found if isinstance(found, list) else []  # an error answers no thread
        out.append(("user1 finds", sorted(t["thread_id"] == t1 for t in found)))
        run = {"assistant_id": "chat", "input": CHAT}
        step("user2 runs on user1's", "POST", f"/threads/{t1}/runs/wait", USER2, json=run)
        waited = step("user1 runs", "POST", f"/threads/{t1}/runs/wait", USER1, json=run)
        out.append(("the run paused", "__interrupt__" in (waited or {})))
        step("user1 state", "GET", f"/threads/{t1}/state", USER1)
        step("user2 state", "GET", f"/threads/{t1}/state", USER2)
        history = step("user1 history", "POST", f"/threads/{t1}/history", USER1, json={})
        out.append(("user1 history has checkpoints", bool(history)))
        step("user2 history", "POST", f"/threads/{t1}/history", USER2, json={})
        step("user2 runs list of user1's", "GET", f"/threads/{t1}/runs", USER2)
        _assistants(step, out)
        _crons(step, out, t1)
    return out


def _sdk_search(url: str, who: dict[str, str], t1: str, t2: str) -> Any:
    """``threads.search()`` of LangGraph's Python SDK, as a client calls it: which of the two
    threads it finds, or the status it failed with."""
    from langgraph_sdk import get_sync_client

    client = get_sync_client(url=url, api_key=None, headers=who)
    try:
        found = client.threads.search()
    except httpx.HTTPStatusError as exc:
        return exc.response.status_code
    finally:
        client.http.client.close()
    return sorted({t1: "user1's", t2: "user2's"}.get(t["thread_id"], "other") for t in found)


def _assistants(step: Any, out: list[tuple[str, Any]]) -> None:
    """The assistants handler (issue 43): a created assistant is its creator's to change,
    everyone's to read, search and run."""
    made = step("user1 creates an assistant", "POST", "/assistants", USER1, json=ASSISTANT)
    out.append(("assistant owner set by the handler", made["metadata"].get("owner")))
    aid = made["assistant_id"]
    one = f"/assistants/{aid}"
    step("nobody creates an assistant", "POST", "/assistants", NOBODY, json=ASSISTANT)
    step("user2 reads user1's assistant", "GET", one, USER2)
    step("user2 updates user1's assistant", "PATCH", one, USER2, json={"name": "x"})
    step("user2 sets user1's latest", "POST", one + "/latest", USER2, json={"version": 1})
    step("user2 deletes user1's assistant", "DELETE", one, USER2)
    two = step("user1 updates own assistant", "PATCH", one, USER1, json={"name": "y"})
    out.append(("the update made version", (two or {}).get("version")))
    step("user1 sets own latest", "POST", one + "/latest", USER1, json={"version": 1})
    versions = step("user2 reads versions", "POST", one + "/versions", USER2, json={})
    out.append(("versions", [v["version"] for v in versions or []]))
    found = step("user2 searches assistants", "POST", "/assistants/search", USER2, json={})
    out.append(("user2 finds it", aid in {a["assistant_id"] for a in found or []}))
    thread = step("user2 creates a thread", "POST", "/threads", USER2, json={})
    run = {"assistant_id": aid, "input": CHAT}
    waited = step(
        "user2 runs user1's assistant",
        "POST",
        f"/threads/{thread['thread_id']}/runs/wait",
        USER2,
        json=run,
    )
    out.append(("that run paused", "__interrupt__" in (waited or {})))
    step("user1 deletes own assistant", "DELETE", one, USER1)
    step("user1 reads the deleted assistant", "GET", one, USER1)


def _crons(step: Any, out: list[tuple[str, Any]], t1: str) -> None:
    """Crons under the handlers' ``@auth.on.crons``: each user sees and changes their own."""
    yearly = {"assistant_id": "chat", "schedule": "0 3 1 1 *", "input": CHAT}
    cron = step("user1 creates a cron", "POST", "/runs/crons", USER1, json=yearly)
    out.append(("cron owner set by the handler", (cron.get("metadata") or {}).get("owner")))
    one = f"/runs/crons/{cron['cron_id']}"
    step("nobody creates a cron", "POST", "/runs/crons", NOBODY, json=yearly)
    step(
        "user1 creates a cron of own thread",
        "POST",
        f"/threads/{t1}/runs/crons",
        USER1,
        json=yearly,
    )
    step(
        "user2 creates a cron of user1's thread",
        "POST",
        f"/threads/{t1}/runs/crons",
        USER2,
        json=yearly,
    )
    step("user2 creates a cron", "POST", "/runs/crons", USER2, json=yearly)
    for who, name in ((USER1, "user1"), (USER2, "user2")):
        found = step(f"{name} searches crons", "POST", "/runs/crons/search", who, json={})
        out.append((f"{name} finds crons", len(found)))
        out.append(
            (
                f"{name} counts crons",
                step(f"{name} counts", "POST", "/runs/crons/count", who, json={}),
            )
        )
    step("user2 reads user1's cron", "GET", one, USER2)
    step("user2 updates user1's cron", "PATCH", one, USER2, json={"enabled": False})
    step("user2 deletes user1's cron", "DELETE", one, USER2)
    step("user1 updates own cron", "PATCH", one, USER1, json={"enabled": False})
    step("user1 deletes own cron", "DELETE", one, USER1)


@pytest.fixture  # a fresh one per backend: the script's searches count every thread
def reference(llm: FakeOpenAI) -> Iterator[lgdiff_servers.Server]:
    server = _needed(
        "LangGraph's server",
        lambda: lgdiff_servers.reference_server(llm.base_url, auth=AUTH).start(),
    )
    yield server
    server.stop()


def test_one_auth_handler_file_gives_the_same_answers_on_both_servers(
    reference: lgdiff_servers.Server,
    llm: FakeOpenAI,
    db_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    want = drive(reference.url)
    log = tmp_path / "auth.log"
    monkeypatch.setenv("LGDIFF_AUTH_LOG", str(log))  # the server inherits it
    where = Path(tempfile.mkdtemp(prefix="lgdiff-auth-", dir=tmp_path))
    server = lgdiff_servers.longtask_auth_server(db_url, llm.base_url, AUTH, where).start()
    try:
        got = drive(server.url)
    finally:
        out = server.stop()
    assert "auth handler" in out, out
    assert ("user2 reads user1's", 404) in want  # the script shows what the handler does
    assert ("user2 reads user1's cron", 404) in want
    assert ("user2 creates a cron of user1's thread", 404) in want
    assert got == want, "\n".join(
        f"{w!r:60} {g!r}" for w, g in zip(want, got, strict=False) if w != g
    )
    seen = [json.loads(line) for line in log.read_text().splitlines()]
    assert {"call": "authenticate", "ok": True, "user": "user2"} in seen
    actions = {c.get("action") for c in seen if c["call"] == "on"}
    searches = [
        c["value"] for c in seen if (c.get("resource"), c.get("action")) == ("threads", "search")
    ]
    # LangGraph's value for a search: its metadata is {} when the request gives none
    assert searches and all(isinstance(v.get("metadata"), dict) for v in searches), searches
    assert {"create", "read", "search", "create_run"} <= actions
    by_resource = {(c.get("resource"), c.get("action")) for c in seen if c["call"] == "on"}
    assert {("assistants", a) for a in ("create", "read", "update", "delete", "search")} <= (
        by_resource
    )
    crons = {c.get("action") for c in seen if c["call"] == "on" and c.get("resource") == "crons"}
    assert crons == {"create", "read", "search", "update", "delete"}
