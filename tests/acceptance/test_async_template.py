"""The ReAct agent as LangChain's template writes it since LangGraph 0.6 (``lgapps/src/
async_agent``: ``async def`` nodes, settings in a context schema read as ``runtime.context``,
a tool that is a coroutine, the model loaded by ``init_chat_model``), unmodified, served by
``longtask serve --config lgapps/langgraph.async.json`` on both backends. It failed before
on two counts: a graph step ran its graph with ``invoke`` (which refuses async-only nodes)
and gave it no context (``runtime.context`` None).

LangGraph's own server runs the same app with the same requests (a context naming another
model) and both answer the same messages, the scripted model seeing the model the context
named; then ``kill -9`` of serve while the async tool runs, and a restart: the cut-off call
(no mark) pauses the thread, a person has it called again, the run carries on, the
finished model call is not made again, and each model call is a ``model.call``
event with its usage.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lgdiff_servers
import pytest
from fakes import FakeOpenAI
from langgraph_sdk import get_client
from test_lg_differential import _needed
from test_plain_graphs import QUESTION, _counts, _script

APPS = Path(__file__).parent / "lgapps"
CONFIG = APPS / "langgraph.async.json"
TOKEN = "tok-alice-async"
ASKED = {"messages": [{"role": "user", "content": QUESTION}]}
CONTEXT = {"model": "openai/gpt-4.1-mini"}
SEARCHED = {"query": "weather in Paris"}


@pytest.fixture
def llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(_script) as server:
        yield server


async def _ask(url: str) -> tuple[str, list[tuple[str, Any]]]:
    lg = get_client(url=url, api_key=TOKEN)
    tid = (await lg.threads.create())["thread_id"]
    out = await lg.runs.wait(tid, "agent", input=ASKED, context=CONTEXT)
    return tid, [(m["type"], m["content"]) for m in out["messages"]]


def _models(llm: FakeOpenAI) -> set[str]:
    return {r.model for r in llm.requests}


def test_the_async_template_answers_as_on_langgraphs_server(llm: FakeOpenAI, db_url: str) -> None:
    reference = _needed(
        "LangGraph's server",
        lambda: lgdiff_servers.graphs_reference_server(
            llm.base_url,
            {"agent": f"{APPS / 'src' / 'async_agent' / 'graph.py'}:graph"},
            APPS / "src",
        ).start(),
    )
    try:
        _, expected = asyncio.run(_ask(reference.url))
    finally:
        reference.stop()
    assert [t for t, _ in expected] == ["human", "ai", "tool", "ai"], expected
    assert _models(llm) == {"gpt-4.1-mini"}
    llm.requests.clear()

    server = lgdiff_servers.config_longtask_server(db_url, llm.base_url, TOKEN, CONFIG).start()
    try:
        _, answered = asyncio.run(_ask(server.url))
    finally:
        assert TOKEN not in server.stop()
    assert answered == expected
    assert _models(llm) == {"gpt-4.1-mini"}, "the context's model reached the async node"


def test_a_kill_9_in_the_async_tool_carries_on_without_calling_the_model_again(
    llm: FakeOpenAI, db_url: str, tmp_path: Path
) -> None:
    notes, hold = tmp_path / "notes.txt", tmp_path / "hold"
    hold.touch()  # the tool waits while this file exists
    server = lgdiff_servers.config_longtask_server(db_url, llm.base_url, TOKEN, CONFIG)
    server.env.update(LGAPPS_NOTES=str(notes), LGAPPS_HOLD=str(hold))
    server.start()
    try:

        async def start() -> str:
            lg = get_client(url=server.url, api_key=TOKEN)
            tid = (await lg.threads.create())["thread_id"]
            await lg.runs.create(tid, "agent", input=ASKED, context=CONTEXT)
            return str(tid)

        tid = asyncio.run(start())
        deadline = time.monotonic() + 60
        while _counts(notes).get("search start", 0) < 1:
            assert time.monotonic() < deadline, f"the tool did not start: {server.output()}"
            time.sleep(0.1)
        assert server.proc is not None
        server.proc.kill()  # SIGKILL, in the tool: the model's first call is done
        server.proc.wait()
        assert _counts(notes) == {"call_model start": 1, "call_model end": 1, "search start": 1}
        hold.unlink()
        server.start()

        async def finished() -> list[str]:
            lg = get_client(url=server.url, api_key=TOKEN)
            await lgdiff_servers.retry_cut_off_call(lg, tid, "agent", "search", SEARCHED)
            state = await lg.threads.get_state(tid)
            return [m["type"] for m in state["values"]["messages"]]

        assert asyncio.run(finished()) == ["human", "ai", "tool", "ai"]
    finally:
        assert TOKEN not in server.stop()
    # the finished model call was not made again; the tool killed mid-way (no mark) ran
    # again once a person said so
    assert _counts(notes) == {
        "call_model start": 2,
        "call_model end": 2,
        "search start": 2,
        "search end": 1,
    }
    assert len(llm.requests) == 2
    assert _models(llm) == {"gpt-4.1-mini"}, "the context was kept across the kill"

    from longtask import Runner

    with Runner(db_url) as runner:
        calls = [e for e in runner.events(tid) if e.kind == "model.call"]
    assert len(calls) == 2, calls
    assert all(e.data["usage"]["total"] > 0 for e in calls), calls
