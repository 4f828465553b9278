"""LangGraph's store reaches the graphs longtask runs (issue 52 item 1), on both backends:
a served plain graph (``memory_graph.py``, from a langgraph.json) and the same graph as a
LongTask's graph step reach the store through ``runtime.store``, an injected ``store``
parameter and ``get_store()`` (async), and it is the store the Server API's ``/store``
routes serve: what a graph wrote, the API reads, and the reverse."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import memory_graph
import pytest
from served_graphs import served
from starlette.testclient import TestClient

from longtask import LongTask, Runner, Stage, graph_step


@pytest.fixture
def client(runner: Runner, tmp_path: Path) -> Iterator[TestClient]:
    with served(runner, tmp_path, {"memory": "memory_graph.py"}) as c:
        yield c


def _turn(client: TestClient, thread: str, said: str) -> Any:
    body = {"assistant_id": "memory", "input": {"user": "alice", "said": [said]}}
    r = client.post(f"/threads/{thread}/runs/wait", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_a_served_graph_keeps_memories_in_the_store_the_api_serves(client: TestClient) -> None:
    thread = client.post("/threads", json={}).json()["thread_id"]
    first = _turn(client, thread, "I like tea")
    assert (first["recalled"], first["seen"]) == (1, ["I like tea"])
    # stored through the API, read by the graph on its next turn
    r = client.put(
        "/store/items",
        json={"namespace": ["alice", "memories"], "key": "api", "value": {"text": "from the API"}},
    )
    assert r.status_code == 204, r.text
    second = _turn(client, thread, "and biscuits")
    assert second["recalled"] == 3
    assert second["seen"] == ["I like tea", "and biscuits", "from the API"]
    # what the graph stored, the API reads
    r = client.get("/store/items", params={"namespace": "alice.memories", "key": "I like tea"})
    assert r.status_code == 200 and r.json()["value"] == {"text": "I like tea"}, r.text
    found = client.post("/store/items/search", json={"namespace_prefix": ["alice"]}).json()
    assert sorted(i["key"] for i in found["items"]) == ["I like tea", "and biscuits", "api"]
    # another thread of the same user sees the same memories (the namespace is the user's:
    # the API lets alice use hers)
    other = client.post("/threads", json={}).json()["thread_id"]
    assert _turn(client, other, "hello")["recalled"] == 4


def test_a_graph_step_reaches_the_store(runner: Runner) -> None:
    task = LongTask(
        "memories",
        stages=[
            Stage(
                "s",
                [
                    graph_step(
                        "chat",
                        memory_graph.graph,
                        input=lambda ctx: {"user": "bo", "said": [ctx.inputs["said"]]},
                        output=lambda state: state["seen"],
                    )
                ],
            )
        ],
    )
    runner.start(task, {"said": "first"}, thread_id="mem-1")
    runner.start(task, {"said": "second"}, thread_id="mem-2")
    assert runner.result("mem-2", "chat") == ["first", "second"]
    items = runner.db.graph_store.search(("bo", "memories"))
    assert sorted(i.value["text"] for i in items) == ["first", "second"]


def test_the_stores_postgres_connections_are_bounded_by_the_db_timeout(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Graphs reach the store, so its connections give up as longtask's own do: connecting,
    a dead peer and a wait for a pooled connection end within ``$LONGTASK_DB_TIMEOUT``."""
    monkeypatch.setenv("LONGTASK_DB_TIMEOUT", "7")
    with Runner(pg_url) as runner:
        store: Any = runner.db.graph_store.opened()
        pool = store.conn
        assert pool.timeout == 7
        assert pool.kwargs["connect_timeout"] == 7
        assert pool.kwargs["tcp_user_timeout"] == 7000
