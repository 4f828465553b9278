"""Schedules' tables (mixed into Store): the registered schedules with the next tick each
fires, and one row per tick that started a thread.

Firing takes the due schedules with row locks on PostgreSQL (``FOR UPDATE SKIP LOCKED``:
two workers never even try the same schedule at once); on SQLite, and as the last guard
everywhere, a tick's thread id is unique, and a schedule advances only from the tick it
was read at (compare and set).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

_COLS = (
    "name, task_ref, task_name, cron, timezone, inputs, catch_up, origin, paused, "
    "next_fire_at, last_tick_at, last_thread, last_error, created_at, updated_at, owner, api"
)


def _ts(value: Any) -> datetime | None:
    return datetime.fromtimestamp(float(value), UTC) if value is not None else None


@dataclass(frozen=True)
class ScheduleRecord:
    name: str
    task_ref: str
    task_name: str
    cron: str
    timezone: str
    inputs: dict[str, Any]
    catch_up: str
    #: "declared" (in the task's code, kept in step by `schedule add TASKREF`) or "cli"
    origin: str
    paused: bool
    #: the next tick to fire (UTC); while paused, the one it would fire
    next_fire_at: datetime
    last_tick_at: datetime | None = None
    last_thread: str | None = None
    #: why the last attempt to fire failed (the task did not import, its inputs no longer
    #: fit); cleared by the next fire
    last_error: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    #: who added it: the owner of the threads it starts (None: added before owners were
    #: recorded; its threads are then owned by the user of the process that fires them)
    owner: str | None = None
    #: a cron of the LangGraph Server API (origin "api"): what each tick records (see
    #: ``longtask.serve.lgapi.resources._crons``); None for longtask's own schedules
    api: dict[str, Any] | None = None

    def next_fire_local(self) -> datetime:
        return self.next_fire_at.astimezone(ZoneInfo(self.timezone))

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "task_ref": self.task_ref,
            "task_name": self.task_name,
            "cron": self.cron,
            "timezone": self.timezone,
            "inputs": self.inputs,
            "catch_up": self.catch_up,
            "origin": self.origin,
            "paused": self.paused,
            "next_fire_at": self.next_fire_at.isoformat(),
            "next_fire_local": self.next_fire_local().isoformat(),
            "last_tick_at": self.last_tick_at.isoformat() if self.last_tick_at else None,
            "last_thread": self.last_thread,
            "last_error": self.last_error,
            "owner": self.owner,
        }


def _record(r: Sequence[Any]) -> ScheduleRecord:
    return ScheduleRecord(
        name=r[0],
        task_ref=r[1],
        task_name=r[2],
        cron=r[3],
        timezone=r[4],
        inputs=json.loads(r[5]),
        catch_up=r[6],
        origin=r[7],
        paused=bool(r[8]),
        next_fire_at=_ts(r[9]) or datetime.now(UTC),
        last_tick_at=_ts(r[10]),
        last_thread=r[11],
        last_error=r[12],
        created_at=_ts(r[13]),
        updated_at=_ts(r[14]),
        owner=r[15],
        api=json.loads(r[16]) if r[16] else None,
    )


class DueSchedules:
    """Due schedules, and how to move one on (or note why it could not fire) in the same
    hold on it: on PostgreSQL their rows stay locked until the block ends, so every write to
    them goes through the transaction that locked them."""

    def __init__(
        self, rows: list[ScheduleRecord], execute: Callable[[str, Sequence[Any]], list[Any]]
    ) -> None:
        self.rows = rows
        self._execute = execute

    def advance(
        self,
        name: str,
        seen: datetime,
        new: datetime,
        tick: datetime | None = None,
        thread_id: str | None = None,
    ) -> bool:
        """Move the schedule from ``seen`` to ``new`` (recording the tick fired and its
        thread); False when another process moved it first (compare and set)."""
        return bool(
            self._execute(
                "UPDATE longtask_schedules SET next_fire_at = ?, "
                "last_tick_at = COALESCE(?, last_tick_at), "
                "last_thread = COALESCE(?, last_thread), last_error = NULL, updated_at = ? "
                "WHERE name = ? AND next_fire_at = ? RETURNING name",
                (
                    new.timestamp(),
                    tick.timestamp() if tick else None,
                    thread_id,
                    time.time(),
                    name,
                    seen.timestamp(),
                ),
            )
        )

    def error(self, name: str, message: str | None) -> None:
        self._execute(
            "UPDATE longtask_schedules SET last_error = ?, updated_at = ? WHERE name = ?",
            (message, time.time(), name),
        )


class ScheduleTables:
    """Mixed into Store."""

    _run: Any
    dialect: Any

    # -- schedules ---------------------------------------------------------------------------

    def schedule_put(self, rec: ScheduleRecord) -> None:
        """Insert ``rec``, or replace what defines the schedule of that name (its pause, last
        tick and last thread stay)."""
        now = time.time()
        self._run(
            f"INSERT INTO longtask_schedules ({_COLS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) "
            "ON CONFLICT (name) DO UPDATE SET task_ref = excluded.task_ref, "
            "task_name = excluded.task_name, cron = excluded.cron, "
            "timezone = excluded.timezone, inputs = excluded.inputs, "
            "catch_up = excluded.catch_up, origin = excluded.origin, "
            "next_fire_at = excluded.next_fire_at, last_error = NULL, "
            "updated_at = excluded.updated_at, api = excluded.api",
            (
                rec.name,
                rec.task_ref,
                rec.task_name,
                rec.cron,
                rec.timezone,
                json.dumps(rec.inputs, sort_keys=True),
                rec.catch_up,
                rec.origin,
                1 if rec.paused else 0,
                rec.next_fire_at.timestamp(),
                None,
                None,
                None,
                now,
                now,
                rec.owner,
                json.dumps(rec.api, sort_keys=True) if rec.api is not None else None,
            ),
        )

    def schedule_get(self, name: str) -> ScheduleRecord | None:
        rows = self._run(f"SELECT {_COLS} FROM longtask_schedules WHERE name = ?", (name,))
        return _record(rows[0]) if rows else None

    def schedules(self) -> list[ScheduleRecord]:
        rows = self._run(f"SELECT {_COLS} FROM longtask_schedules ORDER BY next_fire_at, name")
        return [_record(r) for r in rows]

    def schedule_delete(self, name: str) -> bool:
        return bool(
            self._run("DELETE FROM longtask_schedules WHERE name = ? RETURNING name", (name,))
        )

    def schedule_pause(self, name: str, paused: bool, next_fire_at: datetime | None) -> bool:
        """Pause or resume; ``next_fire_at`` (on resume) is the first tick after now, so the
        ticks of the pause are not caught up."""
        rows = self._run(
            "UPDATE longtask_schedules SET paused = ?, "
            "next_fire_at = COALESCE(?, next_fire_at), updated_at = ? "
            "WHERE name = ? RETURNING name",
            (
                1 if paused else 0,
                next_fire_at.timestamp() if next_fire_at else None,
                time.time(),
                name,
            ),
        )
        return bool(rows)

    @contextmanager
    def schedules_due(self, now: datetime, limit: int = 100) -> Iterator[DueSchedules]:
        """The unpaused schedules whose next tick is at or before ``now``. On PostgreSQL
        they are locked until the block ends (schedules another process holds are left
        out); elsewhere moving one on is a compare and set."""
        sql = (
            f"SELECT {_COLS} FROM longtask_schedules WHERE paused = 0 AND next_fire_at <= ? "
            "ORDER BY next_fire_at, name LIMIT ?"
        )
        if self.dialect.name != "postgresql":
            rows = self._run(sql, (now.timestamp(), limit))
            yield DueSchedules([_record(r) for r in rows], self._run)
            return
        pool: Any = getattr(self, "_pool")  # noqa: B009 (PostgresStore's)
        with pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            cur.execute(
                (sql + " FOR UPDATE SKIP LOCKED").replace("?", "%s"), (now.timestamp(), limit)
            )
            found = [tuple(r.values()) if isinstance(r, dict) else tuple(r) for r in cur]

            def execute(statement: str, params: Sequence[Any]) -> list[Any]:
                cur.execute(statement.replace("?", "%s"), tuple(params))
                return cur.fetchall() if cur.description else []

            yield DueSchedules([_record(r) for r in found], execute)

    # -- fires -------------------------------------------------------------------------------

    def fire_record(self, schedule: str, tick: datetime, thread_id: str) -> None:
        self._run(
            "INSERT INTO longtask_schedule_fires (schedule, tick_at, thread_id, started, "
            "fired_at) VALUES (?,?,?,0,?) ON CONFLICT (schedule, tick_at) DO NOTHING",
            (schedule, tick.timestamp(), thread_id, time.time()),
        )

    def fire_started(self, thread_id: str) -> None:
        self._run(
            "UPDATE longtask_schedule_fires SET started = 1 WHERE thread_id = ?", (thread_id,)
        )

    def fires_unstarted(self, limit: int = 100) -> list[tuple[str, str]]:
        """(schedule, thread id) of fired threads whose start was never handed on (the
        process that fired them stopped in between), oldest first."""
        rows = self._run(
            "SELECT schedule, thread_id FROM longtask_schedule_fires WHERE started = 0 "
            "ORDER BY fired_at LIMIT ?",
            (limit,),
        )
        return [(str(r[0]), str(r[1])) for r in rows]

    def fire_of(self, thread_id: str) -> tuple[str, datetime] | None:
        """(schedule, tick) of a thread a schedule started."""
        rows = self._run(
            "SELECT schedule, tick_at FROM longtask_schedule_fires WHERE thread_id = ?",
            (thread_id,),
        )
        return (str(rows[0][0]), _ts(rows[0][1]) or datetime.now(UTC)) if rows else None
