"""The LangGraph Server API of ``longtask serve`` in process (Starlette's TestClient), on
every backend: task registration, the SDK's X-Api-Key as the token, answers checked before
anything is recorded, update_state, delete, and recovery of a thread a dead process left
running. The SDK itself drives a real server in tests/acceptance/test_langgraph_sdk.py."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from serve_access import AdminClient
from starlette.testclient import TestClient

from longtask import InvalidInput, Runner
from longtask.errors import TaskRefError
from longtask.runtime import load_task
from longtask.serve import create_app
from longtask.serve._executor import Executor
from longtask.serve._registry import assistant_id, load_registry

LG_TASKS = Path(__file__).parents[1] / "acceptance" / "lg_task.py"
RELEASE_REF = f"{LG_TASKS}:RELEASE"
SLEEPY_REF = f"{LG_TASKS}:SLEEPY"
TOKENS = {"tok-alice": "alice", "tok-bob": "bob"}
ALICE = {"X-Api-Key": "tok-alice"}
BOB = {"X-Api-Key": "tok-bob"}


@pytest.fixture
def runner(db_url: str) -> Iterator[Runner]:
    r = Runner(db_url)
    yield r
    r.close()


@pytest.fixture
def client(runner: Runner) -> Iterator[TestClient]:
    registry = load_registry([RELEASE_REF, SLEEPY_REF])
    with AdminClient(create_app(runner, TOKENS, registry=registry)) as c:
        yield c


def wait_run(client: TestClient, thread_id: str, run_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        run = client.get(f"/threads/{thread_id}/runs/{run_id}").json()
        if run["status"] not in ("pending", "running"):
            return dict(run)
        assert time.monotonic() < deadline, "the run did not finish"
        time.sleep(0.02)


def paused(client: TestClient) -> str:
    thread = client.post("/threads", json={}, headers=ALICE).json()["thread_id"]
    run = client.post(
        f"/threads/{thread}/runs", json={"assistant_id": "lg_release", "input": {}}, headers=ALICE
    ).json()
    # A run that stops at a pause succeeded (LangGraph's server says so too).
    assert wait_run(client, thread, run["run_id"])["status"] == "success"
    assert client.get(f"/threads/{thread}").json()["status"] == "interrupted"
    return str(thread)


def test_tasks_register_from_options_and_a_config_file(tmp_path: Path) -> None:
    config = tmp_path / "longtask.json"
    config.write_text(json.dumps({"graphs": {"release": RELEASE_REF}}))
    registry = load_registry([SLEEPY_REF], config)
    assert sorted(registry.by_name) == ["lg_sleepy", "release"]
    # The assistant id is derived from the name: the same in every process.
    found = registry.find(assistant_id("release"))
    assert found is not None and found.task.name == "lg_release"
    assert registry.find("release") is found

    config.write_text(json.dumps({"tasks": ["not", "a", "map"]}))
    with pytest.raises(InvalidInput, match="must hold"):
        load_registry([], config)
    with pytest.raises(InvalidInput, match="no task file"):
        load_registry([], tmp_path / "missing.json")
    with pytest.raises(TaskRefError):
        load_registry([f"{LG_TASKS}:NOPE"])


def test_the_sdk_api_key_is_the_token_and_the_actor_never_comes_from_the_body(
    runner: Runner, client: TestClient
) -> None:
    assert TestClient(client.app).post("/threads", json={}).status_code == 401
    assert client.post("/threads", json={}, headers={"X-Api-Key": "wrong"}).status_code == 401
    thread = paused(client)
    before = runner.status(thread, usage=False).model_dump()  # usage: wall time runs on
    url = f"/threads/{thread}/runs"

    def resume(value: Any, headers: dict[str, str]) -> Any:
        body = {"assistant_id": "lg_release", "command": {"resume": value}}
        return client.post(url, json=body, headers=headers)

    by = resume({"approved": True, "by": "alice"}, BOB)
    assert by.status_code == 409
    assert "'by' is not accepted" in by.json()["error"]
    not_approver = resume(True, BOB)
    assert not_approver.status_code == 409 and "bob" in not_approver.json()["error"]
    changed = {"plan": {"total": 99, "to": "prod"}}
    edit = resume({"decisions": [{"type": "edit", "edited_action": {"args": changed}}]}, ALICE)
    assert "cannot be edited" in edit.json()["error"]
    respond = resume([{"type": "response", "args": "no"}], BOB)  # Agent Inbox's shape
    assert respond.status_code == 409 and "bob" in respond.json()["error"]
    ignore = resume([{"type": "ignore", "args": None}], ALICE)
    assert ignore.status_code == 409 and "does not offer ignore" in ignore.json()["error"]
    # Refused answers record no run and change nothing.
    assert len(client.get(url).json()) == 1
    assert runner.status(thread, usage=False).model_dump() == before

    ok = resume({"decisions": [{"type": "approve", "message": "fine"}]}, ALICE)
    assert ok.status_code == 200, ok.text
    assert ok.headers["content-location"] == f"/threads/{thread}/runs/{ok.json()['run_id']}"
    wait_run(client, thread, ok.json()["run_id"])
    decision = runner.result(thread, "ship_ok")
    assert (decision["by"], decision["comment"]) == ("alice", "fine")


def test_update_state_sets_a_steps_result_or_refuses(runner: Runner, client: TestClient) -> None:
    thread = paused(client)
    state = f"/threads/{thread}/state"
    bad = client.post(state, json={"values": {"nope": 1}}, headers=ALICE)
    assert bad.status_code == 409 and "not a step of task 'lg_release'" in bad.json()["error"]
    r = client.post(state, json={"values": {"fetch_a": {"a": 40}}}, headers=ALICE)
    assert r.status_code == 200, r.text
    assert r.json()["checkpoint"]["checkpoint_id"]
    assert client.get(state).json()["values"]["fetch_a"] == {"a": 40}
    assert runner.result(thread, "fetch_a") == {"a": 40}


def test_update_sets_metadata_and_delete_removes_only_a_thread_with_no_run(
    client: TestClient,
) -> None:
    fresh = client.post("/threads", json={"metadata": {"k": 1}}, headers=ALICE).json()
    assert fresh["status"] == "idle" and fresh["metadata"] == {"k": 1}
    assert client.delete(f"/threads/{fresh['thread_id']}", headers=ALICE).status_code == 204
    assert client.get(f"/threads/{fresh['thread_id']}").status_code == 404
    started = paused(client)
    one = f"/threads/{started}"
    patched = client.patch(one, json={"metadata": {"team": "ops"}}, headers=ALICE)
    assert patched.json()["metadata"]["team"] == "ops"
    assert patched.json()["metadata"]["graph_id"] == "lg_release"
    reserved = client.patch(one, json={"metadata": {"graph_id": "x"}}, headers=ALICE)
    assert reserved.status_code == 409
    refused = client.delete(f"/threads/{started}", headers=ALICE)
    assert refused.status_code == 409 and "longtask cancel" in refused.json()["error"]
    assert client.get(f"/threads/{started}").json()["status"] == "interrupted"


def test_serve_continues_a_thread_a_dead_process_left_running(
    runner: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LT_SLEEPY", "0")
    task = load_task(SLEEPY_REF)
    # What a process that died before its first checkpoint leaves: a thread record that
    # says running, and no lock held.
    runner.engine.new_thread(task, {}, "left-running", SLEEPY_REF, None)
    runner.db.store.set_status("left-running", "running")
    registry = load_registry([SLEEPY_REF])
    with AdminClient(create_app(runner, TOKENS, registry=registry)) as client:
        deadline = time.monotonic() + 60
        while runner.status("left-running").status != "completed":
            assert time.monotonic() < deadline, "serve did not continue the thread"
            time.sleep(0.02)
        values = client.get("/threads/left-running/state").json()["values"]
    assert values == {"nap1": "nap1", "nap2": "nap2", "nap3": "nap3"}


def test_a_thread_of_a_task_serve_cannot_import_is_listed_without_its_state(
    runner: Runner, client: TestClient, tmp_path: Path
) -> None:
    task = load_task(f"{LG_TASKS}:LONG")  # not registered with this server
    runner.engine.new_thread(task, {}, "orphan", f"{tmp_path / 'gone.py'}:LONG", None)
    found = client.post("/threads/search", json={"ids": ["orphan"]}).json()
    assert [t["thread_id"] for t in found] == ["orphan"]
    assert "does not exist" in found[0]["metadata"]["longtask_error"]
    assert found[0]["values"] == {}


def test_serve_carries_out_runs_a_dead_serve_left_open(
    runner: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LT_SLEEPY", "0")
    store = runner.db.store
    sleepy = assistant_id("lg_sleepy")
    start = {"kind": "start", "graph": "lg_sleepy", "input": {}, "stream_mode": ["values"]}
    # Recorded, never taken: serve died right after answering the request.
    store.api_thread_put("never-taken", {})
    store.api_run_create("run-1", "never-taken", sleepy, dict(start), "alice", None)
    # Taken, and the thread recorded, but serve died before the thread's first advance.
    store.api_thread_put("half-started", {})
    store.api_run_create("run-2", "half-started", sleepy, dict(start), "alice", None)
    assert store.api_run_claim("run-2", "pending")
    runner.engine.new_thread(load_task(SLEEPY_REF), {}, "half-started", SLEEPY_REF, None)
    assert runner.status("half-started").status == "pending"

    registry = load_registry([SLEEPY_REF])
    with AdminClient(create_app(runner, TOKENS, registry=registry)) as client:
        for thread_id, run_id in (("never-taken", "run-1"), ("half-started", "run-2")):
            assert wait_run(client, thread_id, run_id)["status"] == "success"
            assert runner.status(thread_id).status == "completed"


def test_a_cancel_is_recorded_before_it_is_answered(
    runner: Runner, client: TestClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The request records the cancel itself: even when nothing carries out the executor's
    part (this process dying right after answering), the run stops and compensates."""
    gate = tmp_path / "gate"
    monkeypatch.setenv("LT_SLEEPY_GATE", str(gate))
    thread = client.post("/threads", json={}, headers=ALICE).json()["thread_id"]
    run = client.post(
        f"/threads/{thread}/runs", json={"assistant_id": "lg_sleepy", "input": {}}, headers=ALICE
    ).json()
    deadline = time.monotonic() + 30
    while runner.db.store.get_thread(thread) is None:
        assert time.monotonic() < deadline, "the run never started"
        time.sleep(0.02)
    # The executor's part is lost with the process.
    monkeypatch.setattr(Executor, "submit_cancel", lambda self, *a: None)
    answer = client.post(f"/threads/{thread}/runs/{run['run_id']}/cancel", headers=BOB)
    assert answer.status_code == 202
    assert runner.db.store.cancel_request(thread) is not None
    cancels = [e for e in runner.events(thread) if e.kind == "manual.cancel"]
    assert len(cancels) == 1 and cancels[0].data["by"] == "bob"
    gate.touch()
    assert wait_run(client, thread, run["run_id"])["status"] in ("interrupted", "error")
    assert runner.status(thread).status == "cancelled"
    # The step running when the cancel came may finish; no later step runs.
    assert set(runner.results(thread)) <= {"nap1"}
    assert "nap3" not in {e.step for e in runner.events(thread)}


def test_a_command_beside_an_empty_input_wins_and_input_with_content_is_refused(
    runner: Runner, client: TestClient
) -> None:
    """useStream's ``submit({}, {command})`` sends ``input: {}`` with the command: it resumes,
    as on LangGraph's server. Input with content beside a command would be dropped: 409,
    nothing recorded."""
    thread = paused(client)
    url = f"/threads/{thread}/runs"
    both = client.post(
        url,
        json={"assistant_id": "lg_release", "input": {"x": 1}, "command": {"resume": True}},
        headers=ALICE,
    )
    assert both.status_code == 409 and "not both" in both.json()["error"], both.text
    assert len(client.get(url).json()) == 1
    assert runner.status(thread, usage=False).status == "waiting_user"
    ok = client.post(
        url,
        json={"assistant_id": "lg_release", "input": {}, "command": {"resume": True}},
        headers=ALICE,
    )
    assert ok.status_code == 200, ok.text
    assert wait_run(client, thread, ok.json()["run_id"])["status"] in ("success", "interrupted")
    assert runner.result(thread, "ship_ok")["by"] == "alice"


MALFORMED = [
    ("GET", "/threads/{t}/history?limit=-1", None, "limit"),
    ("GET", "/threads/{t}/history?limit=ten", None, "limit"),
    ("POST", "/threads/{t}/history", {"limit": -1}, "limit"),
    ("POST", "/threads/{t}/history", {"before": 109526}, "before"),
    ("POST", "/threads/search", {"offset": [None]}, "offset"),
    ("POST", "/threads/search", {"limit": "x"}, "limit"),
    ("POST", "/threads/search", {"ids": "abc"}, "ids"),
    ("POST", "/threads/count", {"metadata": 5}, "metadata"),
    ("POST", "/assistants/search", {"limit": -5}, "limit"),
    ("POST", "/assistants/search", {"metadata": 5}, "metadata"),
    ("POST", "/threads/{t}/runs", {"assistant_id": "lg_release", "command": [None]}, "command"),
    # issue 39: these were 500s (AttributeError, TypeError) or took a number as an id
    ("POST", "/threads/{t}/state/checkpoint", {"checkpoint": [None, None]}, "checkpoint"),
    ("POST", "/threads/{t}/state/checkpoint", {"checkpoint": "x"}, "checkpoint"),
    ("POST", "/threads/{t}/state/checkpoint", {"checkpoint": {"checkpoint_id": 7}}, "checkpoint."),
    ("POST", "/threads/{t}/runs", {"assistant_id": "lg_release", "config": "x"}, "config"),
    (
        "POST",
        "/threads/{t}/runs",
        {"assistant_id": "lg_release", "config": {"configurable": "x"}},
        "config.configurable",
    ),
    (
        "POST",
        "/runs/wait",
        {"assistant_id": "lg_release", "input": {}, "config": {"metadata": [1]}},
        "config.metadata",
    ),
    ("POST", "/threads", {"thread_id": 12}, "thread_id"),
]


@pytest.mark.parametrize(("method", "path", "body", "field"), MALFORMED)
def test_a_malformed_request_is_a_422_naming_the_field(
    runner: Runner, client: TestClient, method: str, path: str, body: Any, field: str
) -> None:
    thread = paused(client)
    before = runner.status(thread, usage=False).model_dump()
    url = path.format(t=thread)
    got = client.request(method, url, json=body, headers=ALICE)
    assert got.status_code == 422, got.text
    assert got.json()["detail"].startswith(field), got.json()
    assert runner.status(thread, usage=False).model_dump() == before
    assert len(client.get(f"/threads/{thread}/runs").json()) == 1
    # the server goes on answering
    assert client.get(f"/threads/{thread}/state").status_code == 200


def test_an_empty_update_is_refused_before_a_run_is_recorded(
    runner: Runner, client: TestClient
) -> None:
    thread = paused(client)
    got = client.post(
        f"/threads/{thread}/runs",
        json={"assistant_id": "lg_release", "command": {"update": {}}},
        headers=ALICE,
    )
    assert got.status_code == 409 and "update is empty" in got.json()["error"], got.text
    assert len(client.get(f"/threads/{thread}/runs").json()) == 1


def test_assistants_search_filters_by_metadata(client: TestClient) -> None:
    found = client.post("/assistants/search", json={"metadata": {"created_by": "system"}})
    assert sorted(a["graph_id"] for a in found.json()) == ["lg_release", "lg_sleepy"]
    none = client.post("/assistants/search", json={"metadata": {"created_by": "someone"}})
    assert none.json() == []


def test_unserved_endpoints_say_what_to_use_instead(
    runner: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every endpoint of LangGraph's server is served now (test_lg_contract.py checks it
    against its spec); one a later server adds is answered with what to use instead, 404
    for a new path and 405 for a new method on a served path, never a bare "Not Found"."""
    from longtask.serve._hints import Hints
    from longtask.serve.lgapi import _unserved

    planted = [
        ("/threads/{thread_id}/future", ["POST"], 404, "use `longtask resume THREAD`"),
        ("/threads/{thread_id}/runs/{run_id}", ["PUT"], 405, "cancel it instead"),
    ]
    monkeypatch.setattr(_unserved, "UNSERVED", planted)
    registry = load_registry([RELEASE_REF, SLEEPY_REF])
    with AdminClient(create_app(runner, TOKENS, registry=registry)) as client:
        # The commands a message names carry the server's --db (issue 29, item 2).
        hints = Hints(runner.db.url.raw)
        thread = paused(client)
        run_id = client.get(f"/threads/{thread}/runs").json()[0]["run_id"]
        ids = {"thread_id": thread, "run_id": run_id}
        for path, methods, status, message in planted:
            for method in methods:
                got = client.request(method, path.format(**ids), json={}, headers=ALICE)
                assert got.status_code == status, (method, path, got.text)
                assert got.json()["error"] == hints.in_text(f"not served by longtask: {message}")
        # what is served is answered as before
        assert client.get(f"/threads/{thread}/runs/{run_id}").json()["run_id"] == run_id
        assert client.get("/assistants/lg_release").json()["graph_id"] == "lg_release"
    assert runner.status(thread, usage=False).status == "waiting_user"


@pytest.mark.parametrize(
    ("option", "named"),
    [
        ({"multitask_strategy": "interrupt"}, "multitask_strategy 'interrupt'"),
        ({"multitask_strategy": "rollback"}, "multitask_strategy 'rollback'"),
        ({"interrupt_before": ["ship_ok"]}, "interrupt_before"),
        ({"interrupt_after": "*"}, "interrupt_after"),
        ({"after_seconds": 30}, "after_seconds"),
        ({"checkpoint_id": "1f0-abc"}, "checkpoint_id"),
    ],
)
def test_run_options_longtask_does_not_carry_out_are_refused(
    runner: Runner, client: TestClient, option: dict[str, Any], named: str
) -> None:
    thread = client.post("/threads", json={}, headers=ALICE).json()["thread_id"]
    got = client.post(
        f"/threads/{thread}/runs",
        json={"assistant_id": "lg_release", "input": {}, **option},
        headers=ALICE,
    )
    assert got.status_code == 422, got.text
    assert named in got.json()["detail"]
    assert client.get(f"/threads/{thread}/runs").json() == []
    assert runner.db.store.get_thread(thread) is None  # nothing started
    # reject is carried out: accepted
    ok = client.post(
        f"/threads/{thread}/runs",
        json={"assistant_id": "lg_release", "input": {}, "multitask_strategy": "reject"},
        headers=ALICE,
    )
    assert ok.status_code == 200, ok.text


def test_a_rollback_cancel_is_refused(client: TestClient) -> None:
    thread = paused(client)
    run_id = client.get(f"/threads/{thread}/runs").json()[0]["run_id"]
    got = client.post(f"/threads/{thread}/runs/{run_id}/cancel?action=rollback", headers=ALICE)
    assert got.status_code == 422 and "rollback" in got.json()["detail"], got.text


def test_threads_search_sorts_and_selects(client: TestClient) -> None:
    made = [client.post("/threads", json={}, headers=ALICE).json()["thread_id"] for _ in range(3)]
    time.sleep(0.01)
    asc = client.post(
        "/threads/search", json={"sort_by": "created_at", "sort_order": "asc", "limit": 100}
    ).json()
    assert [t["thread_id"] for t in asc if t["thread_id"] in made] == made
    desc = client.post("/threads/search", json={"limit": 100}).json()  # newest first
    assert [t["thread_id"] for t in desc if t["thread_id"] in made] == made[::-1]
    picked = client.post("/threads/search", json={"select": ["thread_id", "status"]}).json()
    assert picked and all(set(t) == {"thread_id", "status"} for t in picked)
    bad = client.post("/threads/search", json={"sort_by": "colour"})
    assert bad.status_code == 422 and "sort_by" in bad.json()["detail"]


def test_a_thread_made_of_supersteps_is_refused(runner: Runner, client: TestClient) -> None:
    before = len(client.post("/threads/search", json={"limit": 1000}).json())
    got = client.post(
        "/threads",
        json={"supersteps": [{"updates": [{"values": {}, "as_node": "fetch_a"}]}]},
        headers=ALICE,
    )
    assert got.status_code == 422 and "supersteps" in got.json()["detail"], got.text
    assert len(client.post("/threads/search", json={"limit": 1000}).json()) == before


def test_a_new_message_on_a_finished_thread_says_to_start_a_new_thread(
    client: TestClient, runner: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LT_SLEEPY", "0")
    thread = client.post("/threads", json={}, headers=ALICE).json()["thread_id"]
    body = {"assistant_id": "lg_sleepy", "input": {}}
    run = client.post(f"/threads/{thread}/runs", json=body, headers=ALICE).json()
    assert wait_run(client, thread, run["run_id"])["status"] == "success"
    again = client.post(
        f"/threads/{thread}/runs", json={**body, "input": {"more": 1}}, headers=ALICE
    )
    assert again.status_code == 409
    assert "runs its task once; start a new thread" in again.json()["error"], again.text
    assert "answer what it waits for" not in again.json()["error"]
    assert len(client.get(f"/threads/{thread}/runs").json()) == 1
