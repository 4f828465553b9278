"""A run's stream modes when a client names none (issue 52 item 3), on both backends, as
LangGraph's server reads them: a run asked with ``stream_mode`` missing or ``[]`` streams
``values``; joining a run's stream with ``stream_mode`` empty (what the Python SDK's
``runs.join_stream`` sends by default) or absent streams the modes the run was asked with;
a JSON list in the query (as the SDKs send a list) names several."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from served_graphs import served
from starlette.testclient import TestClient

from longtask import Runner


@pytest.fixture
def client(runner: Runner, tmp_path: Path) -> Iterator[TestClient]:
    with served(runner, tmp_path, {"echo": "echo_graph.py"}) as c:
        yield c


def _events(text: str) -> list[str]:
    return [line[len("event: ") :] for line in text.splitlines() if line.startswith("event: ")]


def _run(client: TestClient, thread: str, **body: Any) -> Any:
    r = client.post(
        f"/threads/{thread}/runs", json={"assistant_id": "echo", "input": {"said": ["hi"]}, **body}
    )
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize("given", [None, []])
def test_a_run_asked_with_no_modes_streams_values(client: TestClient, given: Any) -> None:
    thread = client.post("/threads", json={}).json()["thread_id"]
    body: dict[str, Any] = {"assistant_id": "echo", "input": {"said": ["hi"]}}
    if given is not None:
        body["stream_mode"] = given
    r = client.post(f"/threads/{thread}/runs/stream", json=body)
    assert r.status_code == 200, r.text
    events = _events(r.text)
    assert events[0] == "metadata" and "values" in events, events
    assert set(events) == {"metadata", "values"}, events


@pytest.mark.parametrize("query", ["", "?stream_mode=", '?stream_mode=["updates"]'])
def test_joining_a_runs_stream_with_no_modes_streams_the_runs_own(
    client: TestClient, query: str
) -> None:
    thread = client.post("/threads", json={}).json()["thread_id"]
    run = _run(client, thread, stream_mode=["values", "updates"])
    r = client.get(f"/threads/{thread}/runs/{run['run_id']}/stream{query}")
    assert r.status_code == 200, r.text
    events = set(_events(r.text))
    wanted = {"metadata", "updates"} if "updates" in query else {"metadata", "values", "updates"}
    assert events == wanted, r.text
