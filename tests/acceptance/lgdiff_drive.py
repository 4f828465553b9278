"""The script of the differential test, through the official Python SDK (``langgraph_sdk``)
and ``RemoteGraph``: the same calls against LangGraph's own server and ``longtask serve``.

``drive(url, api_key)`` returns the trace: ``(label, answer)`` in call order, where an
answer is the JSON the SDK returned, a stream as ``[[event, data], ...]``, or
``{"__error__": status}`` for a call the server refused. ``lgdiff_drive.mjs`` is the same
script through the JS SDK; ``lgdiff_shapes.py`` compares the traces.

Threads: ``main`` (stream every mode with subgraphs to the approval, read the paused
thread every way a client does, resume with a command and join), ``usestream`` (what
useStream does: a values/messages stream, then ``submit({}, {command})``), ``edit``
(``update_state`` during the pause, then continue), ``resolve`` (Agent Chat UI's "Mark as
resolved": ``command={"goto": "__end__"}``), ``remote`` (RemoteGraph invoke/stream v2).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import httpx
import lgdiff_misc
import lgdiff_more
from langgraph_sdk import get_client
from lgdiff_assistants import drive_assistants
from lgdiff_crons import drive_crons

GRAPH = "chat"
QUESTION = "What is the weather?"
CHAT = {"messages": [{"role": "user", "content": QUESTION}]}
APPROVE = {"approved": True, "comment": "ok"}
#: every stream mode, for the first run (with subgraphs)
ALL_MODES = [
    "values",
    "updates",
    "messages-tuple",
    "custom",
    "debug",
    "events",
    "tasks",
    "checkpoints",
]
#: the modes useStream asks for
USESTREAM_MODES = ["values", "messages-tuple", "updates", "custom"]


class Trace:
    def __init__(self) -> None:
        self.items: list[tuple[str, Any]] = []

    async def call(self, label: str, what: Awaitable[Any]) -> Any:
        try:
            answer = await what
        except httpx.HTTPStatusError as exc:
            answer = {"__error__": exc.response.status_code, "detail": _detail(exc.response)}
        except Exception as exc:
            answer = {"__error__": type(exc).__name__, "detail": str(exc)[:500]}
        self.items.append((label, answer))
        return answer

    async def stream(self, label: str, parts: AsyncIterator[Any]) -> list[list[Any]]:
        out: list[list[Any]] = []
        try:
            async for part in parts:
                out.append([part.event, part.data])
        except httpx.HTTPStatusError as exc:
            refused = {"__error__": exc.response.status_code, "detail": _detail(exc.response)}
            self.items.append((label, refused))
            return [["__error__", refused]]
        except Exception as exc:
            out.append(["__error__", {"status": type(exc).__name__, "detail": str(exc)[:500]}])
        self.items.append((label, out))
        return out


def _detail(response: httpx.Response) -> Any:
    try:
        return response.json()
    except Exception:
        return response.text[:500]


def _ok(answer: Any) -> bool:
    return not (isinstance(answer, dict) and "__error__" in answer)


async def drive(url: str, api_key: str) -> list[tuple[str, Any]]:
    lg = get_client(url=url, api_key=api_key)
    t = Trace()
    tag = {"lgdiff": uuid.uuid4().hex}

    found = await t.call("assistants.search", lg.assistants.search(graph_id=GRAPH))
    assistant = found[0]["assistant_id"] if _ok(found) and found else GRAPH
    await t.call("assistants.get", lg.assistants.get(assistant))

    # -- main: every stream mode to the pause
    thread = await t.call("threads.create", lg.threads.create(metadata=tag))
    tid = thread["thread_id"]
    await t.call("threads.get new", lg.threads.get(tid))
    await t.call("threads.get_state new", lg.threads.get_state(tid))
    parts = await t.stream(
        "runs.stream all modes, subgraphs",
        lg.runs.stream(
            tid,
            GRAPH,
            input=CHAT,
            stream_mode=ALL_MODES,
            stream_subgraphs=True,  # type: ignore[arg-type]
        ),
    )
    if parts and parts[-1][0] == "__error__":
        # refused: reach the pause another way so that the rest of the script runs
        await t.call("runs.wait (fallback)", lg.runs.wait(tid, GRAPH, input=CHAT))
    await t.call("threads.get paused", lg.threads.get(tid))
    await t.call("threads.get_state paused", lg.threads.get_state(tid))
    await t.call("threads.get_state paused, subgraphs", lg.threads.get_state(tid, subgraphs=True))
    await t.call("threads.get_history paused", lg.threads.get_history(tid, limit=5))
    await t.call(
        "threads.search interrupted",
        lg.threads.search(metadata=tag, status="interrupted"),
    )
    run = await t.call(
        "runs.create resume", lg.runs.create(tid, GRAPH, command={"resume": APPROVE})
    )
    if _ok(run):
        rid = run["run_id"]
        await t.call("runs.join", lg.runs.join(tid, rid))
        await t.call("runs.get done", lg.runs.get(tid, rid))
    await t.call("runs.list", lg.runs.list(tid))
    await t.call("threads.get done", lg.threads.get(tid))
    await t.call("threads.get_state done", lg.threads.get_state(tid))
    await t.call("threads.get_history done", lg.threads.get_history(tid, limit=3))

    # -- usestream: a values + messages stream to the pause, resumed as submit({}, {command})
    thread = await t.call("threads.create usestream", lg.threads.create(metadata=tag))
    tid = thread["thread_id"]
    await t.stream(
        "runs.stream usestream modes",
        lg.runs.stream(tid, GRAPH, input=CHAT, stream_mode=USESTREAM_MODES),  # type: ignore[arg-type]
    )
    await t.stream(
        "runs.stream resume {} + command",
        lg.runs.stream(
            tid,
            GRAPH,
            input={},
            command={"resume": APPROVE},
            stream_mode=USESTREAM_MODES,  # type: ignore[arg-type]
        ),
    )
    await t.call("threads.get_state usestream done", lg.threads.get_state(tid))

    # -- values only: __interrupt__ in the values stream at the pause
    thread = await t.call("threads.create values", lg.threads.create(metadata=tag))
    tid = thread["thread_id"]
    await t.stream(
        "runs.stream values",
        lg.runs.stream(tid, GRAPH, input=CHAT, stream_mode="values"),
    )
    await t.call("runs.wait resume", lg.runs.wait(tid, GRAPH, command={"resume": APPROVE}))

    # -- edit: update_state during the pause, then continue
    thread = await t.call("threads.create edit", lg.threads.create(metadata=tag))
    tid = thread["thread_id"]
    await t.call("runs.wait to pause", lg.runs.wait(tid, GRAPH, input=CHAT))
    await t.call(
        "threads.update_state paused",
        lg.threads.update_state(tid, {"answer": "It is raining."}),
    )
    await t.call("threads.get_state after update", lg.threads.get_state(tid))
    await t.call("threads.get after update", lg.threads.get(tid))
    await t.call(
        "runs.wait resume after update",
        lg.runs.wait(tid, GRAPH, command={"resume": APPROVE}),
    )
    await t.call("threads.get_state after update+resume", lg.threads.get_state(tid))

    # -- resolve: Agent Chat UI's "Mark as resolved"
    thread = await t.call("threads.create resolve", lg.threads.create(metadata=tag))
    tid = thread["thread_id"]
    await t.call("runs.wait to pause (resolve)", lg.runs.wait(tid, GRAPH, input=CHAT))
    await t.call(
        "runs.wait goto __end__",
        lg.runs.wait(tid, GRAPH, command={"goto": "__end__"}),
    )
    await t.call("threads.get after goto __end__", lg.threads.get(tid))

    # -- the store (LangGraph's BaseStore on each server)
    ns = ["alice", "lgdiff", tag["lgdiff"]]  # a user keeps to their own namespaces
    await t.call("store.put_item", lg.store.put_item(ns, "prefs", {"theme": "dark"}))
    await t.call("store.put_item other", lg.store.put_item(ns, "notes", {"theme": "light"}))
    await t.call("store.get_item", lg.store.get_item(ns, "prefs"))
    await t.call(
        "store.search_items filter",
        lg.store.search_items(ns, filter={"theme": "dark"}, limit=5),
    )
    await t.call("store.list_namespaces", lg.store.list_namespaces(prefix=ns))
    await t.call("store.delete_item", lg.store.delete_item(ns, "prefs"))
    await t.call("store.get_item deleted", lg.store.get_item(ns, "prefs"))

    # -- assistants: created, versioned, run, deleted (lgdiff_assistants.py)
    await drive_assistants(t, lg, tag)
    # -- copy, prune, a thread's stream, runs.delete, batches, history filters (issue 43)
    await lgdiff_misc.drive(t, lg, tag)
    # -- runs.cancel_many, subgraphs by namespace (lgdiff_more)
    await lgdiff_more.drive(t, lg, tag)

    # -- crons (lgdiff_crons)
    await drive_crons(t, lg, GRAPH, CHAT, tag)

    # -- RemoteGraph
    await _remote(t, url, api_key, tag)
    return t.items


async def _remote(t: Trace, url: str, api_key: str, tag: dict[str, str]) -> None:
    from langgraph.pregel.remote import RemoteGraph

    remote = RemoteGraph(GRAPH, url=url, api_key=api_key)
    lg = get_client(url=url, api_key=api_key)
    thread = await t.call("threads.create remote", lg.threads.create(metadata=tag))
    config = {"configurable": {"thread_id": thread["thread_id"]}}

    async def invoke_v2() -> Any:
        out = await remote.ainvoke(CHAT, config, version="v2")  # type: ignore[arg-type,call-overload]
        return {"value": _plain(out.value), "interrupts": _plain(out.interrupts)}

    await t.call("RemoteGraph.invoke v2 to pause", invoke_v2())
    await t.call(
        "RemoteGraph.get_state",
        _snapshot(remote.aget_state(config)),  # type: ignore[arg-type]
    )

    async def stream_v2() -> Any:
        from langgraph.types import Command

        out = []
        async for part in remote.astream(
            Command(resume=APPROVE),
            config,  # type: ignore[arg-type]
            stream_mode=["values", "updates"],
            version="v2",  # type: ignore[call-overload]
        ):
            out.append(_plain(part))
        return out

    await t.call("RemoteGraph.stream v2 resume", stream_v2())
    await lgdiff_misc.remote(t, remote, config)


async def _snapshot(what: Awaitable[Any]) -> Any:
    snap = await what
    return {
        "values": _plain(snap.values),
        "next": list(snap.next),
        "tasks": [_plain(task._asdict()) for task in snap.tasks],
        "interrupts": _plain(snap.interrupts),
    }


def _plain(value: Any) -> Any:
    """SDK objects (GraphOutput, Interrupt, StreamPart, messages) as plain JSON-like data."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if hasattr(value, "_asdict"):
            return _plain(value._asdict())
        return [_plain(v) for v in value]
    if hasattr(value, "model_dump"):
        return _plain(value.model_dump())
    if hasattr(value, "__dataclass_fields__"):
        return {k: _plain(getattr(value, k)) for k in value.__dataclass_fields__}
    return value


def run(url: str, api_key: str) -> list[tuple[str, Any]]:
    return asyncio.run(drive(url, api_key))
