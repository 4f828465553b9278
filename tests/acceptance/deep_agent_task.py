"""A LangChain deep agent (``deepagents.create_deep_agent`` over ``ChatOpenAI``), left as its
author wrote it, run as a graph step: for test_deep_agent_kill.py and deep_chaos_driver.py.

The main agent's model asks, in its first turn, for two tool calls at once: ``task`` (a
``booker`` sub-agent, which books a flight and picks a seat with tools of its own, each in
a turn of its own model) and ``book_hotel``; in its second turn for ``refund``, which is
behind ``interrupt_on`` (a person approves it); then it answers. Every side-effecting tool
writes a row to an outside SQLite database (``$LT_OUTSIDE_DB``) with the model's
``tool_call_id``, committed before the tool returns, and the graph step's ``reconcile``
looks a cut-off call up there by that id: what a booking system that stores the caller's
request id would offer.

Kill hooks, for tests that kill at one place: ``$LT_KILL_AT`` names ``TOOL:before`` or
``TOOL:after`` (around the tool's outside commit); the first process that gets there (no
``$LT_CRASH_MARKER`` file yet) SIGKILLs itself. ``$LT_TOOL_SLEEP`` (seconds) widens the
windows before and after each commit, so random kills land in them.

The model's answers are a function of the request (``script``): the trip (the thread) is
named in the first user message, so each thread's tool calls have arguments, and so
``tool_call_id`` s, of their own."""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import sqlite3
import time
from pathlib import Path
from typing import Annotated, Any

from langchain_core.tools import InjectedToolCallId, tool

from longtask import EffectCall, LongTask, Stage, graph_step

OUTSIDE_ENV = "LT_OUTSIDE_DB"
#: the tools that write to the outside database, by the agent that has them
MAIN_TOOLS = ("book_hotel", "refund")
SUB_TOOLS = ("book_flight", "pick_seat")
SIDE_EFFECTS = MAIN_TOOLS + SUB_TOOLS
#: the header each model request carries the asking process's id in
PID_HEADER = "X-Caller-Pid"
#: the text of the thread's first message, and of the sub-agent's (its task's description)
PLAN = "Plan trip {trip}."
BOOK = "Book a flight to Paris for trip {trip}."


# -- the outside system ---------------------------------------------------------------------


def connect(path: str | Path | None = None) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path or os.environ[OUTSIDE_ENV]), timeout=30, isolation_level=None)
    conn.execute("PRAGMA busy_timeout=30000")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS calls (tool_call_id TEXT NOT NULL, tool TEXT NOT NULL, "
        "args TEXT NOT NULL, result TEXT NOT NULL, pid INTEGER NOT NULL, at REAL NOT NULL)"
    )
    return conn


def rows(path: str | Path) -> list[tuple[str, str, dict[str, Any], int]]:
    """Every committed call: (tool_call_id, tool, args, pid), in order."""
    if not Path(path).exists():
        return []
    conn = connect(path)
    try:
        found = conn.execute("SELECT tool_call_id, tool, args, pid FROM calls ORDER BY rowid")
        return [(i, t, json.loads(a), p) for i, t, a, p in found]
    finally:
        conn.close()


def lookup(tool_call_id: str, path: str | Path | None = None) -> str | None:
    """The answer the outside system gave the call ``tool_call_id``, None if it has none."""
    conn = connect(path)
    try:
        row = conn.execute(
            "SELECT result FROM calls WHERE tool_call_id = ? ORDER BY rowid LIMIT 1",
            (tool_call_id,),
        ).fetchone()
    finally:
        conn.close()
    return None if row is None else str(row[0])


def _maybe_kill(tool_name: str, where: str) -> None:
    spec = os.environ.get("LT_KILL_AT")
    if spec != f"{tool_name}:{where}":
        return
    marker = Path(os.environ["LT_CRASH_MARKER"])
    if marker.exists():
        return
    marker.touch()
    os.kill(os.getpid(), signal.SIGKILL)


def _pause() -> None:
    seconds = float(os.environ.get("LT_TOOL_SLEEP") or 0)
    if seconds:
        time.sleep(seconds)


def commit(tool_name: str, tool_call_id: str, args: dict[str, Any]) -> str:
    """The outside write of one tool call, committed, then its answer."""
    _pause()
    _maybe_kill(tool_name, "before")
    result = f"{tool_name} done: " + ", ".join(f"{k}={v}" for k, v in sorted(args.items()))
    conn = connect()
    try:
        conn.execute(
            "INSERT INTO calls VALUES (?, ?, ?, ?, ?, ?)",
            (tool_call_id, tool_name, json.dumps(args), result, os.getpid(), time.time()),
        )
    finally:
        conn.close()
    _maybe_kill(tool_name, "after")
    _pause()
    return result


# -- the agent, as its author wrote it ------------------------------------------------------


@tool
def book_hotel(city: str, trip: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
    """Book a hotel for the trip."""
    return commit("book_hotel", tool_call_id, {"city": city, "trip": trip})


@tool
def refund(order: str, trip: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
    """Refund an old order (a person approves it first)."""
    return commit("refund", tool_call_id, {"order": order, "trip": trip})


@tool
def book_flight(dest: str, trip: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
    """Book a flight."""
    return commit("book_flight", tool_call_id, {"dest": dest, "trip": trip})


@tool
def pick_seat(seat: str, trip: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
    """Pick a seat on the booked flight."""
    return commit("pick_seat", tool_call_id, {"seat": seat, "trip": trip})


def _kill_hook() -> Any:
    """A middleware of the sub-agent that does nothing, except kill the process before the
    sub-agent's first model call where ``$LT_KILL_AT`` is ``booker:before_model``."""
    from langchain.agents.middleware import AgentMiddleware

    class KillHook(AgentMiddleware):  # type: ignore[type-arg]
        def before_model(self, state: Any, runtime: Any) -> None:
            _maybe_kill("booker", "before_model")

    return KillHook()


def _stamp(request: Any) -> None:
    # the process that asks, for the crash driver: a header the scripted server logs
    request.headers[PID_HEADER] = str(os.getpid())


@functools.cache
def agent() -> Any:
    """The deep agent, built once per process (the crash driver builds it before it forks
    its runs)."""
    import httpx
    from deepagents import create_deep_agent
    from langchain_openai import ChatOpenAI

    client = httpx.Client(event_hooks={"request": [_stamp]})
    model = ChatOpenAI(model="gpt-4o-mini", max_retries=0, http_client=client)
    return create_deep_agent(
        model,
        [book_hotel, refund],
        system_prompt="You plan trips.",
        subagents=[
            {
                "name": "booker",
                "description": "Books flights and seats.",
                "system_prompt": "You book flights.",
                "tools": [book_flight, pick_seat],
                "middleware": [_kill_hook()],
            }
        ],
        interrupt_on={"refund": True},
    )


# -- the scripted model ---------------------------------------------------------------------


def trip_of(text: str) -> str | None:
    found = re.search(r"trip (\S+?)\.?$", text.strip())
    return found.group(1) if found else None


def script(request: Any) -> Any:
    """The model's answer to a request of the main agent or of its sub-agent."""
    from fakes import Reply

    text = request.first_text("user")
    trip = trip_of(text)
    if trip is None:
        raise LookupError(f"no trip in {text!r}")
    if text == BOOK.format(trip=trip):
        sub = [
            Reply.tool_calls([("book_flight", {"dest": "Paris", "trip": trip})]),
            Reply.tool_calls([("pick_seat", {"seat": "12A", "trip": trip})]),
            Reply.text(f"Flight and seat booked for trip {trip}."),
        ]
        return sub[request.turn]
    main = [
        Reply.tool_calls(
            [
                ("task", {"description": BOOK.format(trip=trip), "subagent_type": "booker"}),
                ("book_hotel", {"city": "Paris", "trip": trip}),
            ]
        ),
        Reply.tool_calls([("refund", {"order": f"old-{trip}", "trip": trip})]),
        Reply.text(f"Trip {trip} planned."),
    ]
    return main[request.turn]


#: the model requests of one thread (main: 3 turns, sub-agent: 3 turns)
MODEL_CALLS = 6


# -- the graph step -------------------------------------------------------------------------


def found_outside(call: EffectCall) -> str | None:
    """A cut-off tool call: what the outside system recorded under its tool_call_id."""
    return lookup(call.tool_call_id) if call.tool_call_id else None


def _input(ctx: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": PLAN.format(trip=ctx.thread_id)}]}


def _task(tools: dict[str, Any]) -> LongTask:
    return LongTask(
        name="deep-agent",
        stages=[
            Stage(
                "s",
                [
                    graph_step(
                        "plan",
                        agent,
                        input=_input,
                        output=lambda state: state["messages"][-1].content,
                        tools=tools,
                    )
                ],
            )
        ],
    )


#: the marks a user gives: their side-effecting tools reconciled by their tool_call_id;
#: the deep agent's own tools are left as they are (``task``, which only runs a sub-agent,
#: runs again if cut off)
task = _task(dict.fromkeys(SIDE_EFFECTS, found_outside))
#: the same with ``task`` marked ``once``: a cut-off call of its own code waits for a
#: person, so what lets it run again is only that its sub-agent had started
once_task = _task({**dict.fromkeys(SIDE_EFFECTS, found_outside), "task": "once"})
