"""A served LangGraph graph shows its own shape, not longtask's wrapper (issue 52 items 4
and 5): its assistant is named after the graph (as LangGraph's server names it), its
schemas are the graph's own input, output, state and context, and an A2A text message to a
chat graph is a conversation turn whose answer is the graph's last AI message."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from served_graphs import served

from longtask import Runner


def _schemas(client: Any, graph_id: str) -> dict[str, Any]:
    (found,) = client.post("/assistants/search", json={"graph_id": graph_id}).json()
    return dict(client.get(f"/assistants/{found['assistant_id']}/schemas").json())


def test_a_served_graph_s_assistant_and_schemas_are_the_graph_s_own(
    runner: Runner, tmp_path: Path
) -> None:
    with served(runner, tmp_path, {"chat": "chat_graph.py", "echo": "echo_graph.py"}) as client:
        names = {
            a["graph_id"]: a["name"] for a in client.post("/assistants/search", json={}).json()
        }
        # the graph's own name; a graph with LangGraph's default name is named by its id
        assert names == {"chat": "Echo Agent", "echo": "echo"}
        chat = _schemas(client, "chat")
        assert chat["graph_id"] == "chat"
        assert set(chat["input_schema"]["properties"]) == {"messages"}
        assert set(chat["output_schema"]["properties"]) == {"messages"}
        assert set(chat["state_schema"]["properties"]) == {"messages"}
        assert chat["context_schema"]["properties"]["tone"]["default"] == "plain"
        echo = _schemas(client, "echo")
        assert set(echo["input_schema"]["properties"]) == {"said"}
        assert echo["state_schema"]["properties"]["said"]["type"] == "array"


def test_an_a2a_text_message_is_a_turn_of_a_served_chat_graph(
    runner: Runner, tmp_path: Path
) -> None:
    with served(runner, tmp_path, {"chat": "chat_graph.py"}) as client:
        (found,) = client.post("/assistants/search", json={"graph_id": "chat"}).json()
        send = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "message/send",
            "params": {
                "message": {
                    "role": "user",
                    "messageId": "m1",
                    "parts": [{"kind": "text", "text": "hello there"}],
                }
            },
        }
        r = client.post(f"/a2a/{found['assistant_id']}", json=send)
        assert r.status_code == 200, r.text
        task = r.json()["result"]
        deadline = time.monotonic() + 60
        while task["status"]["state"] in ("submitted", "working"):
            assert time.monotonic() < deadline, task
            time.sleep(0.05)
            got = client.post(
                f"/a2a/{found['assistant_id']}",
                json={
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "tasks/get",
                    "params": {"id": task["id"]},
                },
            )
            task = got.json()["result"]
        assert task["status"]["state"] == "completed", task
        texts = [p.get("text") for a in task.get("artifacts") or [] for p in a["parts"]]
        assert "you said: hello there" in texts, task
