"""Workers' tables (mixed into Store): leases with fencing epochs, the inbox of
continuations, live workers, and the takeover of a stalled worker's job."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from longtask.store._apiruns import RUN_LOCK_SQL

#: procrastinate's unique index on the queueing lock of waiting jobs (``_v1`` and later)
_QUEUEING_LOCK_INDEX = "procrastinate_jobs_queueing_lock_idx"


@dataclass(frozen=True)
class WorkerRecord:
    name: str
    host: str
    pid: int
    started_at: datetime
    heartbeat_at: datetime
    jobs: int
    current: str | None
    stopped_at: datetime | None
    #: the task definitions this worker's code has loaded so far (it loads each task the
    #: first time a job needs it): [{"task", "version", "hash"}], hash in short form
    serves: list[dict[str, str]] = field(default_factory=list)
    #: jobs it handed back because its code lacks the thread's definition
    handed_back: int = 0
    #: seconds of silence after which its threads are taken over (None: not recorded)
    stalled_after: float | None = None

    def silent_for(self, now: float) -> float | None:
        """Seconds since its last heartbeat when it has missed two (it beats every quarter
        of ``stalled_after``): stopped, hung or gone; None while it beats, or once stopped
        cleanly."""
        if self.stopped_at is not None or self.stalled_after is None:
            return None
        quiet = now - self.heartbeat_at.timestamp()
        return quiet if quiet > self.stalled_after / 2 else None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "host": self.host,
            "pid": self.pid,
            "started_at": self.started_at.isoformat(),
            "heartbeat_at": self.heartbeat_at.isoformat(),
            "jobs": self.jobs,
            "current": self.current,
            "stopped_at": self.stopped_at.isoformat() if self.stopped_at else None,
            "serves": self.serves,
            "handed_back": self.handed_back,
            "stalled_after": self.stalled_after,
        }


def _ts(value: Any) -> datetime:
    return datetime.fromtimestamp(float(value), UTC)


class LeaseTables:
    """Mixed into Store."""

    _transaction: Any
    dialect: Any

    def _run(self, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    # -- leases ------------------------------------------------------------------------------

    def lease_take(self, thread_id: str, holder: str) -> int:
        """A new lease epoch for ``holder``: from now on only writes fenced with it count."""
        rows = self._run(
            "INSERT INTO longtask_leases (thread_id, epoch, holder, acquired_at) "
            "VALUES (?, 1, ?, ?) ON CONFLICT (thread_id) DO UPDATE SET "
            "epoch = longtask_leases.epoch + 1, holder = excluded.holder, "
            "acquired_at = excluded.acquired_at, released_at = NULL RETURNING epoch",
            (thread_id, holder, time.time()),
        )
        return int(rows[0][0])

    def lease_release(self, thread_id: str, epoch: int) -> None:
        self._run(
            "UPDATE longtask_leases SET released_at = ? WHERE thread_id = ? AND epoch = ?",
            (time.time(), thread_id, epoch),
        )

    def lease_holder(self, thread_id: str) -> tuple[str, int] | None:
        """Who holds the thread now (holder, epoch), if anyone."""
        rows = self._run(
            "SELECT holder, epoch FROM longtask_leases WHERE thread_id = ? AND released_at IS NULL",
            (thread_id,),
        )
        return (str(rows[0][0]), int(rows[0][1])) if rows and rows[0][0] else None

    # -- inbox -------------------------------------------------------------------------------

    def inbox_put(
        self, thread_id: str, command: dict[str, Any], *, seen: str | None = None
    ) -> bool:
        """Put ``command`` in the thread's inbox; with ``seen`` (``inbox_mark`` taken before
        the command was checked against the thread's state), only if neither the thread's
        state (its latest checkpoint) nor its inbox changed since. Whether it was put.

        Ordered with a state write from outside by the lock the gate's check takes in the
        write's checkpoint transaction (``queued_for``): of a command and a write at once,
        the one that commits second sees the other, so a write never voids a command that
        was put here (and answered 202)."""
        with self._transaction(serialise=False) as execute:
            if self.dialect.name == "postgresql":
                # (SQLite's BEGIN IMMEDIATE already serialises writers)
                execute(RUN_LOCK_SQL, (thread_id,))
            if seen is not None and _inbox_mark(execute, thread_id) != seen:
                return False
            execute(
                "INSERT INTO longtask_inbox (thread_id, command, created_at) VALUES (?,?,?)",
                (thread_id, json.dumps(command, default=str), time.time()),
            )
        return True

    def inbox_mark(self, thread_id: str) -> str:
        """What ``inbox_put(seen=...)`` compares: the thread's latest checkpoint and the
        newest command in its inbox (a command taken by a worker is followed by the
        checkpoints its run writes, so the mark never comes back to an old value)."""
        return _inbox_mark(self._run, thread_id)

    def inbox_peek(self, thread_id: str) -> list[tuple[int, dict[str, Any]]]:
        rows = self._run(
            "SELECT id, command FROM longtask_inbox WHERE thread_id = ? ORDER BY id",
            (thread_id,),
        )
        return [(int(r[0]), json.loads(r[1])) for r in rows]

    def inbox_done(self, entry_id: int) -> None:
        self._run("DELETE FROM longtask_inbox WHERE id = ?", (entry_id,))

    # -- workers -----------------------------------------------------------------------------

    def worker_beat(
        self,
        name: str,
        host: str,
        pid: int,
        started_at: float,
        jobs: int,
        current: str | None,
        stalled_after: float | None = None,
        serves: list[dict[str, str]] | None = None,
        handed_back: int = 0,
    ) -> None:
        now = time.time()
        self._run(
            "INSERT INTO longtask_workers (name, host, pid, started_at, heartbeat_at, jobs, "
            "current, stalled_after, serves, handed_back) VALUES (?,?,?,?,?,?,?,?,?,?) "
            "ON CONFLICT (name) DO UPDATE SET "
            "heartbeat_at = excluded.heartbeat_at, jobs = excluded.jobs, "
            "current = excluded.current, stalled_after = excluded.stalled_after, "
            "serves = excluded.serves, handed_back = excluded.handed_back, stopped_at = NULL",
            (
                name,
                host,
                pid,
                started_at,
                now,
                jobs,
                current,
                stalled_after,
                json.dumps(serves or []),
                handed_back,
            ),
        )

    def stalled_threshold(self, own: float) -> float:
        """The seconds of silence after which a worker counts as dead: the largest
        threshold among the workers that may still be alive (each judged by its own), at
        least ``own``. A worker that beats slowly is never judged by a stricter neighbour."""
        rows = self._run(
            "SELECT MAX(stalled_after) FROM longtask_workers WHERE stopped_at IS NULL "
            "AND stalled_after IS NOT NULL AND heartbeat_at >= ? - 2 * stalled_after",
            (time.time(),),
        )
        found = rows[0][0] if rows else None
        return max(own, float(found)) if found is not None else own

    def job_take_over(self, job_id: int, worker_id: int | None) -> str | None:
        """Put job ``job_id`` of the workers' queue (PostgreSQL), left running by the stalled
        worker ``worker_id``, back to wait for another worker, in one transaction.

        While the job ran, a wake-up of its thread may have been queued with the same
        queueing lock (the lock only binds waiting jobs), so putting the job back to wait
        as it is would break procrastinate's unique index on that lock, on every try, while
        the job keeps the thread's lock and the queued wake-up can never run. When that
        happens the job's queueing lock is released (inside a savepoint, so a wake-up queued
        at that very moment is covered too): both wait, and run one after the other.

        Returns None when the job is no longer that worker's (taken over by another worker
        already, or ended), else what was done."""
        import psycopg.errors

        with self._transaction(serialise=False) as execute:
            # The worker id too: a job another worker took over and a third one fetched is
            # that one's, running, not stalled.
            found = execute(
                "SELECT id FROM procrastinate_jobs WHERE id = ? AND status = 'doing' "
                "AND worker_id IS NOT DISTINCT FROM ?::bigint FOR UPDATE",
                (job_id, worker_id),
            )
            if not found:
                return None
            retry = "SELECT procrastinate_retry_job_v2(?, now(), NULL, NULL, NULL)"
            execute("SAVEPOINT longtask_takeover", ())
            try:
                execute(retry, (job_id,))
                return "retried"
            except psycopg.errors.UniqueViolation as exc:
                if not (exc.diag.constraint_name or "").startswith(_QUEUEING_LOCK_INDEX):
                    raise
                execute("ROLLBACK TO SAVEPOINT longtask_takeover", ())
            execute("UPDATE procrastinate_jobs SET queueing_lock = NULL WHERE id = ?", (job_id,))
            execute(retry, (job_id,))
            return "retried, its queueing lock released (a wake-up of its thread waits too)"

    def worker_stopped(self, name: str) -> None:
        self._run(
            "UPDATE longtask_workers SET stopped_at = ?, current = NULL WHERE name = ?",
            (time.time(), name),
        )

    def workers(self, since: float) -> list[WorkerRecord]:
        """Workers whose last heartbeat is newer than ``since`` (epoch seconds)."""
        rows = self._run(
            f"SELECT {_WORKER_COLS} FROM longtask_workers WHERE heartbeat_at >= ? "
            "ORDER BY started_at",
            (since,),
        )
        return [_worker(r) for r in rows]

    def worker(self, name: str) -> WorkerRecord | None:
        """The worker named ``name``, if it ever beat."""
        rows = self._run(f"SELECT {_WORKER_COLS} FROM longtask_workers WHERE name = ?", (name,))
        return _worker(rows[0]) if rows else None


_WORKER_COLS = (
    "name, host, pid, started_at, heartbeat_at, jobs, current, stopped_at, serves, "
    "handed_back, stalled_after"
)


def _worker(r: tuple[Any, ...]) -> WorkerRecord:
    return WorkerRecord(
        r[0],
        r[1],
        int(r[2]),
        _ts(r[3]),
        _ts(r[4]),
        int(r[5]),
        r[6],
        _ts(r[7]) if r[7] is not None else None,
        json.loads(r[8]) if r[8] else [],
        int(r[9] or 0),
        float(r[10]) if r[10] is not None else None,
    )


def _inbox_mark(execute: Any, thread_id: str) -> str:
    rows = execute(
        # named columns: PostgreSQL rows come as dicts, where two unnamed would be one
        "SELECT (SELECT MAX(seq) FROM longtask_cp_checkpoints WHERE thread_id = ?) AS head, "
        "(SELECT MAX(id) FROM longtask_inbox WHERE thread_id = ?) AS newest",
        (thread_id, thread_id),
    )
    head, newest = rows[0]
    return f"{head}/{newest}"
