"""An airline-booking agent as its author writes it, knowing nothing of longtask: a
``create_agent`` ReAct agent over ``ChatOpenAI`` whose tools write to the airline's own
SQLite database (``$AIRLINE_DB``). The crash harness (``airline_task.py``,
``airline_served.py``, ``airline_driver.py``) runs this module unchanged. ``graph`` has
plain functions as tools, ``async_graph`` the same tools as coroutines.

- ``lookup``: reads a flight's schedule (a static table: the same answer on every call);
- ``book_flight``: books a seat (a ``bookings`` row);
- ``cancel_booking``: cancels a booking and refunds its fare (a ``refunds`` row; a second
  call refunds again, as a naive tool does).

Each writing tool logs its model's ``tool_call_id`` and its answer in ``tool_calls``, in
the same transaction as its write (no unique constraint: a call made twice shows as two
rows). ``$AIRLINE_NAP`` (seconds) makes a writing tool sleep before its write and after
its commit (before it returns): the crash harness's kills land in those windows more often,
the second of which leaves a call done outside and unknown inside.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from pathlib import Path
from typing import Annotated, Any

from langchain.agents import create_agent
from langchain_core.tools import InjectedToolCallId, tool
from langchain_openai import ChatOpenAI

DB_ENV = "AIRLINE_DB"
NAP_ENV = "AIRLINE_NAP"

#: flight -> (schedule, fare)
FLIGHTS = {
    "LT101": ("AMS 08:05 -> LIS 10:40", 120),
    "LT202": ("LIS 14:10 -> MAD 16:20", 90),
    "LT303": ("MAD 18:00 -> AMS 20:35", 150),
}


def connect(path: str | Path | None = None) -> sqlite3.Connection:
    """A connection to the airline's database (autocommit; transactions are explicit)."""
    conn = sqlite3.connect(str(path or os.environ[DB_ENV]), timeout=30, isolation_level=None)
    conn.execute("PRAGMA busy_timeout=30000")
    return conn


def setup(path: str | Path | None = None) -> None:
    """The airline's tables and its flights (once, before the agent runs)."""
    conn = connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(
        """
        CREATE TABLE IF NOT EXISTS flights (flight TEXT PRIMARY KEY, schedule TEXT, fare INT);
        CREATE TABLE IF NOT EXISTS bookings (ref TEXT, passenger TEXT, flight TEXT,
                                             status TEXT);
        CREATE TABLE IF NOT EXISTS refunds (ref TEXT, amount INT);
        CREATE TABLE IF NOT EXISTS tool_calls (tool_call_id TEXT, tool TEXT, passenger TEXT,
                                               result TEXT, pid INT);
        """
    )
    conn.executemany(
        "INSERT OR IGNORE INTO flights VALUES (?, ?, ?)",
        [(f, s, fare) for f, (s, fare) in FLIGHTS.items()],
    )
    conn.close()


def _nap_seconds() -> float:
    return float(os.environ.get(NAP_ENV) or 0)


def _schedule(flight: str) -> str:
    conn = connect()
    try:
        row = conn.execute("SELECT schedule FROM flights WHERE flight = ?", (flight,)).fetchone()
    finally:
        conn.close()
    return f"{flight}: {row[0]}" if row else f"no flight {flight}"


def _write(tool: str, passenger: str, tool_call_id: str, result: str, *sql: Any) -> str:
    """The statements ``sql`` ((statement, parameters) pairs) and the log of the call, in
    one transaction; the call's answer."""
    conn = connect()
    try:
        conn.execute("BEGIN IMMEDIATE")
        for statement, params in sql:
            conn.execute(statement, params)
        conn.execute(
            "INSERT INTO tool_calls VALUES (?, ?, ?, ?, ?)",
            (tool_call_id, tool, passenger, result, os.getpid()),
        )
        conn.execute("COMMIT")
    finally:
        conn.close()
    return result


def _book(passenger: str, flight: str, tool_call_id: str) -> str:
    ref = f"{passenger}/{flight}"
    insert = ("INSERT INTO bookings VALUES (?, ?, ?, 'booked')", (ref, passenger, flight))
    return _write("book_flight", passenger, tool_call_id, f"booked {ref}", insert)


def _cancel(ref: str, tool_call_id: str) -> str:
    passenger, _, flight = ref.partition("/")
    fare = FLIGHTS[flight][1]
    return _write(
        "cancel_booking",
        passenger,
        tool_call_id,
        f"cancelled {ref}, refunded {fare}",
        ("UPDATE bookings SET status = 'cancelled' WHERE ref = ?", (ref,)),
        ("INSERT INTO refunds VALUES (?, ?)", (ref, fare)),
    )


@tool
def lookup(flight: str) -> str:
    """A flight's schedule."""
    return _schedule(flight)


@tool
def book_flight(
    passenger: str, flight: str, tool_call_id: Annotated[str, InjectedToolCallId]
) -> str:
    """Book a seat on a flight for a passenger."""
    time.sleep(_nap_seconds())
    result = _book(passenger, flight, tool_call_id)
    time.sleep(_nap_seconds())
    return result


@tool
def cancel_booking(ref: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
    """Cancel a booking and refund its fare."""
    time.sleep(_nap_seconds())
    result = _cancel(ref, tool_call_id)
    time.sleep(_nap_seconds())
    return result


# The same tools as coroutines, as LangChain's current templates write them.


@tool("lookup")
async def alookup(flight: str) -> str:
    """A flight's schedule."""
    return _schedule(flight)


@tool("book_flight")
async def abook_flight(
    passenger: str, flight: str, tool_call_id: Annotated[str, InjectedToolCallId]
) -> str:
    """Book a seat on a flight for a passenger."""
    await asyncio.sleep(_nap_seconds())
    result = _book(passenger, flight, tool_call_id)
    await asyncio.sleep(_nap_seconds())
    return result


@tool("cancel_booking")
async def acancel_booking(ref: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
    """Cancel a booking and refund its fare."""
    await asyncio.sleep(_nap_seconds())
    result = _cancel(ref, tool_call_id)
    await asyncio.sleep(_nap_seconds())
    return result


def _agent(tools: list[Any]) -> Any:
    return create_agent(
        ChatOpenAI(model="gpt-4o-mini", max_retries=0),
        tools,
        system_prompt="You are an airline's booking assistant.",
    )


graph = _agent([lookup, book_flight, cancel_booking])
#: the agent with coroutine tools (its graph runs on LangGraph's async API)
async_graph = _agent([alookup, abook_flight, acancel_booking])
#: every tool object of both graphs
TOOLS = (lookup, book_flight, cancel_booking, alookup, abook_flight, acancel_booking)
