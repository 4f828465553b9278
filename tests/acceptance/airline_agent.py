"""An airline-booking agent as its author writes it, knowing nothing of longtask: a
``create_agent`` ReAct agent over ``ChatOpenAI`` whose tools write to the airline's own
SQLite database (``$AIRLINE_DB``). The crash harness (``airline_task.py``,
``airline_served.py``, ``airline_driver.py``) runs this module unchanged.

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

import os
import sqlite3
import time
from pathlib import Path
from typing import Annotated

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


def _nap() -> None:
    nap = float(os.environ.get(NAP_ENV) or 0)
    if nap:
        time.sleep(nap)


@tool
def lookup(flight: str) -> str:
    """A flight's schedule."""
    conn = connect()
    try:
        row = conn.execute("SELECT schedule FROM flights WHERE flight = ?", (flight,)).fetchone()
    finally:
        conn.close()
    return f"{flight}: {row[0]}" if row else f"no flight {flight}"


@tool
def book_flight(
    passenger: str, flight: str, tool_call_id: Annotated[str, InjectedToolCallId]
) -> str:
    """Book a seat on a flight for a passenger."""
    ref = f"{passenger}/{flight}"
    result = f"booked {ref}"
    _nap()
    conn = connect()
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO bookings VALUES (?, ?, ?, 'booked')", (ref, passenger, flight))
        conn.execute(
            "INSERT INTO tool_calls VALUES (?, 'book_flight', ?, ?, ?)",
            (tool_call_id, passenger, result, os.getpid()),
        )
        conn.execute("COMMIT")
    finally:
        conn.close()
    _nap()
    return result


@tool
def cancel_booking(ref: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
    """Cancel a booking and refund its fare."""
    passenger, _, flight = ref.partition("/")
    fare = FLIGHTS[flight][1]
    result = f"cancelled {ref}, refunded {fare}"
    _nap()
    conn = connect()
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("UPDATE bookings SET status = 'cancelled' WHERE ref = ?", (ref,))
        conn.execute("INSERT INTO refunds VALUES (?, ?)", (ref, fare))
        conn.execute(
            "INSERT INTO tool_calls VALUES (?, 'cancel_booking', ?, ?, ?)",
            (tool_call_id, passenger, result, os.getpid()),
        )
        conn.execute("COMMIT")
    finally:
        conn.close()
    _nap()
    return result


graph = create_agent(
    ChatOpenAI(model="gpt-4o-mini", max_retries=0),
    [lookup, book_flight, cancel_booking],
    system_prompt="You are an airline's booking assistant.",
)
