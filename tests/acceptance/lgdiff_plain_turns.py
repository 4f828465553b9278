"""The second message of a chat, in the differential test of plain LangGraph apps: a new
run with input on a thread whose graph has finished runs the graph again on its state
(messages accumulate through the graph's reducer), through the Python SDK and RemoteGraph;
a new run with input from the checkpoint its first run ended at (a branch on the state
there); and a new run with input on a thread paused at the graph's own ``interrupt()``.
``lgdiff_plain_turns.mjs`` is the same through the JS SDK. Called from
``lgdiff_plain_drive.drive`` on the thread of its streamed agent run.
"""

from __future__ import annotations

from typing import Any

from lgdiff_drive import Trace, _plain, _snapshot

AGAIN = {"messages": [{"role": "user", "content": "And tomorrow?"}]}
THIRD = {"messages": [{"role": "user", "content": "Thanks!"}]}
OTHER = {"messages": [{"role": "user", "content": "And in Oslo?"}]}
MODES = ["values", "updates", "messages-tuple"]


async def second_message(
    t: Trace, lg: Any, url: str, api_key: str, tid: str, tag: dict[str, str]
) -> None:
    # -- agent: a second message streamed, a third by runs.wait, the thread read back
    await t.stream(
        "runs.stream agent again",
        lg.runs.stream(tid, "agent", input=AGAIN, stream_mode=MODES),
    )
    await t.call("threads.get agent again", lg.threads.get(tid))
    await t.call("threads.get_state agent again", lg.threads.get_state(tid))
    await t.call("threads.get_history agent again", lg.threads.get_history(tid, limit=20))
    await t.call("runs.wait agent third", lg.runs.wait(tid, "agent", input=THIRD))
    await t.call("runs.list agent again", lg.runs.list(tid))
    await from_the_past(t, lg, tid)

    # -- ask: a new input while the graph waits at its interrupt()
    thread = await t.call("threads.create ask again", lg.threads.create(metadata=tag))
    ask = thread["thread_id"]
    await t.call("runs.wait ask again to pause", lg.runs.wait(ask, "ask", input={"topic": "rain"}))
    await t.call(
        "runs.wait ask new input while paused", lg.runs.wait(ask, "ask", input={"topic": "snow"})
    )
    await t.call("threads.get_state ask new input", lg.threads.get_state(ask))
    await t.call("threads.get_history ask new input", lg.threads.get_history(ask, limit=20))

    # -- RemoteGraph: two invokes on one thread
    from langgraph.pregel.remote import RemoteGraph

    remote = RemoteGraph("agent", url=url, api_key=api_key)
    thread = await t.call("threads.create remote agent", lg.threads.create(metadata=tag))
    config: Any = {"configurable": {"thread_id": thread["thread_id"]}}

    async def invoke(what: dict[str, Any]) -> Any:
        return _plain(await remote.ainvoke(what, config))

    first = {"messages": [{"role": "user", "content": "What is the weather in Paris?"}]}
    await t.call("RemoteGraph.invoke agent", invoke(first))
    await t.call("RemoteGraph.invoke agent again", invoke(AGAIN))
    await t.call("RemoteGraph.get_state agent again", _snapshot(remote.aget_state(config)))


async def from_the_past(t: Trace, lg: Any, tid: str) -> None:
    """A run with a new message from the checkpoint the thread's first run ended at (as
    a chat UI sends an edited second message): a branch on the state there."""
    history = await lg.threads.get_history(tid, limit=50)
    first_end = [h["checkpoint_id"] for h in history if h["next"] == []][-1]
    await t.call(
        "runs.wait agent from a past checkpoint",
        lg.runs.wait(tid, "agent", input=OTHER, checkpoint_id=first_end),
    )
    await t.call("threads.get_state agent branch", lg.threads.get_state(tid))
    await t.call("threads.get_history agent branch", lg.threads.get_history(tid, limit=50))
