"""A served graph shows its own subgraphs, not longtask's wrapper (issue 52 item 4), on every
backend: its ``custom`` writes stream as its own (a subgraph's only with
``stream_subgraphs``, in the subgraph's namespace, as on LangGraph's server), its
subgraphs are what ``get_subgraphs`` lists, and at a pause inside a subgraph
``get_state(subgraphs=True)`` gives the subgraph's state in its task (without it, where the
subgraph's state is)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from served_graphs import served
from test_token_streams import events

from longtask import Runner


def _run(client: Any, thread: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    r = client.post(f"/threads/{thread}/runs/stream", json={"assistant_id": "sub", **body})
    assert r.status_code == 200, r.text
    return events(r.text)


def test_a_served_graph_s_custom_writes_and_subgraphs_are_its_own(
    runner: Runner, tmp_path: Path
) -> None:
    with served(runner, tmp_path, {"sub": "sub_graph.py"}) as client:
        modes = ["custom", "updates"]
        flat = client.post("/threads", json={}).json()["thread_id"]
        got = _run(client, flat, {"input": {"n": 1}, "stream_mode": modes})
        own = [e["data"] for e in got if e["event"] == "custom" and "kind" not in e["data"]]
        assert own == [{"progress": "started"}]  # the subgraph's only with stream_subgraphs
        assert all("|" not in e["event"] for e in got), got

        deep = client.post("/threads", json={}).json()["thread_id"]
        got = _run(
            client, deep, {"input": {"n": 1}, "stream_mode": modes, "stream_subgraphs": True}
        )
        named = [
            (e["event"].split(":")[0], e["data"])
            for e in got
            if e["event"].startswith("custom") and "kind" not in e["data"]
        ]
        assert named == [
            ("custom", {"progress": "started"}),
            ("custom|inner", {"progress": "inner bumped", "n": 2}),
        ]
        inner = [e for e in got if e["event"].startswith("updates|")]
        assert {e["event"].split(":")[0] for e in inner} == {"updates|inner"}
        assert inner[0]["data"] == {"bump": {"n": 2}}  # then its pause, in its namespace
        assert [list(e["data"]) for e in inner[1:]] == [["__interrupt__"]]
        assert not [e for e in got if "|sub" in e["event"]]  # no wrapper namespace

        (found,) = client.post("/assistants/search", json={"graph_id": "sub"}).json()
        listed = client.get(f"/assistants/{found['assistant_id']}/subgraphs").json()
        assert list(listed) == ["inner"]
        assert set(listed["inner"]["input_schema"]["properties"]) == {"n", "answer"}

        # paused inside the subgraph: its state is in the subgraph's task
        state = client.get(f"/threads/{deep}/state", params={"subgraphs": "true"}).json()
        assert state["next"] == ["inner"]
        (task,) = state["tasks"]
        sub = task["state"]
        assert sub["values"] == {"n": 2} and sub["next"] == ["check"]
        assert sub["checkpoint"]["checkpoint_ns"].startswith("inner:")
        assert sub["tasks"][0]["interrupts"][0]["value"] == {"question": "inner ok?", "n": 2}
        plain = client.get(f"/threads/{deep}/state").json()
        assert plain["tasks"][0]["state"] is None
        assert plain["tasks"][0]["checkpoint"]["checkpoint_ns"].startswith("inner:")

        # both pauses answered, the graph ends with both answers
        _run(client, deep, {"command": {"resume": "yes"}, "stream_mode": ["values"]})
        _run(client, deep, {"command": {"resume": "done"}, "stream_mode": ["values"]})
        final = client.get(f"/threads/{deep}/state").json()
        assert final["values"] == {"n": 2, "answer": "done"}, final
