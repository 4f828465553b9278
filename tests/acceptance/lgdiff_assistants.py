"""The differential test's assistants calls (issue 43), through the Python SDK: create
an assistant of the chat graph, read, update (version 2), list versions, set the latest
back to 1, search (metadata, sort, select, the object format) and count, run a thread with
it to the approval and on, create again (refused, then ``do_nothing``), delete, and change
the graph's own assistant (which longtask refuses on purpose). ``lgdiff_drive.mjs`` makes
the same calls, with the same labels, through the JS SDK (``assistants`` section).
"""

from __future__ import annotations

from typing import Any

GRAPH = "chat"
CHAT = {"messages": [{"role": "user", "content": "What is the weather?"}]}
APPROVE = {"approved": True, "comment": "ok"}
#: calls made to be refused, by both servers (409 and 404)
REFUSED = frozenset({"assistants.create again", "assistants.get deleted"})


def _ok(answer: Any) -> bool:
    return not (isinstance(answer, dict) and "__error__" in answer)


async def drive_assistants(t: Any, lg: Any, tag: dict[str, str]) -> None:
    made = await t.call(
        "assistants.create",
        lg.assistants.create(
            GRAPH,
            config={"tags": ["lgdiff"]},
            context={"tone": "brief"},
            metadata={**tag, "kind": "made"},
            name="lgdiff assistant",
            description="made by the differential test",
        ),
    )
    if not _ok(made):
        return
    aid = made["assistant_id"]
    await t.call("assistants.get created", lg.assistants.get(aid))
    await t.call(
        "assistants.update",
        lg.assistants.update(aid, context={"tone": "long"}, metadata={"step": "two"}),
    )
    await t.call("assistants.get_versions", lg.assistants.get_versions(aid))
    await t.call(
        "assistants.get_versions metadata",
        lg.assistants.get_versions(aid, metadata={"step": "two"}, limit=5),
    )
    await t.call("assistants.set_latest", lg.assistants.set_latest(aid, 1))
    await t.call(
        "assistants.search metadata",
        lg.assistants.search(metadata=tag, sort_by="name", sort_order="asc"),
    )
    await t.call(
        "assistants.search select",
        lg.assistants.search(metadata=tag, select=["assistant_id", "name", "version"]),
    )
    await t.call(
        "assistants.search object",
        lg.assistants.search(graph_id=GRAPH, limit=1, response_format="object"),
    )
    await t.call("assistants.count metadata", lg.assistants.count(metadata=tag))

    thread = await t.call("threads.create assistant", lg.threads.create(metadata=tag))
    if _ok(thread):
        tid = thread["thread_id"]
        await t.call("runs.wait created assistant", lg.runs.wait(tid, aid, input=CHAT))
        await t.call(
            "runs.wait created assistant resume",
            lg.runs.wait(tid, aid, command={"resume": APPROVE}),
        )

    await t.call(
        "assistants.create again",
        lg.assistants.create(GRAPH, assistant_id=aid, metadata=tag),
    )
    await t.call(
        "assistants.create do_nothing",
        lg.assistants.create(GRAPH, assistant_id=aid, if_exists="do_nothing"),
    )
    await t.call("assistants.delete", lg.assistants.delete(aid))
    await t.call("assistants.get deleted", lg.assistants.get(aid))

    found = await t.call("assistants.search graph", lg.assistants.search(graph_id=GRAPH))
    system = [a for a in found if a["metadata"].get("created_by") == "system"] if _ok(found) else []
    if system:
        await t.call(
            "assistants.update the graph's own",
            lg.assistants.update(system[0]["assistant_id"], metadata={}),
        )
