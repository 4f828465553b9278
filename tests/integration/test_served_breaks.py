"""``interrupt_before`` / ``interrupt_after`` on a run of a served plain graph stop the graph
there for that run, as on LangGraph's server (issue 52 item 5), on every backend: the
thread waits with the node next, a run without input continues it, and a later run that
asks for no stop does not stop. A node the graph does not have is a 422 naming its nodes,
recording nothing; a task's run is still refused them (its pauses are its steps)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from served_graphs import served

from longtask import Runner


def _wait(client: Any, thread: str, **body: Any) -> Any:
    r = client.post(f"/threads/{thread}/runs/wait", json={"assistant_id": "line", **body})
    assert r.status_code == 200, r.text
    return r.json()


def _state(client: Any, thread: str) -> tuple[list[str], list[str]]:
    state = client.get(f"/threads/{thread}/state").json()
    return state["values"].get("seen", []), state["next"]


def test_a_run_stops_where_it_asks_and_a_run_without_input_continues(
    runner: Runner, tmp_path: Path
) -> None:
    with served(runner, tmp_path, {"line": "break_graph.py"}) as client:
        thread = client.post("/threads", json={}).json()["thread_id"]
        _wait(client, thread, input={"seen": []}, interrupt_before=["b"])
        assert _state(client, thread) == (["a"], ["b"])
        assert runner.status(thread).status == "waiting_user"
        _wait(client, thread, input=None)
        assert _state(client, thread) == (["a", "b", "c"], [])
        assert runner.status(thread).status == "completed"

        # after every node: one stop per node, each continued by a run without input
        thread = client.post("/threads", json={}).json()["thread_id"]
        _wait(client, thread, input={"seen": []}, interrupt_after="*")
        assert _state(client, thread) == (["a"], ["b"])
        _wait(client, thread, input=None, interrupt_after="*")
        assert _state(client, thread) == (["a", "b"], ["c"])
        _wait(client, thread, input=None)  # this run asks for no stop: to the end
        assert _state(client, thread) == (["a", "b", "c"], [])


def test_a_stop_at_a_node_the_graph_does_not_have_is_refused(
    runner: Runner, tmp_path: Path
) -> None:
    with served(runner, tmp_path, {"line": "break_graph.py"}) as client:
        thread = client.post("/threads", json={}).json()["thread_id"]
        for asked in ({"interrupt_before": ["nope"]}, {"interrupt_after": "b"}):
            r = client.post(
                f"/threads/{thread}/runs",
                json={"assistant_id": "line", "input": {"seen": []}, **asked},
            )
            assert r.status_code == 422, r.text
            detail = r.json()["detail"]
            assert ("'nope'" in detail and "a, b, c" in detail) or "list of node names" in detail
        assert client.get(f"/threads/{thread}/runs").json() == []
        assert runner.db.store.get_thread(thread) is None
