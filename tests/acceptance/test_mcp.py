"""``/mcp`` of ``longtask serve`` through the official ``mcp`` client (Streamable HTTP), on
every backend: the client lists the tasks as tools, starts one, reads its status, answers
its approval and its wait in the token's name, and sees it complete; bad answers come back
as tool errors and change nothing. The same client against LangGraph's own server (the
differential test's graph) gives tools and results of the same shapes."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from fakes import FakeOpenAI, Reply
from lgdiff_servers import Server, longtask_server, reference_server
from test_langgraph_sdk import TOKEN, Serve

from longtask import Runner

HERE = Path(__file__).parent
CHAT = {"messages": [{"type": "human", "content": "What is the weather?"}]}


@asynccontextmanager
async def _session(url: str, token: str | None = TOKEN) -> AsyncIterator[Any]:
    import httpx2
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    headers = {"X-Api-Key": token} if token else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        streamable_http_client(f"{url}/mcp", http_client=http) as streams,
        ClientSession(streams[0], streams[1]) as session,
    ):
        await session.initialize()
        yield session


def _data(result: Any) -> dict[str, Any]:
    (content,) = result.content
    assert content.type == "text"
    data = json.loads(content.text)
    assert data == result.structured_content
    return dict(data)


@pytest.fixture
def serve(db_url: str, tmp_path: Path) -> Iterator[Serve]:
    server = Serve(db_url, {})
    server.start()
    try:
        yield server
    finally:
        assert TOKEN not in server.stop(), "the server printed a token"


def test_an_mcp_client_starts_a_task_follows_it_and_answers_its_pauses(
    serve: Serve, db_url: str
) -> None:
    async def drive() -> str:
        async with _session(serve.url) as mcp:
            tools = {t.name: t for t in (await mcp.list_tools()).tools}
            assert {"lg_release", "lg_long", "lg_sleepy"} <= set(tools)
            assert {"longtask_status", "longtask_answer", "longtask_threads"} <= set(tools)
            assert tools["lg_release"].input_schema["type"] == "object"

            started = _data(await mcp.call_tool("lg_release", {}))
            thread = started["thread_id"]
            assert started["status"] == "waiting_user"
            (asked,) = started["waiting"]
            assert asked["step"] == "ship_ok" and asked["plan"] == {"total": 3, "to": "prod"}
            assert asked["answer_with"]["tool"] == "longtask_answer"

            # a bad answer is a tool error that says why, and changes nothing
            bad = await mcp.call_tool("longtask_answer", {"thread_id": thread, "answer": 7})
            assert bad.is_error and "answer an approval" in _data(bad)["error"]
            missing = await mcp.call_tool("longtask_status", {"thread_id": "nope"})
            assert missing.is_error and "no thread 'nope'" in _data(missing)["error"]
            again = _data(await mcp.call_tool("longtask_status", {"thread_id": thread}))
            assert again["status"] == "waiting_user"

            approved = _data(
                await mcp.call_tool(
                    "longtask_answer",
                    {"thread_id": thread, "answer": True, "step": asked["interrupt_id"]},
                )
            )
            assert approved["status"] == "waiting_external"
            assert approved["results"]["ship_ok"]["by"] == "alice"
            done = _data(
                await mcp.call_tool(
                    "longtask_answer", {"thread_id": thread, "answer": {"status": "passed"}}
                )
            )
            assert done["status"] == "completed" and done["waiting"] == []
            assert done["results"]["finish"] == "shipped after ci passed by alice"
            listed = _data(await mcp.call_tool("longtask_threads", {"limit": 5}))
            assert thread in [t["thread_id"] for t in listed["threads"]]
        return str(thread)

    thread = anyio.run(drive)
    with Runner(db_url) as runner:
        (resolved,) = runner.events(thread, kinds=["approval.resolved"])
        assert resolved.data["by"] == "alice"
        (signalled,) = runner.events(thread, kinds=["wait.resolved"])
        assert signalled.data["by"] == "alice"


def test_mcp_needs_a_token_once_tokens_are_configured(serve: Serve) -> None:
    import httpx

    got = httpx.post(
        f"{serve.url}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Accept": "application/json, text/event-stream"},
    )
    assert got.status_code == 401


def _script(request: Any) -> Reply:
    if request.turn == 0:
        return Reply.tool_calls([("lookup", {"topic": "weather"})])
    return Reply.text("It is sunny.")


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(_script) as server:
        yield server


def _started(server: Server) -> Server:
    import os
    import subprocess

    try:
        return server.start()
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        if os.environ.get("CI"):
            pytest.fail(f"{server.name}: {exc} (CI is set: the MCP comparison must run)")
        pytest.skip(f"{server.name}: {exc}")


def test_mcp_answers_in_the_shapes_of_langgraphs_server(
    db_url: str, llm: FakeOpenAI, tmp_path: Path
) -> None:
    servers = [_started(reference_server(llm.base_url))]
    try:
        servers.append(_started(longtask_server(db_url, llm.base_url, TOKEN)))

        async def shapes(url: str) -> tuple[dict[str, Any], Any]:
            async with _session(url) as mcp:
                tools = {t.name: t for t in (await mcp.list_tools()).tools}
                chat = tools["chat"].model_dump(by_alias=True, exclude_none=True)
                result = await mcp.call_tool("chat", CHAT)
                return chat, result

        (ref_tool, ref_result), (our_tool, our_result) = (anyio.run(shapes, s.url) for s in servers)
    finally:
        for s in servers:
            s.stop()
    assert set(our_tool) == set(ref_tool), (our_tool, ref_tool)
    assert our_tool["annotations"] == ref_tool["annotations"]
    # A task's tool takes the task's inputs; a plain graph's, its whole state (every
    # channel may be given): both take the chat's messages.
    assert "messages" in our_tool["inputSchema"]["properties"]
    assert "messages" in ref_tool["inputSchema"]["properties"]
    for result in (ref_result, our_result):
        assert not result.is_error
        assert [c.type for c in result.content] == ["text"]
