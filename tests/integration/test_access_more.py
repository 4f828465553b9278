"""Issue 41, the rest, on both backends: lists and searches page over what the caller sees
(chosen in the query), users and roles from a tokens file that holds only hashes,
``/metrics`` with an auth handler, and a handler's identity as who answers a pause."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient
from test_access import CALLERS, OTHER, ROLES, TOKENS, paused_thread, tables

from longtask import LongTask, Runner, Stage, wait_for
from longtask.errors import InvalidInput
from longtask.serve import create_app
from longtask.serve._registry import load_registry
from longtask.serve.access import combine, load_auth, read_tokens_file

#: a task that waits for the outside event "go"
WAITS = LongTask("access_waits", stages=[Stage("wait", [wait_for("go")])])


def sha(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


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
    )
    with TestClient(app) as c:
        yield c


# -- lists page over what the caller sees -----------------------------------------------------


def test_a_search_pages_over_only_the_callers_threads_in_order(
    runner: Runner, client: TestClient
) -> None:
    # bob's threads among alice's, one after the other: API threads with no run, started
    # threads, and one of alice's whose approval names bob (he sees it while it waits)
    bobs: list[str] = []
    for i in range(14):
        thread = f"pg-{i:02d}"
        owner = "bob" if i % 3 == 1 else "alice"
        if i in (4, 9):
            paused_thread(runner, owner, thread)
        elif i == 11:
            runner.start(OTHER, {}, thread_id=thread, by="alice")  # names bob
            owner = "bob"
        else:
            made = client.post("/threads", json={"thread_id": thread}, headers=CALLERS[owner])
            assert made.status_code == 200, made.text
        if owner == "bob":
            bobs.append(thread)
    assert len(bobs) == 6
    for order, want in (("desc", bobs[::-1]), ("asc", bobs)):
        seen: list[str] = []
        for offset in range(0, 9, 2):
            body = {"limit": 2, "offset": offset, "sort_by": "created_at", "sort_order": order}
            page = client.post("/threads/search", json=body, headers=CALLERS["bob"]).json()
            assert len(page) <= 2
            seen += [t["thread_id"] for t in page]
        assert seen == want, order
    assert client.post("/threads/count", json={}, headers=CALLERS["bob"]).json() == len(bobs)
    by_id = {"limit": 3, "offset": 3, "sort_by": "thread_id", "sort_order": "asc"}
    page = client.post("/threads/search", json=by_id, headers=CALLERS["bob"]).json()
    assert [t["thread_id"] for t in page] == sorted(bobs)[3:6]
    # a filter only a thread's JSON tells (its status) still pages over bob's alone
    idle = {"status": "idle", "limit": 2, "offset": 1}
    page = client.post("/threads/search", json=idle, headers=CALLERS["bob"]).json()
    idle_bobs = [t for t in bobs[::-1] if t not in ("pg-04", "pg-11")]
    assert [t["thread_id"] for t in page] == idle_bobs[1:3]
    count = client.post("/threads/count", json={"status": "idle"}, headers=CALLERS["bob"])
    assert count.json() == len(idle_bobs)
    # the admin sees every thread; the page's list (started threads) counts bob's only
    assert client.post("/threads/count", json={}, headers=CALLERS["admin"]).json() == 14
    listed = client.get("/api/threads?limit=2&sort=age", headers=CALLERS["bob"]).json()
    assert [t["thread_id"] for t in listed] == ["pg-04", "pg-11"]
    ids = {"ids": ["pg-00", "pg-01", "pg-04"], "limit": 10}
    found = client.post("/threads/search", json=ids, headers=CALLERS["bob"]).json()
    assert sorted(t["thread_id"] for t in found) == ["pg-01", "pg-04"]


def test_the_store_chooses_a_persons_threads_in_the_query(runner: Runner) -> None:
    paused_thread(runner, "alice", "q-alice")  # names carol as its approver
    runner.start(OTHER, {}, thread_id="q-other", by="alice")  # names bob
    store = runner.db.store
    assert store.visible_thread_ids("carol") == ["q-alice"]
    assert store.visible_thread_ids("bob") == ["q-other"]
    assert store.count_visible_threads("alice") == 2
    assert store.count_visible_threads(None) == 2
    assert [r.thread_id for r in store.list_threads(visible_to="bob")] == ["q-other"]
    assert store.list_threads(visible_to="dave") == []
    # a step or a reason that says "bob" does not name him: only an approval's approvers
    store._run(
        "UPDATE longtask_threads SET waiting = ? WHERE thread_id = ?",
        (json.dumps([{"step": "bob", "kind": "approval", "reason": '"bob"'}]), "q-other"),
    )
    assert store.visible_thread_ids("bob") == []


# -- a tokens file ------------------------------------------------------------------------


def test_a_tokens_file_gives_names_and_roles_and_holds_no_token(
    runner: Runner, tmp_path: Path
) -> None:
    users = tmp_path / "users.txt"
    users.write_text(
        "# NAME  ROLE  SHA-256 OF THE TOKEN\n"
        f"alice {sha('file-alice')}\n"
        f"ops   admin  {sha('file-ops')}   # the on-call\n"
        "\n"
        f"ops   admin  {sha('file-ops-next').upper().replace('SHA256:', 'sha256:')}\n"
        f"vera  viewer {sha('file-vera')}\n"
    )
    hashes, roles = read_tokens_file(str(users))
    assert sorted(hashes.values()) == ["alice", "ops", "ops", "vera"]
    assert roles == {"alice": "user", "ops": "admin", "vera": "viewer"}
    # the environment's users add to the file's
    env_tokens = {"env-bob": "bob"}
    all_roles = combine(env_tokens, {}, hashes, roles, str(users))
    app = create_app(runner, env_tokens, roles=all_roles, token_hashes=hashes, schedule_poll=None)
    paused_thread(runner, "alice", "tf-alice")
    paused_thread(runner, "bob", "tf-bob")
    with TestClient(app) as c:

        def sees(token: str) -> list[str]:
            r = c.get("/api/threads", headers={"Authorization": f"Bearer {token}"})
            assert r.status_code == 200, r.text
            return sorted(t["thread_id"] for t in r.json())

        assert sees("file-alice") == ["tf-alice"]
        assert sees("env-bob") == ["tf-bob"]
        assert sees("file-ops") == sees("file-ops-next") == ["tf-alice", "tf-bob"]
        assert sees("file-vera") == ["tf-alice", "tf-bob"]
        bad = c.get("/api/threads", headers={"Authorization": f"Bearer {sha('file-alice')}"})
        assert bad.status_code == 401  # the hash is no token
        before = tables(runner)
        vera = {"Authorization": "Bearer file-vera"}
        assert c.post("/api/threads/tf-alice/cancel", json={}, headers=vera).status_code == 403
        assert tables(runner) == before
        ops = {"Authorization": "Bearer file-ops"}
        assert c.post("/api/threads/tf-bob/cancel", json={}, headers=ops).status_code == 202


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("alice user plain-secret-token", "line 2: the last field of 'alice' is not sha256:"),
        ("alice root " + sha("x"), "line 2: the role of 'alice' is not one of admin, viewer"),
        ("alice", "line 2 has 1 fields, not 2 or 3"),
        ("alice user x plain-secret-token", "line 2 has 4 fields"),
        ("alice admin " + sha("y"), "line 2: 'alice' is given the role 'admin', and 'user'"),
        ("bob " + sha("a"), "line 2: the token of 'bob' is also 'alice''s"),
    ],
)
def test_a_bad_tokens_file_names_the_line_and_the_fix_and_never_the_token(
    tmp_path: Path, line: str, says: str
) -> None:
    users = tmp_path / "users.txt"
    users.write_text(f"alice {sha('a')}\n{line}\n")
    with pytest.raises(InvalidInput) as caught:
        read_tokens_file(str(users))
    message = str(caught.value)
    assert says in message
    assert "plain-secret-token" not in message
    fixes = ("hashlib.sha256", "a name has one role", "of their own", "one of admin")
    assert any(fix in message for fix in fixes)


def test_the_files_and_the_environments_users_must_agree(tmp_path: Path) -> None:
    hashes = {hashlib.sha256(b"t1").hexdigest(): "alice"}
    with pytest.raises(InvalidInput, match="'alice' is 'admin' in the environment and 'user'"):
        combine({"t9": "alice"}, {"alice": "admin"}, hashes, {"alice": "user"}, "users.txt")
    with pytest.raises(InvalidInput, match="token of 'bob' in the environment is 'alice''s"):
        combine({"t1": "bob"}, {}, hashes, {"alice": "user"}, "users.txt")


def test_serve_refuses_a_bad_tokens_file_before_serving(db_url: str, tmp_path: Path) -> None:
    from conftest import run_cli

    users = tmp_path / "users.txt"
    users.write_text("ops admin tok-in-the-clear\n")
    flag = run_cli("serve", "--port", "1", "--tokens-file", str(users), db=db_url, timeout=60)
    assert flag.returncode != 0
    said = flag.stdout + flag.stderr
    assert "line 1" in said and "sha256" in said and "tok-in-the-clear" not in said
    assert "serving on" not in said
    env = {"LONGTASK_API_TOKENS_FILE": str(tmp_path / "missing.txt")}
    missing = run_cli("serve", "--port", "1", db=db_url, env=env, timeout=60)
    assert missing.returncode != 0
    assert "missing.txt' does not exist" in missing.stdout + missing.stderr


# -- /metrics and who answers, with an auth handler --------------------------------------------

HANDLER = """
from langgraph_sdk import Auth

auth = Auth()
USERS = {
    "tok-alice": {"identity": "alice", "permissions": []},
    "tok-carol": {"identity": "carol", "permissions": []},
    "tok-mon": {"identity": "mon", "permissions": ["metrics:read"]},
}


@auth.authenticate
async def authenticate(authorization: str | None) -> dict:
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or token not in USERS:
        raise Auth.exceptions.HTTPException(status_code=401, detail="Invalid token")
    return USERS[token]


@auth.on
async def owner_only(ctx: Auth.types.AuthContext, value: dict) -> dict:
    filters = {"owner": ctx.user.identity}
    metadata = value.setdefault("metadata", {})
    if isinstance(metadata, dict):
        metadata.update(filters)
    return filters
"""


@pytest.fixture
def handled(runner: Runner, tmp_path: Path) -> Iterator[TestClient]:
    path = tmp_path / "auth_more.py"
    path.write_text(HANDLER)
    # built-in tokens beside the handler: a scrape token, and a user's (not read)
    tokens = {"tok-prom": "prom", "tok-plain": "plain"}
    app = create_app(
        runner,
        tokens,
        roles={"prom": "viewer"},
        auth_handler=load_auth(f"{path}:auth", tmp_path),
        registry=load_registry(["test_access:TASK", "test_access_more:WAITS"]),
        schedule_poll=None,
    )
    with TestClient(app) as c:
        yield c


def test_metrics_with_an_auth_handler(handled: TestClient) -> None:
    def metrics(token: str | None) -> int:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return handled.get("/metrics", headers=headers).status_code

    assert metrics("tok-prom") == 200  # a built-in viewer token: Prometheus
    assert metrics("tok-mon") == 200  # the handler gives metrics:read
    assert metrics("tok-alice") == 403
    alice = {"Authorization": "Bearer tok-alice"}
    assert "metrics:read" in handled.get("/metrics", headers=alice).text
    assert metrics("tok-plain") == 401  # a built-in user token is not read with a handler
    assert metrics(None) == 401
    # the scrape token reads /metrics only: for threads the handler decides
    prom = {"Authorization": "Bearer tok-prom"}
    assert handled.post("/threads/search", json={}, headers=prom).status_code == 401


def test_a_handlers_identity_answers_a_pause_as_by(runner: Runner, handled: TestClient) -> None:
    thread = paused_thread(runner, "alice", "h-pause")  # its approval names carol
    carol = {"Authorization": "Bearer tok-carol"}
    found = handled.post("/threads/search", json={}, headers=carol).json()
    assert [t["thread_id"] for t in found] == [thread]
    r = handled.post(f"/api/threads/{thread}/approve", json={"step": "ok"}, headers=carol)
    assert r.status_code == 202, r.text
    deadline = time.monotonic() + 30
    while runner.status(thread).status != "completed" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert runner.status(thread).status == "completed"
    resolved = [e for e in runner.events(thread) if e.kind == "approval.resolved"]
    assert resolved[-1].data["by"] == "carol"


def test_a_handlers_identity_signals_a_wait_as_by(runner: Runner, handled: TestClient) -> None:
    alice = {"Authorization": "Bearer tok-alice"}
    made = handled.post("/threads", json={"thread_id": "h-wait"}, headers=alice)
    assert made.status_code == 200, made.text
    run = {"assistant_id": "access_waits", "input": {}}
    started = handled.post("/threads/h-wait/runs", json=run, headers=alice)
    assert started.status_code == 200, started.text
    # joined: the run has ended (at the wait), so a signal starts the next one
    joined = handled.get(f"/threads/h-wait/runs/{started.json()['run_id']}/join", headers=alice)
    assert joined.status_code == 200, joined.text
    assert runner.status("h-wait").status == "waiting_external"
    assert runner.db.store.get_thread("h-wait").owner == "alice"  # type: ignore[union-attr]
    carol = {"Authorization": "Bearer tok-carol"}
    signal = {"name": "go", "payload": {"ok": True}}
    refused = handled.post("/api/threads/h-wait/signal", json=signal, headers=carol)
    assert refused.status_code == 404  # not hers, and the wait names nobody
    r = handled.post("/api/threads/h-wait/signal", json=signal, headers=alice)
    assert r.status_code == 202, r.text
    deadline = time.monotonic() + 30
    while runner.status("h-wait").status != "completed" and time.monotonic() < deadline:
        time.sleep(0.05)
    (resolved,) = runner.events("h-wait", kinds=["wait.resolved"])
    assert resolved.data["by"] == "alice"


def test_a_handlers_plain_filter_pages_in_the_query(runner: Runner, handled: TestClient) -> None:
    alice = {"Authorization": "Bearer tok-alice"}
    carol = {"Authorization": "Bearer tok-carol"}
    carols: list[str] = []
    for i in range(9):
        who = carol if i % 3 == 0 else alice
        thread = f"hp-{i}"
        made = handled.post("/threads", json={"thread_id": thread}, headers=who)
        assert made.status_code == 200, made.text
        if who is carol:
            carols.append(thread)
    paused_thread(runner, "alice", "hp-9")  # alice's, its approval names carol
    carols.append("hp-9")
    seen: list[str] = []
    for offset in (0, 2, 4):
        body = {"limit": 2, "offset": offset, "sort_order": "asc"}
        page = handled.post("/threads/search", json=body, headers=carol).json()
        seen += [t["thread_id"] for t in page]
    assert seen == carols
    assert handled.post("/threads/count", json={}, headers=carol).json() == len(carols)
    assert handled.post("/threads/count", json={}, headers=alice).json() == 6
    store = runner.db.store
    assert store.visible_thread_ids(None, metadata={"owner": "carol"}) == carols[2::-1]
    assert store.count_visible_threads("carol", metadata={"owner": "nobody"}) == 1


def test_only_a_plain_filter_is_matched_in_the_query() -> None:
    from longtask.store._visible import simple_filter

    assert simple_filter({"owner": "a", "team": {"$eq": "x"}}) == {"owner": "a", "team": "x"}
    assert simple_filter({"tags": {"$contains": "x"}}) is None
    assert simple_filter({"$or": [{"owner": "a"}]}) is None
    assert simple_filter({"n": 1}) is None
    assert simple_filter({'we"ird': "a"}) is None
    assert simple_filter({}) is None


def test_the_pages_list_takes_a_handlers_plain_filter_in_the_query(
    runner: Runner, handled: TestClient
) -> None:
    alice = {"Authorization": "Bearer tok-alice"}
    carol = {"Authorization": "Bearer tok-carol"}
    for thread, who in (("hl-a", alice), ("hl-c", carol)):
        assert handled.post("/threads", json={"thread_id": thread}, headers=who).status_code == 200
        run = {"assistant_id": "access_waits", "input": {}}
        started = handled.post(f"/threads/{thread}/runs", json=run, headers=who).json()
        joined = handled.get(f"/threads/{thread}/runs/{started['run_id']}/join", headers=who)
        assert joined.status_code == 200, joined.text
    paused_thread(runner, "alice", "hl-p")  # no API metadata; its approval names carol
    listed = handled.get("/api/threads?limit=1&sort=age", headers=carol).json()
    assert [t["thread_id"] for t in listed] == ["hl-c"]
    listed = handled.get("/api/threads?sort=age", headers=carol).json()
    assert [t["thread_id"] for t in listed] == ["hl-c", "hl-p"]
    listed = handled.get("/api/threads", headers=alice).json()
    assert [t["thread_id"] for t in listed] == ["hl-a"]
    store = runner.db.store
    assert [r.thread_id for r in store.list_threads(visible_meta={"owner": "carol"})] == ["hl-c"]
    mine = store.list_threads(visible_to="carol", visible_meta={"owner": "carol"}, sort="age")
    assert [r.thread_id for r in mine] == ["hl-c", "hl-p"]


def test_with_built_in_tokens_metadata_cannot_hand_a_thread_to_another(
    runner: Runner, client: TestClient
) -> None:
    """Issue 50: ownership is the stored owner, not metadata. A PATCH (or a new thread, or a
    run) whose metadata ``owner`` names anyone but the owner is refused, changes nothing,
    and so plants nothing in that person's list; naming the owner is allowed."""
    bob, alice = CALLERS["bob"], CALLERS["alice"]
    made = client.post("/threads", json={"metadata": {"k": "v"}}, headers=bob).json()
    thread = made["thread_id"]
    before = tables(runner)
    handed = client.patch(
        f"/threads/{thread}", json={"metadata": {"owner": "alice", "k": "w"}}, headers=bob
    )
    assert handed.status_code == 403, handed.text
    assert "ownership is not metadata" in handed.json()["detail"]
    admin = client.patch(
        f"/threads/{thread}", json={"metadata": {"owner": "alice"}}, headers=CALLERS["admin"]
    )
    assert admin.status_code == 403, admin.text
    assert tables(runner) == before
    assert client.post("/threads/search", json={}, headers=alice).json() == []
    assert (
        client.post("/threads/search", json={"metadata": {"owner": "alice"}}, headers=alice).json()
        == []
    )
    assert client.get(f"/threads/{thread}", headers=alice).status_code == 404
    # at creation, and on a run that creates its thread
    planted = client.post("/threads", json={"metadata": {"owner": "alice"}}, headers=bob)
    assert planted.status_code == 403, planted.text
    run = {"assistant_id": "access_task", "input": {}, "metadata": {"owner": "alice"}}
    assert client.post("/runs", json=run, headers=bob).status_code == 403
    assert tables(runner) == before
    # the owner's own name is no change of owner
    kept = client.patch(
        f"/threads/{thread}", json={"metadata": {"owner": "bob", "k": "w"}}, headers=bob
    )
    assert kept.status_code == 200, kept.text
    assert kept.json()["metadata"] == {"k": "w", "owner": "bob"}
    assert runner.db.store.thread_owner(thread) == (True, "bob")
