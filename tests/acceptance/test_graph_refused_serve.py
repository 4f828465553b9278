"""A served graph that raises on an answer goes back to the same pause (issue 51, item 4),
on both backends: the graph of ``tests/integration/refused_graph_task.py``, served by
``longtask serve --config langgraph.json``, asks; alice answers through the Python SDK
with ``command={"resume": ...}`` a value the graph's node raises on. The run ends with the
thread interrupted at the same interrupt id (the task's error shown in the thread's state,
as LangGraph shows a task's), ``interrupt.refused`` recorded; her correct answer then
completes the thread."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import lgdiff_servers
from langgraph_sdk import get_client

from longtask import Runner

GRAPH = Path(__file__).resolve().parent.parent / "integration" / "refused_graph_task.py"
TOKEN = "tok-alice-refused"
#: no model is called: the server needs a URL all the same
NO_LLM = "http://127.0.0.1:9/v1"


async def _drive(url: str) -> dict[str, Any]:
    lg = get_client(url=url, api_key=TOKEN)
    tid = str((await lg.threads.create())["thread_id"])
    asked = (await lg.runs.wait(tid, "pick", input={}))["__interrupt__"]
    bad = await lg.runs.wait(tid, "pick", command={"resume": "blue"})
    thread = await lg.threads.get(tid)
    state = await lg.threads.get_state(tid)
    good = await lg.runs.wait(tid, "pick", command={"resume": {"size": 2}})
    done = await lg.threads.get(tid)
    return {
        "tid": tid,
        "asked": asked,
        "bad": bad,
        "thread": thread,
        "state": state,
        "good": good,
        "done": done,
    }


def test_a_served_graph_that_raises_on_an_answer_waits_again(db_url: str, tmp_path: Path) -> None:
    config = tmp_path / "langgraph.json"
    config.write_text(json.dumps({"graphs": {"pick": f"{GRAPH}:graph"}}))
    server = lgdiff_servers.config_longtask_server(db_url, NO_LLM, TOKEN, config)
    log = tmp_path / "asked.log"
    server.env["LT_REFUSED_LOG"] = str(log)
    server.start()
    try:
        got = asyncio.run(_drive(server.url))
    finally:
        assert TOKEN not in server.stop()
    (asked,) = got["asked"]
    assert asked["value"] == {"question": "How big?"}
    # the same pause, the same id, answerable again
    assert got["bad"]["__interrupt__"] == got["asked"]
    assert got["thread"]["status"] == "interrupted"
    assert [i["id"] for i in got["state"]["interrupts"]] == [asked["id"]]
    (task,) = got["state"]["tasks"]
    assert "TypeError" in task["error"] and "string indices" in task["error"]
    assert got["good"] == {"size": 4}
    assert got["done"]["status"] == "idle"
    assert log.read_text().splitlines() == ["ask", "ask", 'took "blue"', "ask", 'took {"size": 2}']
    with Runner(db_url) as runner:
        tid = got["tid"]
        assert runner.status(tid).status == "completed"
        (refused,) = runner.events(tid, kinds=["interrupt.refused"])
        assert refused.data["interrupt_id"] == asked["id"]
        assert refused.data["type"] == "TypeError"
        answers = runner.events(tid, kinds=["interrupt.resolved"])
        assert [(e.data["by"], e.data["value"]) for e in answers] == [
            ("alice", "blue"),
            ("alice", {"size": 2}),
        ]
