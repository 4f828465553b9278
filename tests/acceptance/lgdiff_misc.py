"""The differential test's calls of issue 43's thread and run endpoints, through the Python
SDK: ``threads.copy`` (of a paused thread, whose copy is resumed), the history's filters
(``metadata``, ``before``, ``checkpoint``), ``threads.join_stream`` (a resumable run
replayed from ``Last-Event-ID: -``), ``runs.delete``, ``threads.prune`` (``delete`` and
``keep_latest``) and ``runs.create_batch``. ``lgdiff_misc.mjs`` makes the same calls, with
the same labels, through the JS SDK; ``lgdiff_drive.drive`` calls ``drive`` here."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lgdiff_drive import Trace

GRAPH = "chat"
CHAT = {"messages": [{"role": "user", "content": "What is the weather?"}]}
APPROVE = {"approved": True, "comment": "ok"}
#: calls the reference server refuses, as the script means it to: what was deleted is not
#: found (404); LangGraph's in-memory runtime has no keep_latest (422; its PostgreSQL
#: runtime has, and longtask serves it: an intended difference)
REFUSED = frozenset({"runs.get deleted", "threads.get pruned", "threads.prune keep_latest"})
#: calls every run of the script makes (the test checks the reference's trace has them)
LABELS = (
    "threads.copy paused",
    "runs.wait resume copy",
    "threads.get_history misc checkpoint",
    "threads.get_history misc before: the rest",
    "threads.join_stream replay",
    "runs.delete",
    "threads.prune delete",
    "runs.create_batch: runs",
)
#: what only the Python script calls (RemoteGraph is Python's)
PY_LABELS = ("RemoteGraph.get_state_history filter",)
#: seconds a thread's stream is read for before the call counts as failed
JOIN_LIMIT = 60.0


def _ok(answer: Any) -> bool:
    return not (isinstance(answer, dict) and "__error__" in answer)


async def until_done(parts: AsyncIterator[Any]) -> AsyncIterator[Any]:
    """A thread's stream up to its first run's end (``metadata`` ``run_done``): LangGraph's
    server keeps the stream open for the thread's next runs."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + JOIN_LIMIT
    it = parts.__aiter__()
    while True:
        try:
            part = await asyncio.wait_for(it.__anext__(), max(0.0, deadline - loop.time()))
        except StopAsyncIteration:
            return
        yield part
        data = part.data
        if part.event == "metadata" and isinstance(data, dict) and data.get("status") == "run_done":
            return


async def drive(t: Trace, lg: Any, tag: dict[str, str]) -> None:
    thread = await t.call("threads.create misc", lg.threads.create(metadata=tag))
    tid = thread["thread_id"]
    await t.call("runs.wait to pause (misc)", lg.runs.wait(tid, GRAPH, input=CHAT))

    # -- copy: the paused thread's copy waits at the same pause, and is resumed
    copy = await t.call("threads.copy paused", lg.threads.copy(tid))
    cid = copy["thread_id"] if _ok(copy) and copy else None
    if cid is not None:
        await t.call("threads.get_state copy", lg.threads.get_state(cid))
        await t.call("runs.wait resume copy", lg.runs.wait(cid, GRAPH, command={"resume": APPROVE}))
        await t.call("threads.get_state copy done", lg.threads.get_state(cid))

    # -- the history's filters, on the paused source
    every = await t.call("threads.get_history misc all", lg.threads.get_history(tid, limit=20))
    await t.call(
        "threads.get_history misc metadata",
        lg.threads.get_history(tid, limit=20, metadata={"source": "input"}),
    )
    if _ok(every) and len(every) > 1:
        last = every[-1]["checkpoint"]["checkpoint_id"]
        await t.call(
            "threads.get_history misc checkpoint",
            lg.threads.get_history(tid, limit=5, checkpoint={"checkpoint_id": last}),
        )
        first = every[0]["checkpoint"]["checkpoint_id"]
        older = await t.call(
            "threads.get_history misc before",
            lg.threads.get_history(
                tid, limit=20, before={"configurable": {"checkpoint_id": first}}
            ),
        )
        if _ok(older):
            # what a client checks of ``before``: the same list without the head (``status``
            # is compared by value)
            ids = [h["checkpoint"]["checkpoint_id"] for h in older]
            rest = [h["checkpoint"]["checkpoint_id"] for h in every[1:]]
            t.items.append(
                ("threads.get_history misc before: the rest", {"status": str(ids == rest)})
            )

    # -- join the thread's stream: a resumable run, replayed from its start
    run = await t.call(
        "runs.create resume resumable",
        lg.runs.create(tid, GRAPH, command={"resume": APPROVE}, stream_resumable=True),
    )
    if _ok(run):
        rid = run["run_id"]
        await t.call("runs.join (misc)", lg.runs.join(tid, rid))
        await t.stream(
            "threads.join_stream replay",
            until_done(await lg.threads.join_stream(tid, last_event_id="-")),
        )
        await t.call("runs.delete", lg.runs.delete(tid, rid))
        await t.call("runs.get deleted", lg.runs.get(tid, rid))

    # -- prune: the copy (delete), the source (keep_latest)
    if cid is not None:
        await t.call("threads.prune delete", lg.threads.prune([cid]))
        await t.call("threads.get pruned", lg.threads.get(cid))
    await t.call("threads.prune keep_latest", lg.threads.prune([tid], strategy="keep_latest"))

    # -- a batch of stateless runs
    batch = await t.call(
        "runs.create_batch",
        lg.runs.create_batch([{"assistant_id": GRAPH, "input": CHAT} for _ in range(2)]),
    )
    if _ok(batch):
        t.items.append(("runs.create_batch: runs", {"status": f"{len(batch)} runs"}))


async def remote(t: Trace, graph: Any, config: dict[str, Any]) -> None:
    """RemoteGraph's filtered history (its ``filter`` is the history's ``metadata``)."""
    from lgdiff_drive import _plain

    async def history() -> list[Any]:
        out = []
        async for snap in graph.aget_state_history(config, filter={"source": "input"}, limit=5):
            out.append({"values": _plain(snap.values), "next": list(snap.next)})
        return out

    await t.call("RemoteGraph.get_state_history filter", history())
