"""The differential test's calls of ``runs.cancel_many`` and an assistant's subgraphs by
namespace (issue 43), through the Python SDK: a cancel of a run that has ended (alone and
among many), of a run that does not exist and with both of the body's forms (each refused,
on both servers), and the subgraphs under the chat task's step names (the agent that
``answer`` runs, on both servers; none under ``approve``). ``lgdiff_more.mjs`` makes the
same calls, with the same labels, through the JS SDK; ``lgdiff_drive.drive`` calls
``drive`` here. A cancel by ``status`` is not called: it would cancel the runs other
parts of the script leave open (the batch's), at whatever point each server has them."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lgdiff_drive import Trace

GRAPH = "chat"
CHAT = {"messages": [{"role": "user", "content": "What is the weather?"}]}
#: calls the reference server refuses, as the script means it to: a run that has ended has
#: nothing to cancel (alone or among many) and one that does not exist is not found (404);
#: a status beside run ids is refused (422)
REFUSED = frozenset(
    {
        "runs.cancel_many ended",
        "runs.cancel ended",
        "runs.cancel_many missing",
        "runs.cancel_many both forms",
    }
)


def _ok(answer: Any) -> bool:
    return not (isinstance(answer, dict) and "__error__" in answer)


async def drive(t: Trace, lg: Any, tag: dict[str, str]) -> None:
    found = await t.call("assistants.search (more)", lg.assistants.search(graph_id=GRAPH))
    assistant = found[0]["assistant_id"] if _ok(found) and found else GRAPH
    for namespace in ("answer", "approve"):
        await t.call(
            f"assistants.get_subgraphs {namespace}",
            lg.assistants.get_subgraphs(assistant, namespace=namespace),
        )
    await t.call(
        "assistants.get_subgraphs recurse",
        lg.assistants.get_subgraphs(assistant, namespace="answer", recurse=True),
    )

    thread = await t.call("threads.create (more)", lg.threads.create(metadata=tag))
    tid = thread["thread_id"]
    await t.call("runs.wait to pause (more)", lg.runs.wait(tid, GRAPH, input=CHAT))
    runs = await t.call("runs.list (more)", lg.runs.list(tid))
    if _ok(runs) and runs:
        rid = runs[0]["run_id"]
        await t.call("runs.cancel_many ended", lg.runs.cancel_many(thread_id=tid, run_ids=[rid]))
        await t.call("runs.cancel ended", lg.runs.cancel(tid, rid))
        await t.call("runs.get after cancel_many", lg.runs.get(tid, rid))
        await t.call(
            "runs.cancel_many both forms",
            lg.runs.cancel_many(thread_id=tid, run_ids=[rid], status="all"),
        )
    await t.call(
        "runs.cancel_many missing",
        lg.runs.cancel_many(thread_id=tid, run_ids=[str(uuid.uuid4())]),
    )
    await t.call("threads.get_state after cancel_many", lg.threads.get_state(tid))
