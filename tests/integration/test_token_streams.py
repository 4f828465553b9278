"""A served run's stream as LangGraph's server streams it (issue 52 item 3): a model's
answer token by token (``messages-tuple`` chunks, ``messages/partial``), each event with an
id, and a client that reconnects with ``Last-Event-ID`` gets every event after that one,
none twice, on every backend. The parts are stored by whichever process advances the
thread, so the same holds for a run a worker carries out (``test_worker_streams.py``)."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes import FakeOpenAI, Reply, by_turn
from served_graphs import served

from longtask import Runner
from longtask.store._parts import KEEP

ANSWER = "Paris is the capital of France, on the Seine."


@pytest.fixture
def llm(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    server = FakeOpenAI(by_turn([Reply.text(ANSWER)] * 10)).start()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-token-streams")
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    yield server
    server.stop()


def events(text: str) -> list[dict[str, Any]]:
    """The SSE events of a response body: id, event and data of each."""
    out = []
    for block in text.split("\n\n"):
        fields: dict[str, Any] = {}
        for line in block.splitlines():
            if line.startswith(":") or ":" not in line:
                continue
            key, _, value = line.partition(":")
            fields[key] = value.strip()
        if "event" in fields:
            fields["data"] = json.loads(fields.get("data") or "null")
            out.append(fields)
    return out


def _stream(client: Any, modes: list[str]) -> tuple[str, str, list[dict[str, Any]]]:
    thread = client.post("/threads", json={}).json()["thread_id"]
    body = {
        "assistant_id": "chat",
        "input": {"messages": [{"type": "human", "content": "capital of France?"}]},
        "stream_mode": modes,
    }
    with client.stream("POST", f"/threads/{thread}/runs/stream", json=body) as r:
        assert r.status_code == 200
        got = events(r.read().decode())
    run_id = got[0]["data"]["run_id"]
    return thread, run_id, got


def test_a_served_graph_s_answer_streams_token_by_token(
    runner: Runner, tmp_path: Path, llm: FakeOpenAI
) -> None:
    with served(runner, tmp_path, {"chat": "token_graph.py"}) as client:
        thread, _, got = _stream(client, ["messages-tuple", "values"])
        chunks = [e["data"] for e in got if e["event"] == "messages"]
        ai = [m for m, _ in chunks if m["type"] == "AIMessageChunk"]
        assert len(ai) > 3, chunks  # token by token, not one whole message
        assert "".join(m["content"] for m in ai) == ANSWER
        assert {meta["langgraph_node"] for _, meta in chunks} == {"answer"}
        assert len({m["id"] for m in ai}) == 1
        # the whole message is not said again after its tokens
        assert not [m for m, _ in chunks if m["type"] == "ai"]
        final = [e["data"] for e in got if e["event"] == "values"][-1]
        assert final["messages"][-1]["content"] == ANSWER
        assert final["messages"][-1]["id"] == ai[0]["id"]
        # the thread's state and history hold the answer, not its tokens
        states = client.post(f"/threads/{thread}/history", json={"limit": 100}).json()
        said = [m for s in states for m in s["values"].get("messages") or ()]
        assert said and {m["type"] for m in said} == {"human", "ai"}
        assert states[0]["values"]["messages"][-1]["content"] == ANSWER


def test_messages_mode_says_the_message_so_far(
    runner: Runner, tmp_path: Path, llm: FakeOpenAI
) -> None:
    with served(runner, tmp_path, {"chat": "token_graph.py"}) as client:
        _, _, got = _stream(client, ["messages"])
        kinds = [e["event"] for e in got]
        assert kinds[0] == "metadata"
        assert kinds.count("messages/metadata") == 1
        partial = [e["data"][0] for e in got if e["event"] == "messages/partial"]
        assert len(partial) > 3
        texts = [p["content"] for p in partial]
        assert all(b.startswith(a) for a, b in itertools.pairwise(texts))
        assert texts[-1] == ANSWER and partial[-1]["type"] == "ai"


def test_every_event_has_an_id_and_a_reconnect_resumes_after_it(
    runner: Runner, tmp_path: Path, llm: FakeOpenAI
) -> None:
    with served(runner, tmp_path, {"chat": "token_graph.py"}) as client:
        thread, run_id, whole = _stream(client, ["messages-tuple", "values", "updates"])
        ids = [e.get("id") for e in whole]
        assert all(ids) and len(set(ids)) == len(ids), ids
        assert run_id
        joined = f"/threads/{thread}/runs/{run_id}/stream"
        for cut in (1, len(whole) // 2, len(whole) - 1):
            last = whole[cut - 1]["id"]
            r = client.get(joined, headers={"Last-Event-ID": last})
            assert r.status_code == 200
            rest = events(r.text)
            # no gap, no repeat: exactly what came after the last event the client had
            assert [(e["id"], e["event"], e["data"]) for e in rest] == [
                (e["id"], e["event"], e["data"]) for e in whole[cut:]
            ]
        # a join from the start (no id) gets the whole stream again, the same
        again = events(client.get(joined).text)
        assert [(e["id"], e["event"]) for e in again] == [(e["id"], e["event"]) for e in whole]


def test_a_run_s_parts_are_kept_an_hour_then_its_stream_is_read_from_the_thread(
    runner: Runner, tmp_path: Path, llm: FakeOpenAI
) -> None:
    with served(runner, tmp_path, {"chat": "token_graph.py"}) as client:
        thread, run_id, _whole = _stream(client, ["messages-tuple", "values"])
        store = runner.db.store
        assert store.parts_after(thread, 0)
        assert store.parts_expire(now=time.time() + KEEP - 60) == 0  # not yet an hour old
        assert store.parts_expire(now=time.time() + KEEP + 1) > 0
        assert store.parts_after(thread, 0) == []
        # the run's stream now comes from what the thread stores: the same final state
        again = events(client.get(f"/threads/{thread}/runs/{run_id}/stream").text)
        assert again[0]["event"] == "metadata"
        final = [e["data"] for e in again if e["event"] == "values"][-1]
        assert final["messages"][-1]["content"] == ANSWER


def test_a_run_whose_end_was_never_marked_ends_where_the_next_run_starts(
    runner: Runner, tmp_path: Path, llm: FakeOpenAI
) -> None:
    """serve died between recording a run's end and marking it among the parts: the run's
    stream still ends with its own parts, not the next run's."""
    with served(runner, tmp_path, {"chat": "token_graph.py"}) as client:
        thread, run_id, whole = _stream(client, ["values"])
        runner.db.store._run(
            "DELETE FROM longtask_run_parts WHERE run_id = ? AND mode = '__end__'", (run_id,)
        )
        body = {
            "assistant_id": "chat",
            "input": {"messages": [{"type": "human", "content": "and Spain?"}]},
        }
        assert client.post(f"/threads/{thread}/runs/wait", json=body).status_code == 200
        again = events(client.get(f"/threads/{thread}/runs/{run_id}/stream").text)
        assert [(e["event"], e["data"]) for e in again] == [(e["event"], e["data"]) for e in whole]
