"""The airline agent of ``airline_agent.py``, unchanged, as a graph step (the crash
harness, ``test_airline_crash.py``). How its tools' cut-off calls are settled is said here,
in ``graph_step(tools=...)``, not in the agent's code: ``lookup`` only reads (run again
freely); ``book_flight`` and ``cancel_booking`` write, and a call cut off mid-way is looked
up in the airline's database by its ``tool_call_id``, which each tool logs in the same
transaction as its write (:func:`reconcile`)."""

from __future__ import annotations

from typing import Any

import airline_agent

from longtask import EffectCall, LongTask, Stage, graph_step


def reconcile(call: EffectCall) -> str | None:
    """What a cut-off call of a writing tool did: its answer, as the tool logged it with its
    write, or None if the airline has no record of it (it did not happen: called again)."""
    conn = airline_agent.connect()
    try:
        row = conn.execute(
            "SELECT result FROM tool_calls WHERE tool_call_id = ?", (call.tool_call_id,)
        ).fetchone()
    finally:
        conn.close()
    return None if row is None else str(row[0])


MARKS: dict[str, Any] = {
    "lookup": "read_only",
    "book_flight": reconcile,
    "cancel_booking": reconcile,
}


def ask(passenger: str) -> dict[str, Any]:
    """The agent's input for one passenger's trip."""
    return {"messages": [{"role": "user", "content": f"Plan the trip of passenger {passenger}."}]}


def _task(graph: Any) -> LongTask:
    return LongTask(
        name="airline",
        stages=[
            Stage(
                "s",
                [
                    graph_step(
                        "trip",
                        graph,
                        input=lambda ctx: ask(ctx.inputs["passenger"]),
                        output=lambda state: state["messages"][-1].content,
                        tools=MARKS,
                    )
                ],
            )
        ],
    )


task = _task(airline_agent.graph)
#: the agent whose tools are coroutines
atask = _task(airline_agent.async_graph)
