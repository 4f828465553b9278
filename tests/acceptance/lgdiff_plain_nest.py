"""A served graph's own shape in the differential test of plain LangGraph apps (issue 52
items 3 to 5), through the Python SDK: ``nest`` (a subgraph that writes to the custom
stream, calls the model and pauses at its own ``interrupt()``) streamed with subgraphs
(the model's tokens, the custom writes and the subgraph's parts in its own namespace), its
subgraphs and schemas, its state at the pause inside the subgraph, and the resume; a run
of ``ask`` with ``interrupt_before`` continued by a run without input; and a run's stream
dropped mid-run (the run held while ``$LGAPPS_HOLD`` names a file) and joined again after
the last event the client had (``Last-Event-ID``); a stream with ``on_disconnect="cancel"``
left mid-run; a thread's stream joined before its run; and an A2A text message to the
served chat graph. Called from ``lgdiff_plain_drive.drive``.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path
from typing import Any

import httpx
from lgdiff_drive import Trace, _ok

NEST = {"messages": [{"role": "user", "content": "Summarize the nested report."}]}
NEST_MODES = ["values", "updates", "messages-tuple", "custom"]
TOPIC = {"topic": "rain"}


async def _parts(parts: Any) -> list[tuple[str | None, str, Any]]:
    return [(p.id, p.event, p.data) async for p in parts]


async def _final(lg: Any, tid: str, run_id: str) -> Any:
    """The run once it has ended (its status: what the servers compare)."""
    for _ in range(600):
        run = await lg.runs.get(tid, run_id)
        if run["status"] not in ("pending", "running"):
            return run
        await asyncio.sleep(0.1)
    return {"__error__": "timeout", "detail": f"run {run_id} did not end"}


async def nested(t: Trace, lg: Any, url: str, api_key: str, tag: dict[str, str]) -> None:
    found = await t.call("assistants.search nest", lg.assistants.search(graph_id="nest"))
    nest = found[0]["assistant_id"] if _ok(found) and found else "nest"
    await t.call("assistants.get_subgraphs nest", lg.assistants.get_subgraphs(nest))
    await t.call(
        "assistants.get_subgraphs nest recurse",
        lg.assistants.get_subgraphs(nest, namespace="research", recurse=True),
    )
    await t.call("assistants.get_schemas nest", lg.assistants.get_schemas(nest))

    # -- streamed with subgraphs to the pause inside the subgraph, read, resumed
    thread = await t.call("threads.create nest", lg.threads.create(metadata=tag))
    tid = thread["thread_id"]
    parts = await t.stream(
        "runs.stream nest subgraphs",
        lg.runs.stream(tid, "nest", input=NEST, stream_mode=NEST_MODES, stream_subgraphs=True),
    )
    tokens = [p for p in parts if p[0].startswith("messages")]
    t.items.append(("nest tokens", {"status": "tokens" if len(tokens) > 1 else "whole"}))
    await t.call("threads.get_state nest paused", lg.threads.get_state(tid, subgraphs=True))
    await t.call("threads.get_state nest paused flat", lg.threads.get_state(tid))
    await t.stream(
        "runs.stream nest resume",
        lg.runs.stream(
            tid,
            "nest",
            command={"resume": "yes"},
            stream_mode=["values", "updates", "custom"],
            stream_subgraphs=True,
        ),
    )
    await t.call("threads.get_state nest done", lg.threads.get_state(tid))

    # -- ask with interrupt_before: stops before its node; a run without input continues
    thread = await t.call("threads.create ask breaks", lg.threads.create(metadata=tag))
    tid = thread["thread_id"]
    await t.call(
        "runs.wait ask interrupt_before",
        lg.runs.wait(tid, "ask", input=TOPIC, interrupt_before=["ask"]),
    )
    await t.call("threads.get_state ask stopped", lg.threads.get_state(tid))
    await t.call("runs.wait ask continue", lg.runs.wait(tid, "ask", input=None))
    await t.call("threads.get_state ask continued", lg.threads.get_state(tid))

    # -- a run's stream dropped mid-run (held in ``publish``), joined again after the last
    # event the client had: the same events, none missing, none twice
    hold = os.environ.get("LGAPPS_HOLD")
    thread = await t.call("threads.create nest join", lg.threads.create(metadata=tag))
    tid = thread["thread_id"]
    await t.call("runs.wait nest to pause", lg.runs.wait(tid, "nest", input=NEST))
    if hold:
        Path(hold).touch()
    try:
        run = await t.call(
            "runs.create nest resume resumable",
            lg.runs.create(
                tid,
                "nest",
                command={"resume": "yes"},
                stream_mode=["values", "updates"],
                stream_resumable=True,
            ),
        )
        if not _ok(run):
            return
        first: list[Any] = []
        parts = lg.runs.join_stream(tid, run["run_id"])
        async for part in parts:
            first.append(part)
            if len(first) >= 3:
                break  # the connection drops here
        await parts.aclose()
    finally:
        if hold:
            Path(hold).unlink(missing_ok=True)
    last = next((p.id for p in reversed(first) if p.id), None)
    rest = await _parts(lg.runs.join_stream(tid, run["run_id"], last_event_id=last))
    t.items.append(("runs.join_stream nest dropped", [[p.event, p.data] for p in first]))
    t.items.append(("runs.join_stream nest after drop", [[e, d] for _, e, d in rest]))
    said = [p.event for p in first] + [e for _, e, _ in rest]
    t.items.append(("runs.join_stream nest events", {"status": ",".join(said)}))

    # -- on_disconnect="cancel": the client goes mid-run (held in ``publish``); the run is
    # cancelled, not carried on
    thread = await t.call("threads.create nest leave", lg.threads.create(metadata=tag))
    tid = thread["thread_id"]
    await t.call("runs.wait nest leave to pause", lg.runs.wait(tid, "nest", input=NEST))
    if hold:
        Path(hold).touch()
    left: list[Any] = []
    try:
        parts = lg.runs.stream(
            tid,
            "nest",
            command={"resume": "yes"},
            stream_mode=["values", "updates"],
            on_disconnect="cancel",
        )
        async for part in parts:
            left.append(part)
            if len(left) >= 3:
                break  # the client goes
        await parts.aclose()
        await asyncio.sleep(1.0)  # the server notices
    finally:
        if hold:
            Path(hold).unlink(missing_ok=True)
    run_id = next((p.data.get("run_id") for p in left if p.event == "metadata"), None)
    if run_id:
        await t.call("runs.get nest left", _final(lg, tid, run_id))

    # -- a thread's stream joined before its run starts carries that run
    thread = await t.call("threads.create ask joined", lg.threads.create(metadata=tag))
    tid = thread["thread_id"]
    said: list[str] = []

    async def follow() -> None:
        async for part in await lg.threads.join_stream(tid):
            said.append(part.event)
            if part.event == "metadata" and (part.data or {}).get("status") == "run_done":
                return

    watcher = asyncio.ensure_future(follow())
    await asyncio.sleep(1.0)  # joined before the run
    await t.call("runs.create ask after join", lg.runs.create(tid, "ask", input=TOPIC))
    try:
        await asyncio.wait_for(watcher, 60)
    except TimeoutError:
        watcher.cancel()
        said.append("timeout")
    t.items.append(("threads.join_stream then run", {"status": ",".join(said)}))

    # -- an A2A text message to the served chat graph, answered by its last AI message
    found = await t.call("assistants.search agent a2a", lg.assistants.search(graph_id="agent"))
    agent = found[0]["assistant_id"] if _ok(found) and found else "agent"
    message = {
        "role": "user",
        "parts": [{"kind": "text", "text": "What is the weather in Paris?"}],
        "messageId": str(uuid.uuid4()),
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}}
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:
        got = await http.post(
            f"/a2a/{agent}",
            json=body,
            headers={"X-Api-Key": api_key, "Accept": "application/json"},
        )
    t.items.append(("a2a message/send agent text", got.json()))
