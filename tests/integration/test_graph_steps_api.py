"""Graph steps that pause, answered through the LangGraph Server API of ``longtask serve``
in process (Starlette's TestClient), on every backend: the graph's own interrupts show in
the thread's state, and a run with ``command={"resume": {id: value}}`` answers them one at
a time, recorded as answered by the token's name."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from serve_access import AdminClient
from starlette.testclient import TestClient

from longtask import Runner
from longtask.serve import create_app
from longtask.serve._registry import load_registry

REF = f"{Path(__file__).parents[1] / 'acceptance' / 'graph_task.py'}:GRAPH_PAUSE"
ALICE = {"X-Api-Key": "tok-alice"}


@pytest.fixture
def client(db_url: str) -> Iterator[TestClient]:
    runner = Runner(db_url)
    with AdminClient(
        create_app(runner, {"tok-alice": "alice"}, registry=load_registry([REF]))
    ) as c:
        c.runner = runner  # type: ignore[attr-defined]
        yield c
    runner.close()


def wait_run(client: TestClient, thread_id: str, run_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        run = client.get(f"/threads/{thread_id}/runs/{run_id}", headers=ALICE).json()
        if run["status"] not in ("pending", "running"):
            return dict(run)
        assert time.monotonic() < deadline, "the run did not finish"
        time.sleep(0.02)


def run(client: TestClient, thread: str, **body: Any) -> dict[str, Any]:
    posted = client.post(
        f"/threads/{thread}/runs",
        json={"assistant_id": "lg_graph_pause", **body},
        headers=ALICE,
    )
    assert posted.status_code == 200, posted.text
    return wait_run(client, thread, posted.json()["run_id"])


def test_graph_interrupts_are_answered_through_the_server_api(client: TestClient) -> None:
    thread = client.post("/threads", json={}, headers=ALICE).json()["thread_id"]
    assert run(client, thread, input={})["status"] == "success"
    assert client.get(f"/threads/{thread}", headers=ALICE).json()["status"] == "interrupted"
    state = client.get(f"/threads/{thread}/state", headers=ALICE).json()
    interrupts = {i["value"]["step"]: i for t in state["tasks"] for i in t["interrupts"]}
    assert set(interrupts) == {"asks", "stops"}
    assert interrupts["asks"]["value"]["value"] == {"question": "how much to add?", "n": 1}
    assert interrupts["stops"]["value"]["next"] == ["tools"]

    # several pending: an answer not keyed by id is refused, nothing recorded
    refused = client.post(
        f"/threads/{thread}/runs",
        json={"assistant_id": "lg_graph_pause", "command": {"resume": {"add": 1}}},
        headers=ALICE,
    )
    assert refused.status_code == 409 and "interrupt id" in refused.json()["error"]

    asks = interrupts["asks"]["id"]
    assert run(client, thread, command={"resume": {asks: {"add": 9}}})["status"] == "success"
    assert client.get(f"/threads/{thread}", headers=ALICE).json()["status"] == "interrupted"
    stops = interrupts["stops"]["id"]
    assert run(client, thread, command={"resume": {stops: {}}})["status"] == "success"
    assert client.get(f"/threads/{thread}", headers=ALICE).json()["status"] == "idle"

    runner: Runner = client.runner  # type: ignore[attr-defined]
    assert runner.result(thread, "asks") == {"n": 10, "trail": ["first", "ask"]}
    assert runner.result(thread, "stops") == 11
    resolved = runner.events(thread, kinds=["interrupt.resolved"])
    assert [(e.step, e.data["by"]) for e in resolved] == [("asks", "alice"), ("stops", "alice")]


def test_the_pages_json_api_answers_a_graph_interrupt(client: TestClient) -> None:
    thread = client.post("/threads", json={}, headers=ALICE).json()["thread_id"]
    assert run(client, thread, input={})["status"] == "success"
    pending = client.get(f"/api/threads/{thread}/pending", headers=ALICE).json()
    by_step = {p["step"]: p for p in pending}
    url = f"/api/threads/{thread}/answer"
    # not the id of a pending interrupt: refused, nothing recorded
    wrong = client.post(url, json={"interrupt": "nope", "value": {}}, headers=ALICE)
    assert wrong.status_code in (400, 409, 422), wrong.text
    assert len(client.get(f"/threads/{thread}/runs", headers=ALICE).json()) == 1
    for step, value in (("asks", {"add": 2}), ("stops", {})):
        sent = client.post(
            url, json={"interrupt": by_step[step]["interrupt_id"], "value": value}, headers=ALICE
        )
        assert sent.status_code == 202, sent.text
        wait_run(client, thread, sent.json()["run_id"])
    runner: Runner = client.runner  # type: ignore[attr-defined]
    assert runner.status(thread).status == "completed"
    assert runner.result(thread, "asks") == {"n": 3, "trail": ["first", "ask"]}
    page = client.get(f"/threads/{thread}", headers={**ALICE, "Accept": "text/html"})
    assert page.status_code == 200 and "answerForm" in page.text
