"""A2A (``/.well-known/agent-card.json``, ``/a2a/{assistant_id}``) of ``longtask serve``
through the A2A project's own client (``a2a-sdk``), on every backend: the client reads an
assistant's card, sends a message to a chat task and gets the completed task with the
model's answer, and again through ``message/stream`` (each agent message and tool result
as a ``working`` update, then the answer); a task with an approval answers
``input-required`` with the pause, is answered by a second message of the same task in
the token's name, and completes. The
same calls against LangGraph's own server (the differential test's graph) give answers
of the same shapes (``lgdiff_shapes``; intended differences in ``INTENDED``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from fakes import FakeOpenAI, Reply
from lgdiff_servers import HERE, Server, _quiet_env, free_port, reference_server
from lgdiff_shapes import INTENDED, diff_answer, split

from longtask import Runner
from longtask.serve._registry import assistant_id

TOKEN = "tok-alice-a2a"
QUESTION = "What is the weather?"
ANSWER = "It is sunny."


def _script(request: Any) -> Reply:
    if request.turn == 0:
        return Reply.tool_calls([("lookup", {"topic": "weather"})])
    return Reply.text(ANSWER)


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(_script) as server:
        yield server


def _longtask(db_url: str, llm_url: str) -> Server:
    port = free_port()
    env = _quiet_env(llm_url)
    env["LONGTASK_API_TOKENS"] = f"alice={TOKEN}"
    env.pop("LONGTASK_API_TOKEN", None)
    args = [sys.executable, "-m", "longtask", "serve", "--port", str(port), "--db", db_url]
    for ref in ("lgdiff_task.py:task", "a2a_task.py:task"):
        args += ["--task", str(HERE / ref)]
    return Server("longtask serve", args, env, port)


@pytest.fixture
def serve(db_url: str, llm: FakeOpenAI) -> Iterator[Server]:
    server = _longtask(db_url, llm.base_url).start()
    yield server
    assert TOKEN not in server.stop(), "the server printed a token"


def _message(text: str | None = None, data: dict[str, Any] | None = None, **ids: str) -> Any:
    from a2a.types import DataPart, Message, Part, Role, TextPart

    parts = [Part(root=TextPart(text=text))] if text is not None else []
    parts += [Part(root=DataPart(data=data))] if data is not None else []
    return Message(role=Role.user, parts=parts, message_id=str(uuid.uuid4()), **ids)


async def _client(http: httpx.AsyncClient, url: str, graph: str) -> tuple[Any, Any]:
    from a2a.client import A2ACardResolver, ClientConfig, ClientFactory

    path = f"/.well-known/agent-card.json?assistant_id={assistant_id(graph)}"
    card = await A2ACardResolver(http, url, agent_card_path=path).get_agent_card()
    return card, ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(card)


async def _send(client: Any, message: Any) -> Any:
    (event,) = [e async for e in client.send_message(message)]
    task, update = event
    assert update is None
    return task


def _text(task: Any) -> str:
    (artifact,) = task.artifacts
    return "".join(p.root.text for p in artifact.parts if p.root.kind == "text")


def test_an_a2a_client_gets_the_card_and_a_chat_task_s_answer(serve: Server) -> None:
    async def drive() -> None:
        from a2a.client import ClientConfig, ClientFactory
        from a2a.types import TaskQueryParams, TaskState

        async with httpx.AsyncClient(headers={"X-Api-Key": TOKEN}, timeout=60) as http:
            card, client = await _client(http, serve.url, "ask")
            assert card.name == "ask"
            assert card.url == f"{serve.url}/a2a/{assistant_id('ask')}"
            assert card.capabilities.streaming is True
            assert card.skills[0].id == f"{assistant_id('ask')}-main"

            task = await _send(client, _message(QUESTION))
            assert task.status.state == TaskState.completed
            assert _text(task) == ANSWER
            assert task.id == f"{task.context_id}:{task.id.rsplit(':', 1)[1]}"
            said = [(m.role.value, m.parts[0].root) for m in task.history or []]
            assert (said[0][0], said[0][1].text) == ("user", QUESTION)
            assert (said[-1][0], said[-1][1].text) == ("agent", ANSWER)
            # the tool's result is data, never the agent's words
            (tool,) = [p for role, p in said if p.kind == "data"]
            assert tool.data["tool_results"][0]["name"] == "lookup"

            again = await client.get_task(TaskQueryParams(id=task.id))
            assert again.status.state == TaskState.completed and again.id == task.id

            # message/stream, as the client uses it when the card offers streaming
            streaming = ClientFactory(ClientConfig(httpx_client=http)).create(card)
            events = [e async for e in streaming.send_message(_message(QUESTION))]
            kinds = [update.kind if update else "task" for _, update in events]
            assert kinds[0] == "task" and kinds[-2:] == ["artifact-update", "status-update"]
            said = [u.status.message for _, u in events if u and u.kind == "status-update"]
            assert [m.parts[0].root.kind for m in said if m] == ["data", "text"]
            final, _ = events[-1]
            assert final.status.state == TaskState.completed and _text(final) == ANSWER

    anyio.run(drive)


def test_an_approval_is_input_required_then_answered_in_the_token_s_name(
    serve: Server, db_url: str
) -> None:
    async def drive() -> str:
        from a2a.types import TaskQueryParams, TaskState

        async with httpx.AsyncClient(headers={"X-Api-Key": TOKEN}, timeout=60) as http:
            _, client = await _client(http, serve.url, "chat")
            paused = await _send(client, _message(QUESTION))
            assert paused.status.state == TaskState.input_required
            (artifact,) = paused.artifacts
            (part,) = artifact.parts
            asked = part.root.data
            assert asked["value"]["kind"] == "approval" and asked["value"]["step"] == "approve"
            assert asked["value"]["plan"] == {"answer": ANSWER}
            got = await client.get_task(TaskQueryParams(id=paused.id))
            assert got.status.state == TaskState.input_required

            ids = {"task_id": paused.id, "context_id": paused.context_id}
            # an answer that is no decision is refused, and changes nothing
            with pytest.raises(Exception, match="answer an approval"):
                await _send(client, _message("maybe later", **ids))
            got = await client.get_task(TaskQueryParams(id=paused.id))
            assert got.status.state == TaskState.input_required

            done = await _send(client, _message(data={"resume": {"approved": True}}, **ids))
            assert done.status.state == TaskState.completed and done.id == paused.id
            # a finished task takes no more messages
            with pytest.raises(Exception, match="terminal task"):
                await _send(client, _message("approve", **ids))
            return str(paused.context_id)

    thread = anyio.run(drive)
    with Runner(db_url) as runner:
        assert runner.status(thread).status == "completed"
        (resolved,) = runner.events(thread, kinds=["approval.resolved"])
        assert resolved.data["by"] == "alice"
        assert runner.results(thread)["approve"]["approved"] is True
        assert runner.db.store.get_thread(thread).owner == "alice"  # type: ignore[union-attr]


def test_a_text_answer_approves_and_tasks_cancel_cancels(serve: Server, db_url: str) -> None:
    async def drive() -> tuple[str, str]:
        from a2a.types import MessageSendConfiguration, TaskIdParams, TaskQueryParams, TaskState

        async with httpx.AsyncClient(headers={"X-Api-Key": TOKEN}, timeout=60) as http:
            _, client = await _client(http, serve.url, "chat")
            first = await _send(client, _message(QUESTION))
            ids = {"task_id": first.id, "context_id": first.context_id}
            done = await _send(client, _message("approve", **ids))
            assert done.status.state == TaskState.completed
            # blocking false: the task as recorded, at once; tasks/get follows it
            (event,) = [
                e
                async for e in client.send_message(
                    _message(QUESTION), configuration=MessageSendConfiguration(blocking=False)
                )
            ]
            second = event[0]
            assert second.status.state in (TaskState.submitted, TaskState.working)
            for _ in range(600):
                second = await client.get_task(TaskQueryParams(id=second.id))
                if second.status.state == TaskState.input_required:
                    break
                await anyio.sleep(0.1)
            assert second.status.state == TaskState.input_required
            cancelled = await client.cancel_task(TaskIdParams(id=second.id))
            assert cancelled.status.state == TaskState.canceled
            return str(first.context_id), str(second.context_id)

    first, second = anyio.run(drive)
    with Runner(db_url) as runner:
        assert runner.status(first).status == "completed"
        for _ in range(300):
            if runner.status(second).status == "cancelled":
                break
            anyio.run(anyio.sleep, 0.1)
        assert runner.status(second).status == "cancelled"


def test_a2a_needs_a_token(serve: Server) -> None:
    card = httpx.get(f"{serve.url}/.well-known/agent-card.json?assistant_id=chat")
    assert card.status_code == 401
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": "x:y"}}
    assert httpx.post(f"{serve.url}/a2a/chat", json=rpc).status_code == 401


# -- the shapes of LangGraph's server


def _started(server: Server) -> Server:
    try:
        return server.start()
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        if os.environ.get("CI"):
            pytest.fail(f"{server.name}: {exc} (CI is set: the A2A comparison must run)")
        pytest.skip(f"{server.name}: {exc}")


def _rpc(url: str, method: str, params: dict[str, Any]) -> Any:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    got = httpx.post(
        f"{url}/a2a/{assistant_id('chat')}",
        json=body,
        headers={"X-Api-Key": TOKEN, "Accept": "application/json"},
        timeout=120,
    )
    assert got.status_code == 200, got.text
    return got.json()


def _shapes(url: str) -> list[tuple[str, Any]]:
    """The card, a message/send to the pause, tasks/get, the resume, tasks/get, as JSON."""
    out: list[tuple[str, Any]] = []
    card = httpx.get(
        f"{url}/.well-known/agent-card.json",
        params={"assistant_id": assistant_id("chat")},
        headers={"X-Api-Key": TOKEN},
    )
    out.append(("a2a card", card.json()))
    path_card = httpx.get(
        f"{url}/a2a/{assistant_id('chat')}/.well-known/agent-card.json",
        headers={"X-Api-Key": TOKEN},
    )
    out.append(("a2a card by path", path_card.json()))
    text = {"kind": "text", "text": QUESTION}
    message = {"role": "user", "parts": [text], "messageId": str(uuid.uuid4())}
    paused = _rpc(url, "message/send", {"message": message})
    out.append(("a2a message/send to the pause", paused))
    task = paused["result"]
    ids = {"id": task["id"], "contextId": task["contextId"]}
    out.append(("a2a tasks/get paused", _rpc(url, "tasks/get", ids)))
    resume = {
        "role": "user",
        "parts": [{"kind": "data", "data": {"resume": {"approved": True, "comment": "ok"}}}],
        "messageId": str(uuid.uuid4()),
        "taskId": task["id"],
        "contextId": task["contextId"],
    }
    out.append(("a2a message/send resume", _rpc(url, "message/send", {"message": resume})))
    out.append(("a2a tasks/get done", _rpc(url, "tasks/get", ids)))
    # a new task in the context of a finished one (LangGraph's server starts one there)
    again = {**message, "messageId": str(uuid.uuid4()), "contextId": task["contextId"]}
    out.append(
        ("a2a message/send in a finished context", _rpc(url, "message/send", {"message": again}))
    )
    streamed = httpx.post(
        f"{url}/a2a/{assistant_id('chat')}",
        json={
            "jsonrpc": "2.0",
            "id": 2,
            "method": "message/stream",
            "params": {"message": message},
        },
        headers={"X-Api-Key": TOKEN, "Accept": "text/event-stream, application/json"},
        timeout=120,
    )
    events = [
        json.loads(line[5:]) for line in streamed.text.splitlines() if line.startswith("data:")
    ]
    out.append(("a2a message/stream", events or streamed.json()))
    out.append(("a2a tasks/get unknown", _rpc(url, "tasks/get", {"id": f"{uuid.uuid4()}:x"})))
    return out


def test_a2a_answers_in_the_shapes_of_langgraphs_server(
    db_url: str, llm: FakeOpenAI, tmp_path: Path
) -> None:
    servers = [_started(reference_server(llm.base_url))]
    try:
        servers.append(_started(_longtask(db_url, llm.base_url)))
        ref, got = (_shapes(s.url) for s in servers)
    finally:
        for s in servers:
            s.stop()
    states = [
        (label, answer["result"]["status"]["state"])
        for label, answer in ref
        if isinstance(answer, dict) and "result" in answer
    ]
    assert [x for x in states if "finished context" not in x[0]] == [
        (label, answer["result"]["status"]["state"])
        for label, answer in got
        if isinstance(answer, dict) and "result" in answer
    ]
    diffs = [
        d for (label, r), (_, g) in zip(ref, got, strict=True) for d in diff_answer(label, r, g)
    ]
    left, used = split(diffs, INTENDED)
    # what longtask refuses on purpose is refused (a task's inputs may require messages:
    # the card's skill metadata says so, under the metadata rule)
    assert {i.label for i, found in used.items() if found} <= {
        "*",
        "a2a message/send in a finished context",
    }
    finished = next(i for i in INTENDED if i.label == "a2a message/send in a finished context")
    assert used[finished]
    assert not left, "A2A answers differ from LangGraph's server:\n" + "\n".join(
        f"  {d}" for d in left
    )
