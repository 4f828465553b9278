"""A graph step whose node writes to LangGraph's store and is then killed (SIGKILL) in the
first process, for ``test_store_kill.py``. The node reads what its key holds before it
writes (so the run that follows a kill says what a re-run node finds), then writes by its
own key; the first process dies right after the write, before the node returns."""

from __future__ import annotations

import os
import signal
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from longtask import LongTask, Stage, graph_step


class Noted(TypedDict, total=False):
    found: Any
    wrote: int


def note(state: Noted, runtime: Runtime) -> dict[str, Any]:
    assert runtime.store is not None
    where = ("notes",)
    before = runtime.store.get(where, "the-note")
    found = before.value if before is not None else None
    runs = 1 + (found["runs"] if found else 0)
    runtime.store.put(where, "the-note", {"runs": runs})
    marker = os.environ["LT_CRASH_MARKER"]
    if not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    return {"found": found, "wrote": runs}


builder = StateGraph(Noted)
builder.add_node("note", note)
builder.add_edge(START, "note")
builder.add_edge("note", END)

task = LongTask(
    name="store-kill",
    stages=[
        Stage(
            "s",
            [graph_step("noting", builder.compile(), input=lambda ctx: {}, output=lambda s: s)],
        )
    ],
)
