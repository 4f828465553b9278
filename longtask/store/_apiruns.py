"""The LangGraph Server API's own rows: its runs, and threads it created before any run.

A run is a command a request recorded (start with inputs, resume with a command, cancel)
and that ``serve``'s executor carries out; its status is what ``runs.get/list/join`` read.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

#: statuses of a run that is not finished: recovered and carried out when ``serve`` starts
OPEN_RUN_STATUSES = ("pending", "running")

#: PostgreSQL: what orders the transactions that record a thread's runs and those that
#: write its state from outside (``queued_for``): one per thread at a time, to its commit
#: (SQLite's BEGIN IMMEDIATE already serialises writers)
RUN_LOCK_SQL = "SELECT pg_advisory_xact_lock(7428062, hashtext(?))"


def queued_for(execute: Any, thread_id: str, *, postgres: bool) -> bool:
    """Whether a run of ``thread_id`` is open or a command waits in its inbox, read in the
    caller's transaction after taking the lock that ``api_run_create`` takes: a state write
    that checks it in its checkpoint's transaction and a run recorded at the same moment
    are ordered, and the one that commits second sees the other."""
    if postgres:
        execute(RUN_LOCK_SQL, (thread_id,))
    rows = execute(
        "SELECT (SELECT COUNT(*) FROM longtask_api_runs WHERE thread_id = ? AND status IN "
        "(?, ?)) + (SELECT COUNT(*) FROM longtask_inbox WHERE thread_id = ?)",
        (thread_id, *OPEN_RUN_STATUSES, thread_id),
    )
    return bool(rows and rows[0][0])


_RUN_COLS = (
    "run_id, thread_id, assistant_id, status, request, actor, metadata, error, "
    "created_at, updated_at, started_at, webhook"
)
#: what a run's webhook delivery reads: the run, then its delivery's columns
_WEBHOOK_COLS = f"{_RUN_COLS}, webhook_values, webhook_attempts"


@dataclass(frozen=True)
class ApiRun:
    run_id: str
    thread_id: str
    assistant_id: str
    status: str
    request: dict[str, Any]
    actor: str | None
    metadata: dict[str, Any]
    error: str | None
    created_at: float
    updated_at: float
    #: when the executor took it (None while pending)
    started_at: float | None = None
    #: the URL to POST the run to when it ends (``webhook`` of the request), or None
    webhook: str | None = None


@dataclass(frozen=True)
class WebhookDue:
    """A run whose webhook is owed, as claimed for one attempt."""

    run: ApiRun
    #: the thread's values when the run ended (None: read them now)
    values: dict[str, Any] | None
    #: attempts made before this one
    attempts: int


def _place(run: ApiRun) -> tuple[int, float, str]:
    """Where a run stands among its thread's runs: its recorded position (runs recorded
    before positions were kept come first, by time)."""
    return (int(run.request.get("position", -1)), run.created_at, run.run_id)


def _run(r: tuple[Any, ...]) -> ApiRun:
    return ApiRun(
        run_id=r[0],
        thread_id=r[1],
        assistant_id=r[2],
        status=r[3],
        request=json.loads(r[4]),
        actor=r[5],
        metadata=json.loads(r[6]) if r[6] else {},
        error=r[7],
        created_at=float(r[8]),
        updated_at=float(r[9]),
        started_at=float(r[10]) if r[10] is not None else None,
        webhook=r[11],
    )


class ApiTables:
    """Runs and run-less threads of the LangGraph Server API, mixed into Store."""

    _run: Any
    _transaction: Any
    dialect: Any

    def api_run_create(
        self,
        run_id: str,
        thread_id: str,
        assistant_id: str,
        request: dict[str, Any],
        actor: str | None,
        metadata: dict[str, Any] | None,
        *,
        seen: str | None = None,
        webhook: str | None = None,
        queued: bool = False,
        once: bool = False,
    ) -> bool:
        """Record a pending run; with ``seen`` (``api_run_mark`` taken before the request
        was checked), only if no run of the thread is open and none was recorded since,
        in one step: of two requests checked at once, one is recorded. Whether it was.

        ``queued``: recorded behind the thread's open runs, whatever they are (the
        ``enqueue`` strategy). Either way the run's place among the thread's runs is kept
        in its request (``position``), counted in the transaction that inserts it: the
        executor takes a thread's runs in that order, not in the order of a clock.

        ``once``: not if a run of that id exists (a cron's tick, fired by two processes,
        records its run once: the id is derived from the cron and the tick)."""
        now = time.time()
        request = dict(request)
        row = (
            run_id,
            thread_id,
            assistant_id,
            "pending",
            json.dumps(request),
            actor,
            json.dumps(metadata or {}),
            None,
            now,
            now,
            None,
            webhook,
        )
        insert = f"INSERT INTO longtask_api_runs ({_RUN_COLS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)"
        with self._transaction(serialise=False) as execute:
            if self.dialect.name == "postgresql":
                # Two transactions cannot see each other's insert: one per thread at a time
                # (SQLite's BEGIN IMMEDIATE already serialises writers).
                execute(RUN_LOCK_SQL, (thread_id,))
            if seen is not None and not queued and self._mark(execute, thread_id) != seen:
                return False
            if once and execute("SELECT 1 FROM longtask_api_runs WHERE run_id = ?", (run_id,)):
                return False
            (count,) = execute(
                "SELECT COUNT(*) FROM longtask_api_runs WHERE thread_id = ?", (thread_id,)
            )[0]
            request["position"] = int(count)
            execute(insert, (*row[:4], json.dumps(request), *row[5:]))
        return True

    def api_run_ahead(self, run: ApiRun) -> bool:
        """Whether an open run of ``run``'s thread was recorded before it (and so is
        carried out first)."""
        return any(
            _place(other) < _place(run)
            for other in self.api_runs_open_of(run.thread_id)
            if other.run_id != run.run_id
        )

    def api_runs_open_of(self, thread_id: str) -> list[ApiRun]:
        """The thread's runs not finished, in the order they are carried out."""
        rows = self._run(
            f"SELECT {_RUN_COLS} FROM longtask_api_runs WHERE thread_id = ? AND status IN (?, ?)",
            (thread_id, *OPEN_RUN_STATUSES),
        )
        return sorted((_run(r) for r in rows), key=_place)

    def api_run_planned(self, run_id: str, request: dict[str, Any]) -> None:
        """Replace a queued run's request by what it was planned into when its turn came
        (the checks against the thread's state are made then, not when it was queued)."""
        self._run(
            "UPDATE longtask_api_runs SET request = ?, updated_at = ? WHERE run_id = ?",
            (json.dumps(request), time.time(), run_id),
        )

    def api_run_mark(self, thread_id: str) -> str | None:
        """What ``api_run_create(seen=...)`` compares: the number of the thread's runs and
        its latest checkpoint, or None when a run is open (pending or running). A request
        checked against the thread's state is recorded only if neither changed since: a
        state update that committed meanwhile (its checkpoint) voids the check."""
        return self._mark(self._run, thread_id)

    @staticmethod
    def _mark(execute: Any, thread_id: str) -> str | None:
        rows = execute(
            "SELECT COUNT(*), SUM(CASE WHEN status IN (?, ?) THEN 1 ELSE 0 END), "
            "(SELECT MAX(seq) FROM longtask_cp_checkpoints WHERE thread_id = ?) "
            "FROM longtask_api_runs WHERE thread_id = ?",
            (*OPEN_RUN_STATUSES, thread_id, thread_id),
        )
        total, still_open, head = rows[0]
        return None if still_open else f"{int(total)}/{head}"

    def api_run_changed(self, thread_id: str, seen: str) -> bool:
        """Whether what ``seen`` marked changed only by the thread's state (a checkpoint),
        not by a run recorded since: the request was checked against a state that is gone."""
        now = self.api_run_mark(thread_id)
        return now is not None and now.split("/")[0] == seen.split("/")[0]

    def api_run(self, run_id: str) -> ApiRun | None:
        rows = self._run(f"SELECT {_RUN_COLS} FROM longtask_api_runs WHERE run_id = ?", (run_id,))
        return _run(rows[0]) if rows else None

    def api_runs(
        self, thread_id: str, *, limit: int = 10, offset: int = 0, status: str | None = None
    ) -> list[ApiRun]:
        where, params = ("AND status = ?", [status]) if status else ("", [])
        rows = self._run(
            f"SELECT {_RUN_COLS} FROM longtask_api_runs WHERE thread_id = ? {where} "
            "ORDER BY created_at DESC, run_id DESC LIMIT ? OFFSET ?",
            (thread_id, *params, limit, offset),
        )
        return [_run(r) for r in rows]

    def api_run_delete(self, run_id: str, thread_id: str) -> str:
        """Delete a finished run's record: ``deleted``; ``open`` if it is pending or
        running (kept), ``missing`` if the thread has no such run. A finished run whose
        webhook is still owed is kept too (``webhook``): its delivery reads the row."""
        rows = self._run(
            "DELETE FROM longtask_api_runs WHERE run_id = ? AND thread_id = ? "
            "AND status NOT IN (?, ?) AND (webhook IS NULL OR webhook_state IS NOT NULL) "
            "RETURNING run_id",
            (run_id, thread_id, *OPEN_RUN_STATUSES),
        )
        if rows:
            return "deleted"
        rows = self._run(
            "SELECT status FROM longtask_api_runs WHERE run_id = ? AND thread_id = ?",
            (run_id, thread_id),
        )
        if not rows:
            return "missing"
        return "open" if rows[0][0] in OPEN_RUN_STATUSES else "webhook"

    def api_runs_open(self) -> list[ApiRun]:
        """Runs not finished, oldest first (to carry out after a restart)."""
        rows = self._run(
            f"SELECT {_RUN_COLS} FROM longtask_api_runs WHERE status IN (?, ?) "
            "ORDER BY created_at, run_id",
            OPEN_RUN_STATUSES,
        )
        return [_run(r) for r in rows]

    def api_run_claim(self, run_id: str, seen: str) -> bool:
        """Mark the run running if its status is still ``seen`` (a cancel of a pending run
        may have come in between); whether it was."""
        rows = self._run(
            "UPDATE longtask_api_runs SET status = 'running', updated_at = ?, "
            "started_at = COALESCE(started_at, ?) WHERE run_id = ? AND status = ? "
            "RETURNING run_id",
            (time.time(), time.time(), run_id, seen),
        )
        return bool(rows)

    def api_run_set(
        self,
        run_id: str,
        status: str,
        error: str | None = None,
        *,
        values: dict[str, Any] | None = None,
    ) -> None:
        """Record a run's status; ``values``, the thread's at the run's end, are kept for
        its webhook (in the same statement: a delivery never sees the end without them)."""
        kept = json.dumps(values) if values is not None else None
        self._run(
            "UPDATE longtask_api_runs SET status = ?, error = ?, updated_at = ?, "
            "webhook_values = COALESCE(?, webhook_values) WHERE run_id = ?",
            (status, error, time.time(), kept, run_id),
        )

    # -- webhook deliveries ------------------------------------------------------------------

    def api_webhooks_due(self, now: float, limit: int = 20) -> list[str]:
        """Ended runs whose webhook is owed and due (never tried, or its retry's time, or a
        claim that lapsed with the process that made it), oldest end first."""
        rows = self._run(
            "SELECT run_id FROM longtask_api_runs WHERE webhook IS NOT NULL "
            "AND webhook_state IS NULL AND status NOT IN (?, ?) "
            "AND COALESCE(webhook_due, 0) <= ? ORDER BY updated_at, run_id LIMIT ?",
            (*OPEN_RUN_STATUSES, now, limit),
        )
        return [r[0] for r in rows]

    def api_webhook_claim(self, run_id: str, now: float, until: float) -> WebhookDue | None:
        """Take one attempt at a due delivery, until ``until`` (another process or thread
        finds it due again only after that, if this one died mid-attempt); None if it was
        taken or settled meanwhile."""
        rows = self._run(
            "UPDATE longtask_api_runs SET webhook_due = ? WHERE run_id = ? "
            "AND webhook IS NOT NULL AND webhook_state IS NULL AND status NOT IN (?, ?) "
            f"AND COALESCE(webhook_due, 0) <= ? RETURNING {_WEBHOOK_COLS}",
            (until, run_id, *OPEN_RUN_STATUSES, now),
        )
        if not rows:
            return None
        r = rows[0]
        n = len(_RUN_COLS.split(","))
        values = json.loads(r[n]) if r[n] is not None else None
        return WebhookDue(_run(r[:n]), values, int(r[n + 1]))

    def api_webhook_settle(
        self, run_id: str, attempts: int, *, sent: bool, retry_at: float | None
    ) -> None:
        """Record an attempt: delivered (``sent``), to be tried again at ``retry_at``, or
        given up (neither). A settled delivery drops the values it kept."""
        state = "sent" if sent else ("failed" if retry_at is None else None)
        drop = ", webhook_values = NULL" if state is not None else ""
        self._run(
            "UPDATE longtask_api_runs SET webhook_attempts = ?, webhook_due = ?, "
            f"webhook_state = ?{drop} WHERE run_id = ?",
            (attempts, retry_at, state, run_id),
        )

    def api_webhook_state(self, run_id: str) -> tuple[str | None, int]:
        """A run's delivery: its outcome ('sent', 'failed', None while owed) and attempts."""
        rows = self._run(
            "SELECT webhook_state, webhook_attempts FROM longtask_api_runs WHERE run_id = ?",
            (run_id,),
        )
        return (rows[0][0], int(rows[0][1])) if rows else (None, 0)

    def api_thread_put(
        self, thread_id: str, metadata: dict[str, Any], owner: str | None = None
    ) -> bool:
        """Record a thread created through the API (by ``owner``); False if the id is
        taken."""
        rows = self._run(
            "INSERT INTO longtask_api_threads (thread_id, metadata, created_at, owner) "
            "VALUES (?,?,?,?) ON CONFLICT (thread_id) DO NOTHING RETURNING thread_id",
            (thread_id, json.dumps(metadata), time.time(), owner),
        )
        return bool(rows)

    def api_thread_owner(self, thread_id: str) -> str | None:
        """Who created the thread through the API (None: nobody recorded, or no API row)."""
        rows = self._run("SELECT owner FROM longtask_api_threads WHERE thread_id = ?", (thread_id,))
        return str(rows[0][0]) if rows and rows[0][0] is not None else None

    def thread_owner(self, thread_id: str) -> tuple[bool, str | None]:
        """Whether the thread exists (a longtask thread, or one the API created that has
        not run yet) and who owns it: one read for every request's access check."""
        rows = self._run("SELECT owner FROM longtask_threads WHERE thread_id = ?", (thread_id,))
        if rows:
            return True, rows[0][0]
        rows = self._run("SELECT owner FROM longtask_api_threads WHERE thread_id = ?", (thread_id,))
        return (True, rows[0][0]) if rows else (False, None)

    def api_thread_merge(self, thread_id: str, metadata: dict[str, Any]) -> None:
        """Merge ``metadata`` into the thread's (a row is made for a thread started
        elsewhere: the CLI or Python)."""
        found = self.api_thread(thread_id)
        merged = {**(found[0] if found else {}), **metadata}
        self._run(
            "INSERT INTO longtask_api_threads (thread_id, metadata, created_at) VALUES (?,?,?) "
            "ON CONFLICT (thread_id) DO UPDATE SET metadata = excluded.metadata",
            (thread_id, json.dumps(merged), time.time()),
        )

    def api_thread(self, thread_id: str) -> tuple[dict[str, Any], float] | None:
        """The metadata and creation time of a thread created through the API."""
        rows = self._run(
            "SELECT metadata, created_at FROM longtask_api_threads WHERE thread_id = ?",
            (thread_id,),
        )
        return (json.loads(rows[0][0] or "{}"), float(rows[0][1])) if rows else None

    def api_threads(self, limit: int = 1000) -> list[tuple[str, dict[str, Any], float]]:
        rows = self._run(
            "SELECT thread_id, metadata, created_at FROM longtask_api_threads "
            "ORDER BY created_at DESC LIMIT ?",
            (limit,),
        )
        return [(r[0], json.loads(r[1] or "{}"), float(r[2])) for r in rows]

    def api_thread_delete(self, thread_id: str) -> None:
        self._run("DELETE FROM longtask_api_threads WHERE thread_id = ?", (thread_id,))
        self._run("DELETE FROM longtask_api_runs WHERE thread_id = ?", (thread_id,))

    def api_last_event(self, thread_id: str) -> int:
        """The id of the thread's latest event (0 if none): a run streams what comes after."""
        rows = self._run("SELECT MAX(id) FROM longtask_events WHERE thread_id = ?", (thread_id,))
        return int(rows[0][0]) if rows and rows[0][0] is not None else 0
