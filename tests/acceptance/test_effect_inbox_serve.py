"""A tool call cut off by a SIGKILL, settled from Agent Inbox through the Server API (both
backends): the unchanged booking agent of ``tests/integration/booking_task.py``, served by
``longtask serve --config langgraph.json`` with the model at the scripted server. The first
run's booking tool commits to the airline's database and kills serve. The restarted serve
continues the thread, finds the call cut off and pauses (the tool is unmarked: at most
once). Through the Python SDK, as Agent Inbox reads and answers: the thread's interrupt shows
the call (name, arguments, tool_call_id, key) as a ``HumanInterrupt``; an ``edit`` is a 422
that names the shapes taken and changes nothing; ``response`` with the booking's text is
taken as the tool's result: the thread completes with one booking, the model told what the
person said."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import lgdiff_servers
import pytest
from fakes import FakeOpenAI, Reply, by_turn
from langgraph_sdk import get_client

from longtask import Runner

ROOT = Path(__file__).resolve().parents[2]
AGENT = ROOT / "tests" / "integration" / "booking_task.py"
TOKEN = "tok-alice-effect-inbox"
PROMPT = {"messages": [{"role": "user", "content": "Book LX8."}]}


@pytest.fixture
def llm() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI(
        by_turn([Reply.tool_calls([("book_flight", {"flight": "LX8"})]), Reply.text("booked")])
    ).start()
    yield server
    server.stop()


def _bookings(path: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(path) as conn:
        return [
            (str(f), str(t)) for f, t in conn.execute("SELECT flight, tool_call_id FROM bookings")
        ]


async def _start(url: str) -> str:
    lg = get_client(url=url, api_key=TOKEN)
    tid = str((await lg.threads.create())["thread_id"])
    await lg.runs.create(tid, "trip", input=PROMPT)
    return tid


async def _paused(url: str, tid: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The thread's state and the thread, once the restarted serve has paused it."""
    lg = get_client(url=url, api_key=TOKEN)
    deadline = time.monotonic() + 120
    while (await lg.threads.get(tid))["status"] != "interrupted":
        assert time.monotonic() < deadline, "the restarted serve did not pause the thread"
        await asyncio.sleep(0.1)
    return dict(await lg.threads.get_state(tid)), dict(await lg.threads.get(tid))


async def _answer(url: str, tid: str, value: Any) -> str:
    lg = get_client(url=url, api_key=TOKEN)
    run = await lg.runs.create(tid, "trip", command={"resume": value})
    await lg.runs.join(tid, run["run_id"])
    return str((await lg.threads.get(tid))["status"])


def test_agent_inbox_settles_a_call_cut_off_by_kill_9_through_the_server_api(
    db_url: str, tmp_path: Path, llm: FakeOpenAI
) -> None:
    config = tmp_path / "langgraph.json"
    config.write_text(json.dumps({"graphs": {"trip": f"{AGENT}:graph"}}))
    server = lgdiff_servers.config_longtask_server(db_url, llm.base_url, TOKEN, config)
    airline = tmp_path / "airline.db"
    server.env.update(
        LT_AIRLINE_DB=str(airline), LT_CRASH_MARKER=str(tmp_path / "crashed"), LT_CRASH="kill"
    )
    server.start()
    try:
        tid = asyncio.run(_start(server.url))
        assert server.proc is not None
        assert server.proc.wait(timeout=120) == -9, server.output()  # the tool's SIGKILL
        ((flight, tool_call_id),) = _bookings(airline)  # committed before the kill
        server.start()
        state, thread = asyncio.run(_paused(server.url, tid))
        (intr,) = state["interrupts"]
        value = intr["value"]
        assert value["kind"] == "effect" and value["tool_call_id"] == tool_call_id
        # where Agent Inbox reads a HumanInterrupt: the call, and what may be answered
        assert value["action_request"]["action"] == "tool:book_flight"
        args = value["action_request"]["args"]
        assert (args["args"], args["tool_call_id"]) == ({"flight": flight}, tool_call_id)
        assert args["key"] == value["key"]
        assert value["config"] == {
            "allow_accept": True,
            "allow_edit": False,
            "allow_respond": True,
            "allow_ignore": True,
        }
        (listed,) = [i for found in thread["interrupts"].values() for i in found]
        assert listed["value"] == value

        edit = [{"type": "edit", "args": {"action": "tool:book_flight", "args": {"flight": "X"}}}]
        with pytest.raises(httpx.HTTPStatusError) as bad:
            asyncio.run(_answer(server.url, tid, edit))
        assert bad.value.response.status_code == 422
        said = bad.value.response.json()["error"]
        assert "cannot be edited" in said and '[{"type": "accept"}]' in said
        again, _ = asyncio.run(_paused(server.url, tid))
        assert again["interrupts"] == [intr]

        told = "booked LX8 as #1 (seen in the airline's back office)"
        status = asyncio.run(_answer(server.url, tid, [{"type": "response", "args": told}]))
    finally:
        assert TOKEN not in server.stop()
    assert status == "idle"
    assert _bookings(airline) == [(flight, tool_call_id)]  # booked once
    tool = [m["content"] for m in llm.requests[-1].messages if m.get("role") == "tool"]
    assert tool == [told]
    with Runner(db_url) as runner:
        assert runner.status(tid).status == "completed"
        (resolved,) = runner.events(tid, kinds=["manual.resolve"])
        assert (resolved.data["outcome"], resolved.data["by"]) == ("succeeded", "alice")
        (effect,) = [e for e in runner.effects(tid) if e.name == "tool:book_flight"]
        assert effect.status == "succeeded"
