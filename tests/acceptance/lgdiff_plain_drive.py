"""The script of the differential test of plain LangGraph apps (``test_lg_plain_diff.py``)
through the official Python SDK and ``RemoteGraph``: the same calls against LangGraph's own
server and ``longtask serve --config lgapps/langgraph.json``, traced as ``lgdiff_drive``
traces (``(label, answer)`` in call order). ``lgdiff_plain_drive.mjs`` is the same script
through the JS SDK.

``agent`` (a ReAct agent): a run streamed in the modes a chat client asks for, then the
thread's state, history and thread object. ``ask`` (a graph with its own ``interrupt()``):
a run to the pause, the paused thread read every way, a resume with ``Command(resume=...)``
streamed, the state and history; a resume by ``runs.wait``; RemoteGraph invoke to the pause,
its state, and a streamed resume. Then a second message on the agent's thread, and a new
input at the ask graph's pause (``lgdiff_plain_turns``); and a graph with a subgraph, a
run's own stops and a joined stream (``lgdiff_plain_nest``).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from langgraph_sdk import get_client
from lgdiff_drive import Trace, _ok, _plain, _snapshot
from lgdiff_plain_nest import nested
from lgdiff_plain_turns import second_message

CHAT = {"messages": [{"role": "user", "content": "What is the weather in Paris?"}]}
TOPIC = {"topic": "rain"}
REVIEW = "fine"
MODES = ["values", "updates", "messages-tuple"]


async def drive(url: str, api_key: str) -> list[tuple[str, Any]]:
    lg = get_client(url=url, api_key=api_key)
    t = Trace()
    tag = {"lgdiff_plain": uuid.uuid4().hex}

    found = await t.call("assistants.search agent", lg.assistants.search(graph_id="agent"))
    agent = found[0]["assistant_id"] if _ok(found) and found else "agent"
    await t.call("assistants.get agent", lg.assistants.get(agent))

    # -- agent: a streamed run, then the thread read back
    thread = await t.call("threads.create agent", lg.threads.create(metadata=tag))
    tid = thread["thread_id"]
    await t.stream(
        "runs.stream agent",
        lg.runs.stream(tid, "agent", input=CHAT, stream_mode=MODES),  # type: ignore[arg-type]
    )
    await t.call("threads.get agent done", lg.threads.get(tid))
    await t.call("threads.get_state agent done", lg.threads.get_state(tid))
    await t.call("threads.get_history agent", lg.threads.get_history(tid, limit=10))
    await t.call("runs.list agent", lg.runs.list(tid))
    agent_thread = tid

    # -- ask: to the pause, read it, resume with a command
    thread = await t.call("threads.create ask", lg.threads.create(metadata=tag))
    tid = thread["thread_id"]
    await t.stream(
        "runs.stream ask to pause",
        lg.runs.stream(tid, "ask", input=TOPIC, stream_mode=MODES),  # type: ignore[arg-type]
    )
    await t.call("threads.get ask paused", lg.threads.get(tid))
    await t.call("threads.get_state ask paused", lg.threads.get_state(tid))
    await t.call("threads.get_history ask paused", lg.threads.get_history(tid, limit=10))
    await t.stream(
        "runs.stream ask resume",
        lg.runs.stream(
            tid,
            "ask",
            command={"resume": REVIEW},
            stream_mode=MODES,  # type: ignore[arg-type]
        ),
    )
    await t.call("threads.get_state ask done", lg.threads.get_state(tid))
    await t.call("threads.get_history ask done", lg.threads.get_history(tid, limit=10))

    # -- ask: runs.wait to the pause and on
    thread = await t.call("threads.create ask wait", lg.threads.create(metadata=tag))
    tid = thread["thread_id"]
    await t.call("runs.wait ask to pause", lg.runs.wait(tid, "ask", input=TOPIC))
    await t.call("runs.wait ask resume", lg.runs.wait(tid, "ask", command={"resume": REVIEW}))
    await t.call("threads.get ask wait done", lg.threads.get(tid))

    # -- RemoteGraph
    from langgraph.pregel.remote import RemoteGraph
    from langgraph.types import Command

    remote = RemoteGraph("ask", url=url, api_key=api_key)
    thread = await t.call("threads.create remote", lg.threads.create(metadata=tag))
    config: Any = {"configurable": {"thread_id": thread["thread_id"]}}

    async def invoke_v2() -> Any:
        out = await remote.ainvoke(TOPIC, config, version="v2")  # type: ignore[call-overload]
        return {"value": _plain(out.value), "interrupts": _plain(out.interrupts)}

    async def stream_v2() -> Any:
        return [
            _plain(part)
            async for part in remote.astream(
                Command(resume=REVIEW),
                config,
                stream_mode=["values", "updates"],
                version="v2",  # type: ignore[call-overload]
            )
        ]

    await t.call("RemoteGraph.invoke v2 to pause", invoke_v2())
    await t.call("RemoteGraph.get_state", _snapshot(remote.aget_state(config)))
    await t.call("RemoteGraph.stream v2 resume", stream_v2())
    await t.call("RemoteGraph.get_state done", _snapshot(remote.aget_state(config)))

    # -- a second message on the agent's thread (and a new input at a pause)
    await second_message(t, lg, url, api_key, agent_thread, tag)
    # -- a graph with a subgraph, stops a run asks for, a stream joined after an event
    await nested(t, lg, url, api_key, tag)
    return t.items


def run(url: str, api_key: str) -> list[tuple[str, Any]]:
    return asyncio.run(drive(url, api_key))
