"""A booking agent as its author wrote it (``create_agent`` over ``ChatOpenAI``, one tool),
for the tests of what a person sees and answers when a tool call was cut off
(test_effect_answers.py in-process, test_effect_inbox_serve.py through ``longtask serve``,
test_page_effect.py in a browser). Loaded by file reference: ``task`` (a graph step over the
agent) and ``graph`` (the agent, for a langgraph.json).

``book_flight`` writes the booking, with the model's ``tool_call_id``, to the airline's
SQLite database (``$LT_AIRLINE_DB``), and is then cut off the first time it runs (while
``$LT_CRASH_MARKER`` does not exist): ``$LT_CRASH`` = ``kill`` SIGKILLs its process,
``raise`` raises ``Crash`` (a ``KeyboardInterrupt``: nothing catches it, as nothing survives
a kill), so the call's ledger row stays ``started``. The tool is unmarked: at most once,
settled by a person."""

from __future__ import annotations

import os
import signal
import sqlite3
from pathlib import Path
from typing import Any

from langchain.tools import ToolRuntime
from langchain_core.tools import tool

from longtask import LongTask, Stage, graph_step

PROMPT = "Book LX8."


class Crash(KeyboardInterrupt):
    """The kill of ``$LT_CRASH=raise``: the call is cut off after the airline's commit."""


def _airline() -> sqlite3.Connection:
    conn = sqlite3.connect(os.environ["LT_AIRLINE_DB"])
    conn.execute("CREATE TABLE IF NOT EXISTS bookings (flight TEXT, tool_call_id TEXT)")
    return conn


def bookings() -> list[tuple[str, str]]:
    """The airline's bookings, in order: (flight, tool_call_id)."""
    with _airline() as conn:
        rows = conn.execute("SELECT flight, tool_call_id FROM bookings").fetchall()
    return [(str(f), str(t)) for f, t in rows]


@tool
def book_flight(flight: str, runtime: ToolRuntime) -> str:
    """Book a flight."""
    with _airline() as conn:
        conn.execute("INSERT INTO bookings VALUES (?, ?)", (flight, runtime.tool_call_id))
        number = conn.execute("SELECT count(*) FROM bookings").fetchone()[0]
    marker = Path(os.environ["LT_CRASH_MARKER"])
    if not marker.exists():
        marker.touch()
        if os.environ.get("LT_CRASH") == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise Crash
    return f"booked {flight} as #{number}"


def agent() -> Any:
    from langchain.agents import create_agent
    from langchain_openai import ChatOpenAI

    return create_agent(ChatOpenAI(model="gpt-4o-mini", max_retries=0), [book_flight])


def graph(config: Any) -> Any:
    """The agent, for a langgraph.json (built when served: the model's URL comes then)."""
    return agent()


task = LongTask(
    "trip",
    stages=[
        Stage(
            "s",
            [
                graph_step(
                    "agent",
                    agent,
                    input=lambda ctx: {"messages": [{"role": "user", "content": PROMPT}]},
                    output=lambda state: state["messages"][-1].content,
                )
            ],
        )
    ],
)
