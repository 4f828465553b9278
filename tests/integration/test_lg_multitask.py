"""Multitask strategies of the LangGraph Server API, on every backend: a run sent while
another run of its thread is open is queued behind it (``enqueue``, the default, as on
LangGraph's server) and planned — checked against the thread as it is then — when its
turn comes; ``reject`` refuses it; ``interrupt`` and ``rollback`` are refused with the
reason. No request runs a task: the executor carries the queue out in order."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from longtask import Runner
from longtask.serve import create_app
from longtask.serve._registry import load_registry

TASKS = Path(__file__).parent / "mt_task.py"
ALICE = {"X-Api-Key": "tok-alice"}
START = {"assistant_id": "mt_held", "input": {}}
APPROVE = {"assistant_id": "mt_held", "command": {"resume": {"approved": True}}}


@pytest.fixture
def gate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "gate"
    monkeypatch.setenv("LT_MT_GATE", str(path))
    return path


@pytest.fixture
def runner(db_url: str) -> Iterator[Runner]:
    r = Runner(db_url)
    yield r
    r.close()


@pytest.fixture
def client(runner: Runner, gate: Path) -> Iterator[TestClient]:
    registry = load_registry([f"{TASKS}:HELD"])
    with TestClient(
        create_app(runner, {"tok-alice": "alice"}, registry=registry), headers=ALICE
    ) as c:
        yield c


def _ended(client: TestClient, thread: str, run_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        run = client.get(f"/threads/{thread}/runs/{run_id}").json()
        if run["status"] not in ("pending", "running"):
            return dict(run)
        assert time.monotonic() < deadline, f"run {run_id} did not end"
        time.sleep(0.02)


def _held_thread(client: TestClient, runner: Runner) -> tuple[str, str]:
    """A thread whose first run is open, held inside its first step."""
    thread = client.post("/threads", json={}, headers=ALICE).json()["thread_id"]
    first = client.post(f"/threads/{thread}/runs", json=START, headers=ALICE).json()
    deadline = time.monotonic() + 30
    while not any(e.kind == "step.started" for e in _events(runner, thread)):
        assert time.monotonic() < deadline, "the first run did not start its step"
        time.sleep(0.02)
    return thread, first["run_id"]


def _events(runner: Runner, thread: str) -> list[Any]:
    return list(runner.events(thread)) if runner.db.store.get_thread(thread) else []


def test_a_resume_sent_while_the_run_is_open_is_queued_and_answers_the_pause(
    client: TestClient, runner: Runner, gate: Path
) -> None:
    thread, first = _held_thread(client, runner)
    # Sent before the pause exists: nothing to answer yet, so it cannot be checked now.
    queued = client.post(f"/threads/{thread}/runs", json=APPROVE, headers=ALICE)
    assert queued.status_code == 200, queued.text
    assert queued.json()["status"] == "pending"
    assert queued.json()["multitask_strategy"] == "enqueue"  # the default, as on LangGraph's
    # reject refuses while a run is open, naming the other strategy; it records nothing
    refused = client.post(
        f"/threads/{thread}/runs", json={**APPROVE, "multitask_strategy": "reject"}, headers=ALICE
    )
    assert refused.status_code == 409 and "enqueue" in refused.json()["error"], refused.text
    runs = client.get(f"/threads/{thread}/runs").json()
    assert [r["status"] for r in runs] == ["pending", "running"]  # newest first
    assert client.get(f"/threads/{thread}/runs/{queued.json()['run_id']}").json()["status"] == (
        "pending"
    )
    gate.touch()
    assert _ended(client, thread, first)["status"] == "success"
    assert _ended(client, thread, queued.json()["run_id"])["status"] == "success"
    assert runner.status(thread, usage=False).status == "completed"
    assert runner.result(thread, "after") == "after, approved by alice"
    resolved = [e for e in _events(runner, thread) if e.kind == "approval.resolved"]
    assert [e.data["by"] for e in resolved] == ["alice"]


def test_a_queued_run_that_no_longer_fits_ends_in_error_and_changes_nothing(
    client: TestClient, runner: Runner, gate: Path
) -> None:
    thread, first = _held_thread(client, runner)
    one = client.post(f"/threads/{thread}/runs", json=APPROVE, headers=ALICE).json()
    two = client.post(f"/threads/{thread}/runs", json=APPROVE, headers=ALICE).json()
    gate.touch()
    for run_id in (first, one["run_id"]):
        assert _ended(client, thread, run_id)["status"] == "success"
    second = _ended(client, thread, two["run_id"])
    assert second["status"] == "error"
    assert runner.status(thread, usage=False).status == "completed"
    kinds = [e.kind for e in _events(runner, thread)]
    assert kinds.count("approval.resolved") == 1
    joined = client.get(f"/threads/{thread}/runs/{two['run_id']}/join").json()
    assert "not waiting for an answer" in joined["__error__"]["message"]


def test_a_queued_run_streams_once_its_turn_comes(
    client: TestClient, runner: Runner, gate: Path
) -> None:
    thread, first = _held_thread(client, runner)
    threading.Timer(0.5, gate.touch).start()
    body = {**APPROVE, "stream_mode": ["values"]}
    with client.stream("POST", f"/threads/{thread}/runs/stream", json=body, headers=ALICE) as r:
        assert r.status_code == 200
        text = "".join(r.iter_text())
    lines = text.splitlines()
    events = [line.removeprefix("event: ") for line in lines if line.startswith("event:")]
    assert events[0] == "metadata" and "values" in events and "error" not in events
    values = [
        json.loads(line.removeprefix("data: "))
        for line in text.splitlines()
        if line.startswith("data: ") and '"after"' in line
    ]
    assert values and values[-1]["after"] == "after, approved by alice"
    assert _ended(client, thread, first)["status"] == "success"


@pytest.mark.parametrize("strategy", ["interrupt", "rollback"])
def test_strategies_that_would_cancel_the_open_run_are_refused(
    client: TestClient, runner: Runner, strategy: str
) -> None:
    thread = client.post("/threads", json={}, headers=ALICE).json()["thread_id"]
    got = client.post(
        f"/threads/{thread}/runs", json={**START, "multitask_strategy": strategy}, headers=ALICE
    )
    assert got.status_code == 422 and "runs.cancel" in got.json()["detail"], got.text
    assert client.get(f"/threads/{thread}/runs").json() == []
    assert runner.db.store.get_thread(thread) is None
