"""A graph step over a LangChain agent (``create_agent`` over ``ChatOpenAI``) whose
side-effecting tool is ledgered, for test_graph_ledger_kill.py. The model asks for two tool
calls at once; the second, ``crash``, SIGKILLs the first process once the ledger holds the
first call's success, so the tools node dies after ``charge`` happened and before the
node's checkpoint. ``atask`` is the same agent with tools that are coroutines (``@tool async
def``, as LangChain's current templates write them): its graph runs on LangGraph's async
API."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

import counter
from langchain_core.tools import tool

from longtask import LongTask, Runner, Stage, current_context, graph_step, ledgered


@tool
def charge(cents: int) -> str:
    """Charge the card."""
    counter.record("charge")
    return f"charged {cents}"


@tool
def crash(reason: str) -> str:
    """Check something (kills the first process)."""
    counter.record("crash")
    marker = Path(os.environ["LT_CRASH_MARKER"])
    if not marker.exists():
        thread = current_context().thread_id
        deadline = time.monotonic() + 30
        with Runner(os.environ["LONGTASK_DB"]) as runner:
            while not any(
                e.name == "tool:charge" and e.status == "succeeded" for e in runner.effects(thread)
            ):
                if time.monotonic() > deadline:
                    raise RuntimeError("the charge was never recorded")
                time.sleep(0.02)
        marker.touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return "fine"


@tool("charge")
async def acharge(cents: int) -> str:
    """Charge the card."""
    return str(charge.invoke({"cents": cents}))


@tool("crash")
async def acrash(reason: str) -> str:
    """Check something (kills the first process)."""
    # its wait is blocking: off the event loop, which the ledgered charge runs on
    return str(await asyncio.to_thread(crash.invoke, {"reason": reason}))


def _agent(tools: list[Any]) -> Any:
    from langchain.agents import create_agent
    from langchain_openai import ChatOpenAI

    return create_agent(ChatOpenAI(model="gpt-4o-mini", max_retries=0), tools)


def agent() -> Any:
    """``charge`` wrapped in ``ledgered`` by hand (it keeps its own record)."""
    return _agent([ledgered(charge), crash])


def async_agent() -> Any:
    return _agent([ledgered(acharge), acrash])


def plain_agent() -> Any:
    """The agent as its author wrote it: no tool wrapped (the graph step's ledger is under
    every tool call)."""
    return _agent([charge, crash])


def plain_async_agent() -> Any:
    return _agent([acharge, acrash])


def _task(make: Any) -> LongTask:
    return LongTask(
        name="graph-ledger",
        stages=[
            Stage(
                "s",
                [
                    graph_step(
                        "pay",
                        make,
                        input=lambda ctx: {"messages": [{"role": "user", "content": "Pay 250."}]},
                        output=lambda state: state["messages"][-1].content,
                        # crash only checks: run again freely, not in the ledger
                        tools={"crash": "read_only"},
                    )
                ],
            )
        ],
    )


task = _task(agent)
atask = _task(async_agent)
ptask = _task(plain_agent)
patask = _task(plain_async_agent)
