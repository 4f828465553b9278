"""A graph step over a LangChain agent whose model asks for two tool calls in one turn, for
test_graph_sibling_kill.py. ``quick`` returns at once; ``slow``, in the first process,
waits until quick's result is stored (up to a second), then SIGKILLs the process while it
still runs. ``slow`` is marked idempotent (so the call the kill cut off is run again
without asking anybody); ``quick`` carries no mark: what is checked is that a call of the
turn that finished is not run again, whatever it does.

The group commit's window is widened here from 20 ms to 5 s, so that a result held for the
checkpoint after the turn (which a kill would lose) is certainly still held at the kill."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import counter
from langchain_core.tools import tool

from longtask import LongTask, Runner, Stage, current_context, graph_step
from longtask.checkpointers import _held

_held.HOLD = 5.0

QUICK = "quick-result-8d1f"


def _stored(thread: str) -> bool:
    with Runner(os.environ["LONGTASK_DB"]) as runner:
        rows = runner.db.store._run(
            "SELECT value FROM longtask_cp_writes WHERE thread_id = ? AND channel = ?",
            (thread, "messages"),
        )
    return any(QUICK.encode() in bytes(r[0]) for r in rows)


@tool
def quick(x: int) -> str:
    """Look something up quickly."""
    counter.record("quick")
    return QUICK


@tool
def slow(x: int) -> str:
    """Work for a while (kills the first process)."""
    counter.record("slow")
    marker = os.environ["LT_CRASH_MARKER"]
    if not os.path.exists(marker):
        thread = current_context().thread_id
        deadline = time.monotonic() + 30
        while "quick" not in {s for s, _ in counter.calls(os.environ[counter.ENV_VAR])}:
            if time.monotonic() > deadline:
                raise RuntimeError("quick never ran")
            time.sleep(0.01)
        # stored at once when it returns; held (5 s here), it is not yet
        stored_by = time.monotonic() + 1.0
        while not _stored(thread) and time.monotonic() < stored_by:
            time.sleep(0.02)
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    return "slow-result"


def agent() -> Any:
    from langchain.agents import create_agent
    from langchain_openai import ChatOpenAI

    return create_agent(ChatOpenAI(model="gpt-4o-mini", max_retries=0), [quick, slow])


task = LongTask(
    name="graph-sibling",
    stages=[
        Stage(
            "s",
            [
                graph_step(
                    "turn",
                    agent,
                    input=lambda ctx: {"messages": [{"role": "user", "content": "Go."}]},
                    output=lambda state: state["messages"][-1].content,
                    tools={"slow": "idempotent"},
                )
            ],
        )
    ],
)
