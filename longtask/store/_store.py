"""longtask's own tables: threads, the append-only event log and content-addressed blobs.

One implementation over two drivers: SQL is written with ``?`` placeholders and rewritten
for psycopg. Every statement runs in autocommit; the few multi-statement operations
(migrations) take an explicit transaction.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from longtask.errors import SchemaVersionError, ThreadExists
from longtask.store._apiruns import ApiTables
from longtask.store._artifacts import ArtifactTables
from longtask.store._assistants import AssistantTables
from longtask.store._effects import EffectTables
from longtask.store._events import NewEvent
from longtask.store._fence import Fence
from longtask.store._leases import LeaseTables
from longtask.store._limits import LimitTables
from longtask.store._maps import MapTables
from longtask.store._metrics import MetricsTables
from longtask.store._notify import NotifyTables
from longtask.store._parts import PartTables
from longtask.store._pooled import on_pooled
from longtask.store._schedules import ScheduleTables
from longtask.store._schema import POSTGRES, SCHEMA_VERSION, SQLITE, Dialect, statements
from longtask.store._subtasks import SubtaskTables
from longtask.store._usage import THREAD_ORDER, UsageTables
from longtask.store._visible import VisibleTables, thread_seen

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

THREAD_STATUSES = (
    "pending",
    "running",
    "waiting_user",
    "waiting_external",
    "failed",
    "completed",
    "cancelling",
    "cancelled",
)
#: the statuses a thread ends in: nothing advances it by itself any more (the event stream
#: ends, the web page stops listening and shows the artifacts); one list for server and page
FINAL_STATUSES = ("completed", "failed", "cancelled")


def is_live(rec: ThreadRecord) -> bool:
    """Whether code must still serve ``rec``: a thread that is not completed, cancelled, or
    failed and compensated (nothing goes on from those)."""
    if rec.status in ("completed", "cancelled"):
        return False
    return not (rec.status == "failed" and (rec.error or {}).get("compensated"))


def _ts(value: float | None) -> datetime | None:
    return datetime.fromtimestamp(value, UTC) if value is not None else None


@dataclass
class ThreadRecord:
    thread_id: str
    task_ref: str | None
    task_name: str
    task_version: str
    definition_hash: str
    definition: dict[str, Any]
    status: str
    #: the encoded task inputs, kept so a run that died before its first checkpoint
    #: can start again
    inputs: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    runs: int = 0
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    updated_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    #: what a paused thread waits for: [{"step", "kind", ...}]
    waiting: list[dict[str, Any]] | None = None
    #: "worker" for a thread served by workers (``Runner.submit``), else None
    mode: str | None = None
    #: who started the thread (None: stored before owners were recorded)
    owner: str | None = None
    #: the run context it was started with (LangGraph's runtime context for its graph
    #: steps), JSON; None: none given
    context: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "thread_id": self.thread_id,
            "task_ref": self.task_ref,
            "task_name": self.task_name,
            "task_version": self.task_version,
            "definition_hash": self.definition_hash,
            "status": self.status,
            "error": self.error,
            "runs": self.runs,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
            "waiting": self.waiting,
            "owner": self.owner,
        }


#: a checkpoint id no thread has: a subgraph addressed at it starts from an empty state
#: (a graph step's fork before its graph's first run, ``steps._graph``), and the saver stores
#: the checkpoint made on it as a first one, with no parent
NO_CHECKPOINT = "00000000-0000-0000-0000-000000000000"
#: the metadata key of a root checkpoint that names the subgraph checkpoint a graph step's
#: graph stands on from there (a new input at one of its past checkpoints, ``Turns``)
STANDS_ON = "lt_graph_at"


@dataclass(frozen=True)
class CheckpointMark:
    """A checkpoint's place, without its state (``Store.checkpoint_marks``)."""

    checkpoint_id: str
    parent_id: str | None
    #: what made it (LangGraph's ``source``: input, loop, update, fork)
    source: str
    #: for a subgraph's: the root checkpoint it was made under
    made_under: str | None
    #: for a root one: the subgraph checkpoint its graph step's graph stands on (``STANDS_ON``)
    stands_on: str | None = None


@dataclass(frozen=True)
class Event:
    id: int
    thread_id: str
    kind: str
    stage: str | None
    step: str | None
    attempt: int | None
    data: dict[str, Any]
    ts: datetime

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "thread_id": self.thread_id,
            "kind": self.kind,
            "stage": self.stage,
            "step": self.step,
            "attempt": self.attempt,
            "data": self.data,
            "ts": self.ts.isoformat(),
        }


def definition_statement(
    thread_id: str, definition_hash: str, definition: dict[str, Any], task_ref: str | None
) -> tuple[str, tuple[Any, ...]]:
    """``update_definition`` as a statement, to run in another write's transaction."""
    # The version moves with the hash: `status`, `ls` and the page show what the thread
    # runs on now, not what it started on.
    return (
        "UPDATE longtask_threads SET definition_hash = ?, definition = ?, updated_at = ?, "
        "task_version = COALESCE(?, task_version), task_ref = COALESCE(?, task_ref) "
        "WHERE thread_id = ?",
        (
            definition_hash,
            json.dumps(definition),
            time.time(),
            definition.get("version"),
            task_ref,
            thread_id,
        ),
    )


#: the LISTEN/NOTIFY channel of new events; the payload is the thread id
EVENTS_CHANNEL = "longtask_events"

_EVENT_INSERT = (
    "INSERT INTO longtask_events (thread_id, kind, stage, step, attempt, data, ts, dedupe_key) "
    "VALUES "
)
_EVENT_ROW = "(?,?,?,?,?,?,?,?)"
_EVENT_ONE = f"{_EVENT_INSERT}{_EVENT_ROW} ON CONFLICT (dedupe_key) DO NOTHING"

_THREAD_COLS = (
    "thread_id, task_ref, task_name, task_version, definition_hash, definition, inputs, "
    "status, error, runs, created_at, updated_at, waiting, mode, owner, context"
)
#: a record without its definition (read once per definition hash, see Store._threads)
_THREAD_READ = _THREAD_COLS.replace(" definition,", " NULL,")
_THREAD_READ_T = ", ".join(
    c if c == "NULL" else f"t.{c}" for c in (c.strip() for c in _THREAD_READ.split(","))
)


class Store(
    MapTables,
    SubtaskTables,
    EffectTables,
    LimitTables,
    ArtifactTables,
    LeaseTables,
    ApiTables,
    AssistantTables,
    NotifyTables,
    ScheduleTables,
    UsageTables,
    MetricsTables,
    VisibleTables,
    PartTables,
    ABC,
):
    dialect: Dialect
    #: parsed definition summaries by definition hash (see _threads)
    _definitions: dict[str, dict[str, Any]]

    # -- driver ------------------------------------------------------------------------------

    @abstractmethod
    def _run(
        self, sql: str, params: Sequence[Any] = (), binary: bool = False
    ) -> list[tuple[Any, ...]]:
        """Execute one statement in autocommit and return its rows (if any); ``binary``:
        results in the driver's binary format where it has one (PostgreSQL: numbers are
        decoded in C, half the time of text for thousands of rows)."""

    @abstractmethod
    def _transaction(self, serialise: bool = True) -> AbstractContextManager[Any]:
        """A context manager yielding an ``execute(sql, params)`` callable in one transaction,
        serialised against other processes running migrations (unless ``serialise`` is
        False: retention's short transactions)."""

    @abstractmethod
    def _table_exists(self, name: str) -> bool: ...

    def close(self) -> None:  # optional hook
        pass

    # -- schema ------------------------------------------------------------------------------

    def schema_version(self) -> int:
        if not self._table_exists("longtask_schema"):
            return 0
        rows = self._run("SELECT version FROM longtask_schema")
        return int(rows[0][0]) if rows else 0

    def upgrade(self) -> list[int]:
        """Apply every missing migration; returns the versions applied."""
        applied: list[int] = []
        with self._transaction() as execute:
            execute("CREATE TABLE IF NOT EXISTS longtask_schema (version INTEGER NOT NULL)", ())
            rows = execute("SELECT version FROM longtask_schema", ())
            current = int(rows[0][0]) if rows else 0
            if not rows:
                execute("INSERT INTO longtask_schema (version) VALUES (0)", ())
            if current > SCHEMA_VERSION:
                raise SchemaVersionError(_too_new(current))
            for version in range(current + 1, SCHEMA_VERSION + 1):
                for sql in statements(self.dialect, version):
                    if isinstance(sql, str):
                        execute(sql, ())
                    else:
                        sql(execute, self.dialect)
                applied.append(version)
            if applied:
                execute("UPDATE longtask_schema SET version = ?", (SCHEMA_VERSION,))
        return applied

    def check_schema(self, url: str) -> None:
        current = self.schema_version()
        if current == SCHEMA_VERSION:
            return
        if current > SCHEMA_VERSION:
            raise SchemaVersionError(_too_new(current))
        raise SchemaVersionError(
            f"the longtask tables in {url} are at schema version {current}, this longtask "
            f"needs version {SCHEMA_VERSION}. Run `longtask db upgrade --db {url}` to migrate."
        )

    # -- threads -----------------------------------------------------------------------------

    def create_thread(self, rec: ThreadRecord) -> None:
        rows = self._run(
            f"INSERT INTO longtask_threads ({_THREAD_COLS}) VALUES ({', '.join('?' * 16)}) "
            "ON CONFLICT (thread_id) DO NOTHING RETURNING thread_id",
            (
                rec.thread_id,
                rec.task_ref,
                rec.task_name,
                rec.task_version,
                rec.definition_hash,
                json.dumps(rec.definition),
                json.dumps(rec.inputs) if rec.inputs is not None else None,
                rec.status,
                json.dumps(rec.error) if rec.error else None,
                rec.runs,
                rec.created_at.timestamp(),
                rec.updated_at.timestamp(),
                json.dumps(rec.waiting) if rec.waiting else None,
                rec.mode,
                rec.owner,
                json.dumps(rec.context) if rec.context is not None else None,
            ),
        )
        if not rows:
            existing = self._run(
                "SELECT status FROM longtask_threads WHERE thread_id = ?", (rec.thread_id,)
            )
            raise ThreadExists(rec.thread_id, str(existing[0][0]) if existing else None)

    def get_thread(self, thread_id: str) -> ThreadRecord | None:
        rows = self._run(
            f"SELECT {_THREAD_READ} FROM longtask_threads WHERE thread_id = ?", (thread_id,)
        )
        return self._threads(rows)[0] if rows else None

    def list_threads(
        self,
        limit: int = 100,
        status: str | None = None,
        sort: str = "updated",
        task: str | None = None,
        top: bool = False,
        visible_to: str | None = None,
        visible_meta: Mapping[str, str] | None = None,
    ) -> list[ThreadRecord]:
        """At most ``limit`` threads (with ``status``, of the task named ``task``; with
        ``top`` only those no sub-task step started; with ``visible_to`` only those that
        person owns or whose pending approval names them; with ``visible_meta`` those
        whose API metadata has it, or whose approval names ``visible_to``), ordered by
        ``sort`` (THREAD_SORTS)."""
        if sort not in THREAD_ORDER:
            raise ValueError(f"sort must be one of {', '.join(THREAD_ORDER)}")
        conditions = [c for c, v in (("t.status = ?", status), ("t.task_name = ?", task)) if v]
        if top:
            conditions.append(
                "NOT EXISTS (SELECT 1 FROM longtask_subtasks s "
                "WHERE s.child_thread_id = t.thread_id)"
            )
        params: list[Any] = [v for v in (status, task) if v]
        if visible_to is not None or visible_meta is not None:
            sql, given = thread_seen(self.dialect, visible_to, visible_meta)
            conditions.append(sql)
            params.extend(given)
        where = f"WHERE {' AND '.join(conditions)} " if conditions else ""
        # the budget row (what the thread charged) only when the order needs it
        join = (
            "LEFT JOIN longtask_budgets b ON b.thread_id = t.thread_id " if sort == "cost" else ""
        )
        rows = self._run(
            f"SELECT {_THREAD_READ_T} FROM longtask_threads t {join}{where}"
            f"ORDER BY {THREAD_ORDER[sort]} LIMIT ?",
            (*params, limit),
        )
        return self._threads(rows)

    def live_threads(self, task: str) -> list[ThreadRecord]:
        """Every thread of the task named ``task`` that a deploy must still serve: running,
        paused, or failed and resumable (not completed, cancelled, or failed and
        compensated), oldest first."""
        rows = self._run(
            f"SELECT {_THREAD_READ} FROM longtask_threads "
            "WHERE task_name = ? AND status NOT IN ('completed', 'cancelled') "
            "ORDER BY created_at, thread_id",
            (task,),
        )
        return [r for r in self._threads(rows) if is_live(r)]

    def _threads(self, rows: list[tuple[Any, ...]]) -> list[ThreadRecord]:
        """Records from rows read without their definition: a definition summary is the
        same for every thread of one definition hash and grows with the task (a long task
        read it, and parsed it, on every lookup), so it is read and parsed once per hash."""
        cache = self._definitions
        for r in rows:
            if r[4] not in cache:
                found = self._run(
                    "SELECT definition FROM longtask_threads WHERE thread_id = ?", (r[0],)
                )
                if len(cache) >= 64:
                    cache.clear()
                cache[r[4]] = json.loads(found[0][0]) if found else {"stages": []}
        return [_thread(r, cache[r[4]]) for r in rows]

    def set_status(
        self,
        thread_id: str,
        status: str,
        *,
        error: dict[str, Any] | None = None,
        waiting: list[dict[str, Any]] | None = None,
        new_run: bool = False,
    ) -> int:
        """Set the status summary (with the error, or what a paused thread waits for); with
        ``new_run`` count one more run. Returns the thread's run number."""
        rows = self._run(
            "UPDATE longtask_threads SET status = ?, error = ?, waiting = ?, updated_at = ?, "
            "runs = runs + ? WHERE thread_id = ? RETURNING runs",
            (
                status,
                json.dumps(error) if error else None,
                json.dumps(waiting, default=str) if waiting else None,
                time.time(),
                1 if new_run else 0,
                thread_id,
            ),
        )
        return int(rows[0][0]) if rows else 0

    # -- timers ------------------------------------------------------------------------------

    def timer_set(self, thread_id: str, step: str, due_at: float) -> None:
        self._run(
            "INSERT INTO longtask_timers (thread_id, step, due_at) VALUES (?,?,?) "
            "ON CONFLICT (thread_id, step) DO UPDATE SET due_at = excluded.due_at",
            (thread_id, step, due_at),
        )

    def timer_clear(self, thread_id: str, step: str) -> None:
        self._run("DELETE FROM longtask_timers WHERE thread_id = ? AND step = ?", (thread_id, step))

    def timers_of(self, thread_id: str) -> list[tuple[str, float]]:
        rows = self._run(
            "SELECT step, due_at FROM longtask_timers WHERE thread_id = ?", (thread_id,)
        )
        return [(r[0], float(r[1])) for r in rows]

    def due_timers(self, now: float, limit: int = 100) -> list[tuple[str, str, float]]:
        rows = self._run(
            "SELECT thread_id, step, due_at FROM longtask_timers WHERE due_at <= ? "
            "ORDER BY due_at LIMIT ?",
            (now, limit),
        )
        return [(r[0], r[1], float(r[2])) for r in rows]

    def update_definition(
        self,
        thread_id: str,
        definition_hash: str,
        definition: dict[str, Any],
        task_ref: str | None = None,
    ) -> None:
        """The definition the thread runs on now (and, when given, the reference it is
        loaded by: a migrated thread's old reference may name only the old version)."""
        self._run(*definition_statement(thread_id, definition_hash, definition, task_ref))

    # -- events ------------------------------------------------------------------------------

    def append_event(
        self,
        thread_id: str,
        kind: str,
        *,
        key: str,
        stage: str | None = None,
        step: str | None = None,
        attempt: int | None = None,
        data: dict[str, Any] | None = None,
    ) -> int | None:
        """Append one event. ``key`` makes the insert idempotent: appending the same key twice
        (a node re-executed after a crash, say) stores one event. Returns the new id, or
        None when the key was already there."""
        event = NewEvent(thread_id, kind, key, stage, step, attempt, data)
        rows = self._run(
            f"{_EVENT_INSERT}{_EVENT_ROW} ON CONFLICT (dedupe_key) DO NOTHING RETURNING id",
            event.params(),
        )
        self.notify([thread_id])
        return int(rows[0][0]) if rows else None

    def append_events(self, events: Sequence[NewEvent]) -> None:
        """Append several events in one statement (one round trip); idempotent per key."""
        # 100 rows of 8 parameters stay under every SQLite build's variable limit.
        for start in range(0, len(events), 100):
            batch = events[start : start + 100]
            self._run(
                _EVENT_INSERT
                + ",".join(_EVENT_ROW for _ in batch)
                + " ON CONFLICT (dedupe_key) DO NOTHING",
                [p for e in batch for p in e.params()],
            )
        self.notify(sorted({e.thread_id for e in events}))

    def notify(self, thread_ids: Sequence[str]) -> None:
        """Tell followers of these threads that new events were stored (PostgreSQL: NOTIFY;
        SQLite followers poll)."""

    def steps_with_event(self, thread_id: str, kind: str) -> set[str]:
        rows = self._run(
            "SELECT DISTINCT step FROM longtask_events WHERE thread_id = ? AND kind = ? "
            "AND step IS NOT NULL",
            (thread_id, kind),
        )
        return {r[0] for r in rows}

    def step_progress(self, thread_id: str, step: str) -> dict[str, Any] | None:
        """The last ``step.progress`` of the running attempt of ``step`` (its data: done,
        total, message), or None when that attempt has reported none."""
        rows = self._run(
            "SELECT kind, data FROM longtask_events WHERE thread_id = ? AND step = ? "
            "AND kind IN ('step.started', 'step.progress') ORDER BY id DESC LIMIT 1",
            (thread_id, step),
        )
        if not rows or rows[0][0] != "step.progress":
            return None
        data = rows[0][1]
        return dict(json.loads(data) if isinstance(data, str | bytes) else data)

    def events(
        self,
        thread_id: str,
        *,
        since: int = 0,
        kinds: Sequence[str] | None = None,
        limit: int | None = None,
        recent: float | None = None,
    ) -> list[Event]:
        sql = (
            "SELECT id, thread_id, kind, stage, step, attempt, data, ts FROM longtask_events "
            "WHERE thread_id = ? AND id > ?"
        )
        # An id beyond the largest any backend stores: nothing comes after it (SQLite would
        # refuse the number rather than answer so).
        params: list[Any] = [thread_id, min(since, 2**63 - 1)]
        if recent is not None:
            # Also the last moments' events: one committed late, under a smaller id than
            # one already read, is not skipped (callers drop the ids they have seen).
            sql = sql.replace("AND id > ?", "AND (id > ? OR ts >= ?)")
            params.append(recent)
        if kinds:
            sql += " AND kind IN (" + ",".join("?" for _ in kinds) + ")"
            params.extend(kinds)
        sql += " ORDER BY id"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return [
            Event(
                id=int(r[0]),
                thread_id=r[1],
                kind=r[2],
                stage=r[3],
                step=r[4],
                attempt=r[5],
                data=json.loads(r[6]),
                ts=_ts(r[7]) or datetime.now(UTC),
            )
            for r in self._run(sql, params)
        ]

    def checkpoint_tree(self, thread_id: str) -> list[tuple[str, str | None]]:
        """(checkpoint id, parent id) of every root checkpoint of the thread, in the order
        they were stored (``seq``): ids only, never the state (the saver's
        ``longtask_cp_checkpoints`` table)."""
        rows = self._run(
            "SELECT checkpoint_id, parent_id FROM longtask_cp_checkpoints "
            "WHERE thread_id = ? AND checkpoint_ns = '' ORDER BY seq, checkpoint_id",
            (thread_id,),
        )
        return [(str(r[0]), None if r[1] is None else str(r[1])) for r in rows]

    def checkpoint_marks(self, thread_id: str, ns: str = "") -> list[CheckpointMark]:
        """Every checkpoint of the thread's namespace ``ns`` (``""``: its root checkpoints;
        else a subgraph's), in the order they were stored, with its parent, what made it
        and the root checkpoint it was made under (LangGraph notes the parent graph's
        checkpoint in a subgraph checkpoint's metadata, ``parents``). Never the state."""
        rows = self._run(
            "SELECT checkpoint_id, parent_id, metadata FROM longtask_cp_checkpoints "
            "WHERE thread_id = ? AND checkpoint_ns = ? ORDER BY seq, checkpoint_id",
            (thread_id, ns),
        )
        out: list[CheckpointMark] = []
        for cid, pid, meta in rows:
            data = json.loads(meta)
            under = (data.get("parents") or {}).get("")
            on = data.get(STANDS_ON)
            out.append(
                CheckpointMark(
                    str(cid),
                    None if pid is None else str(pid),
                    str(data.get("source") or ""),
                    None if under is None else str(under),
                    None if on is None else str(on),
                )
            )
        return out

    # -- blobs -------------------------------------------------------------------------------

    def put_blob(self, digest: str, data: bytes) -> None:
        self._run(*self._blob_statement(digest, data))

    def _blob_statement(self, digest: str, data: bytes) -> tuple[str, tuple[Any, ...]]:
        return (
            "INSERT INTO longtask_blobs (digest, data, size, created_at) VALUES (?,?,?,?) "
            # Stored again: a fresh created_at tells a concurrent prune to keep it.
            "ON CONFLICT (digest) DO UPDATE SET created_at = excluded.created_at",
            (digest, data, len(data), time.time()),
        )

    def get_blob(self, digest: str) -> bytes | None:
        rows = self._run("SELECT data FROM longtask_blobs WHERE digest = ?", (digest,))
        return bytes(rows[0][0]) if rows else None


def _too_new(current: int) -> str:
    return (
        f"the longtask tables are at schema version {current}, newer than this longtask "
        f"understands ({SCHEMA_VERSION}); upgrade the langgraph-longtask package"
    )


def _thread(r: tuple[Any, ...], definition: dict[str, Any]) -> ThreadRecord:
    return ThreadRecord(
        thread_id=r[0],
        task_ref=r[1],
        task_name=r[2],
        task_version=r[3],
        definition_hash=r[4],
        definition=definition,
        inputs=json.loads(r[6]) if r[6] else None,
        status=r[7],
        error=json.loads(r[8]) if r[8] else None,
        runs=int(r[9]),
        created_at=_ts(r[10]) or datetime.now(UTC),
        updated_at=_ts(r[11]) or datetime.now(UTC),
        waiting=json.loads(r[12]) if r[12] else None,
        mode=r[13],
        owner=r[14],
        context=json.loads(r[15]) if r[15] else None,
    )


class SqliteStore(Store):
    dialect = SQLITE

    def __init__(self, conn: sqlite3.Connection, lock: Any = None) -> None:
        # The connection (and its lock) is the saver's own: SQLite has one writer at a
        # time, and a second connection in the same process would queue parallel steps'
        # writes behind each other's busy timeouts. Every statement commits at once.
        self._conn = conn
        self._lock = lock if lock is not None else threading.Lock()
        self._definitions = {}

    def _run(
        self, sql: str, params: Sequence[Any] = (), binary: bool = False
    ) -> list[tuple[Any, ...]]:
        with self._lock:
            try:
                rows = self._conn.execute(sql, tuple(params)).fetchall()
                self._conn.commit()
            except BaseException:
                self._conn.rollback()
                raise
            return rows

    def _run_with_event(
        self,
        sql: str,
        params: Sequence[Any],
        event: Callable[[list[tuple[Any, ...]]], NewEvent | None],
        reads_rows: bool = True,
    ) -> list[tuple[Any, ...]]:
        with self._lock:
            self._conn.commit()
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                rows = self._conn.execute(sql, tuple(params)).fetchall()
                new = event(rows)
                if new is not None:
                    self._conn.execute(_EVENT_ONE, new.params())
            except BaseException:
                self._conn.rollback()
                raise
            self._conn.commit()
            return rows

    def _run_all(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> None:
        with self._lock:
            self._conn.commit()
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                for sql, params in statements:
                    self._conn.execute(sql, tuple(params))
            except BaseException:
                self._conn.rollback()
                raise
            self._conn.commit()

    @contextmanager
    def _transaction(self, serialise: bool = True) -> Iterator[Any]:
        with self._lock:
            self._conn.commit()
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield lambda sql, params: self._conn.execute(sql, tuple(params)).fetchall()
            except BaseException:
                self._conn.rollback()
                raise
            self._conn.commit()

    def _table_exists(self, name: str) -> bool:
        return bool(
            self._run("SELECT 1 FROM sqlite_master WHERE type='table' AND name = ?", (name,))
        )

    def close(self) -> None:
        with self._lock:
            self._conn.close()


class PostgresStore(Store):
    dialect = POSTGRES

    def __init__(self, pool: ConnectionPool[Any], fence: Fence | None = None) -> None:
        self._pool = pool
        self.fence = fence or Fence()
        self._definitions = {}

    @staticmethod
    def _sql(sql: str) -> str:
        return sql.replace("?", "%s")

    def server_time(self) -> float:
        """The database server's clock (seconds since the epoch): the one clock every
        process sharing this database decides deadlines and schedule fires by."""
        rows = self._run("SELECT EXTRACT(EPOCH FROM clock_timestamp())")
        return float(rows[0][0])

    def _run(
        self, sql: str, params: Sequence[Any] = (), binary: bool = False
    ) -> list[tuple[Any, ...]]:
        from psycopg.rows import tuple_row

        def run(conn: Any) -> list[tuple[Any, ...]]:
            # Tuples straight from the driver: the shared pool's default is dict rows (for
            # LangGraph's saver, which reads tables it migrates from).
            with conn.cursor(row_factory=tuple_row) as cur:
                if "longtask_effects" in sql:
                    # Only the ledger's table has the trigger that reads the setting: the
                    # other statements need not bring it up to date (a round trip).
                    self.fence.apply(conn, cur)
                cur.execute(self._sql(sql), tuple(params), binary=binary or None)
                return cur.fetchall() if cur.description else []

        # a connection the server closed while it sat idle is replaced (see on_pooled)
        return on_pooled(self._pool, run)

    @contextmanager
    def _reads(self) -> Iterator[Callable[[str], list[tuple[Any, ...]]]]:
        """The snapshot's statements (``/metrics``) in one read-only repeatable-read
        transaction, so its numbers agree with each other, and without JIT compilation:
        the planner turns it on for aggregates over big tables, where it cost more than the
        query (measured: 1 s of 1.5 s for the pauses of 2,000 waiting threads)."""
        from psycopg.rows import tuple_row

        with (
            self._pool.connection() as conn,
            conn.transaction(),
            conn.cursor(row_factory=tuple_row) as cur,
        ):
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            cur.execute("SET LOCAL jit = off")

            def run(sql: str) -> list[tuple[Any, ...]]:
                cur.execute(sql)
                return list(cur.fetchall())

            yield run

    def _run_with_event(
        self,
        sql: str,
        params: Sequence[Any],
        event: Callable[[list[tuple[Any, ...]]], NewEvent | None],
        reads_rows: bool = True,
    ) -> list[tuple[Any, ...]]:
        from psycopg.rows import tuple_row

        with self._pool.connection() as conn:
            with conn.cursor() as cur:
                self.fence.apply(conn, cur)  # outside the transaction: a rollback keeps it
            # Pipelined: BEGIN, the statement, the event, its NOTIFY and COMMIT go in one
            # round trip (two when the event is made from the statement's rows), not five.
            with (
                conn.pipeline(),
                conn.transaction(),
                conn.cursor(row_factory=tuple_row) as cur,
            ):
                cur.execute(self._sql(sql), tuple(params))
                out: list[tuple[Any, ...]] = cur.fetchall() if reads_rows else []
                new = event(out)
                if new is not None:
                    cur.execute(self._sql(_EVENT_ONE), new.params())
                    cur.execute("SELECT pg_notify(%s, %s)", (EVENTS_CHANNEL, new.thread_id))
            return out

    def _run_all(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> None:
        with self._pool.connection() as conn:
            if any("longtask_effects" in sql for sql, _ in statements):
                with conn.cursor() as cur:
                    self.fence.apply(conn, cur)  # outside the transaction: a rollback keeps it
            # pipelined: BEGIN, the statements and COMMIT in one round trip
            with conn.pipeline(), conn.transaction(), conn.cursor() as cur:
                for sql, params in statements:
                    cur.execute(self._sql(sql), tuple(params))

    @contextmanager
    def _transaction(self, serialise: bool = True) -> Iterator[Any]:
        with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            if serialise:
                # Serialise concurrent `db upgrade`s; released at commit.
                cur.execute("SELECT pg_advisory_xact_lock(7428061905411)")

            def execute(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
                # No parameters: no placeholder parsing (PL/pgSQL bodies use % freely).
                cur.execute(self._sql(sql) if params else sql, tuple(params) or None)
                rows = cur.fetchall() if cur.description else []
                return [tuple(r.values()) if isinstance(r, dict) else tuple(r) for r in rows]

            yield execute

    def _table_exists(self, name: str) -> bool:
        return bool(self._run("SELECT to_regclass(?) IS NOT NULL", (name,))[0][0])

    def notify(self, thread_ids: Sequence[str]) -> None:
        if thread_ids:
            self._run(
                "SELECT pg_notify(?, t) FROM unnest(?::text[]) AS t",
                (EVENTS_CHANNEL, list(thread_ids)),
            )
