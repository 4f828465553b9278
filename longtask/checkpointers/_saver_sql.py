"""The SQL of longtask's saver, for SQLite and PostgreSQL.

Statements are written with ``?`` placeholders and rewritten for psycopg. A write is one
transaction (a ``Batch``): the lease check, the saver's rows, the thread's events and
(PostgreSQL) the NOTIFY that wakes followers. On PostgreSQL a batch of rows alone is one
statement, ``longtask_cp_write`` (a function of the schema's, migration 16): its rows as one
JSON document and their bytes as one ``bytea[]``, one round trip and one implicit
transaction. A batch with statements of its own (``then``) adds them after it in one
transaction, in one round trip (psycopg's pipeline mode).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from longtask.store._events import charge_rows
from longtask.store._fence import LOST
from longtask.store._limits import BUDGET_CHARGE_SQL
from longtask.store._pooled import on_pooled
from longtask.store._store import _EVENT_INSERT, _EVENT_ROW
from longtask.store._usage import USAGE_CHARGE_SQL

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

    from longtask.store import NewEvent

Row = tuple[Any, ...]
Work = Callable[[Any], None] | None

_CP_COLS = (
    "thread_id, checkpoint_ns, checkpoint_id, parent_id, base_id, depth, state, metadata, seq"
)
EVENTS_SQL = f"{_EVENT_INSERT}{_EVENT_ROW} ON CONFLICT (dedupe_key) DO NOTHING"
_BLOB_SQL = (
    "INSERT INTO longtask_blobs (digest, data, size, created_at) VALUES (?,?,?,?) "
    # Stored again: a fresh created_at tells a concurrent prune to keep it (_retention).
    "ON CONFLICT (digest) DO UPDATE SET created_at = excluded.created_at"
)


def _blob_rows(blobs: Mapping[str, bytes]) -> list[tuple[str, bytes, int, float]]:
    now = time.time()
    return [(digest, data, len(data), now) for digest, data in blobs.items()]


_WRITE_COLS = (
    "thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, value, task_path"
)


@dataclass
class Batch:
    """What one write transaction stores, in this order: the lease check, ``blobs``,
    ``events``, ``writes`` (pending writes kept as first stored: a retried task writes the
    same), ``upserts`` (special writes, an error or interrupt replacing an earlier one of
    the task), ``values`` (channel values, each stored once) and ``checkpoint``; then the
    statements of ``then(tx)``. Every row belongs to the batch's thread.

    Row layouts: a write is (thread, ns, checkpoint, task, idx, channel, type, value,
    task_path), a value (thread, ns, channel, version, type, value), the checkpoint
    (thread, ns, id, parent, base, depth, state, metadata, run_id).
    """

    events: Sequence[NewEvent] = ()
    blobs: Mapping[str, bytes] = field(default_factory=dict)
    writes: list[Row] = field(default_factory=list)
    upserts: list[Row] = field(default_factory=list)
    values: Sequence[Row] = ()
    checkpoint: Row | None = None
    then: Work = None

    @property
    def has_rows(self) -> bool:
        return bool(
            self.events
            or self.blobs
            or self.writes
            or self.upserts
            or self.values
            or self.checkpoint is not None
        )


class Backend(ABC):
    #: wakes the followers of a thread when the transaction commits (PostgreSQL)
    NOTIFY: str | None = None
    PUT_VALUE = (
        "INSERT INTO longtask_cp_values (thread_id, checkpoint_ns, channel, version, type, value) "
        "VALUES (?,?,?,?,?,?) ON CONFLICT DO NOTHING"
    )
    #: the checkpoint row, numbered one more than the highest of its thread (its place in
    #: the thread's order: see store._order); a checkpoint stored again keeps its number.
    #: The thread id is its last parameter again.
    PUT_CHECKPOINT = (
        "INSERT INTO longtask_cp_checkpoints (thread_id, checkpoint_ns, checkpoint_id, "
        "parent_id, base_id, depth, state, metadata, run_id, seq) "
        "VALUES (?,?,?,?,?,?,?,?,?,(SELECT COALESCE(MAX(seq), 0) + 1 "
        "FROM longtask_cp_checkpoints WHERE thread_id = ?)) "
        "ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) "
        "DO UPDATE SET parent_id = excluded.parent_id, base_id = excluded.base_id, "
        "depth = excluded.depth, state = excluded.state, metadata = excluded.metadata, "
        "run_id = excluded.run_id"
    )
    PUT_WRITE = (
        f"INSERT INTO longtask_cp_writes ({_WRITE_COLS}) VALUES (?,?,?,?,?,?,?,?,?) "
        "ON CONFLICT DO NOTHING"
    )
    UPSERT_WRITE = (
        f"INSERT INTO longtask_cp_writes ({_WRITE_COLS}) VALUES (?,?,?,?,?,?,?,?,?) "
        "ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO UPDATE SET "
        "channel = excluded.channel, type = excluded.type, value = excluded.value, "
        "task_path = excluded.task_path"
    )

    # -- driver ------------------------------------------------------------------------------

    @abstractmethod
    def write(self, thread_id: str, epoch: int | None, batch: Batch) -> None:
        """One transaction: check ``epoch`` (when held), then store ``batch``."""

    @abstractmethod
    def read(self, sql: str, params: Sequence[Any] = ()) -> list[Row]: ...

    @abstractmethod
    def _json_pairs(self) -> str:
        """A FROM item ``k (channel, version)`` over a JSON parameter ``[[c, v], ...]``."""

    def _pairs_join(self) -> str:
        """``longtask_cp_values v`` joined with the pairs ``k`` (an ON clause follows)."""
        return f"longtask_cp_values v JOIN {self._json_pairs()}"

    @abstractmethod
    def _pairs_in(self) -> str:
        """SQL matching ``(channel, version)`` against a parameter of pairs."""

    @abstractmethod
    def _pairs_param(self, pairs: Sequence[tuple[str, str]]) -> Sequence[Any]: ...

    @abstractmethod
    def _ids_in(self, column: str = "checkpoint_id") -> str:
        """SQL matching ``column`` against a parameter holding a list of ids."""

    @abstractmethod
    def _ids_param(self, ids: Sequence[str]) -> Any: ...

    @abstractmethod
    def _contains(self, column: str, needle: bytes) -> str:
        """SQL true when the bytes of ``column`` contain ``needle`` (written as a literal,
        so that a partial index with the same condition serves it: see the schema's
        ``longtask_cp_values_marked``)."""

    # -- reads -------------------------------------------------------------------------------

    def checkpoint_rows(
        self,
        thread_id: str | None,
        ns: str | None,
        checkpoint_id: str | None,
        before_id: str | None,
        limit: int | None,
    ) -> list[Row]:
        """Checkpoint rows (columns ``_CP_COLS``), the latest first: in the thread's order,
        by ``seq``, never by id (ids come from the writers' clocks). ``before_id``: those
        that came before that checkpoint, of any namespace of the thread (LangGraph's replay
        asks for a subgraph's checkpoint before its parent's); an id the thread does not
        have, and a list across threads, compare ids as LangGraph's savers do."""
        where: list[str] = []
        params: list[Any] = []
        for column, value in (
            ("thread_id", thread_id),
            ("checkpoint_ns", ns),
            ("checkpoint_id", checkpoint_id),
        ):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        place = (
            None
            if before_id is None or thread_id is None
            else self._place(thread_id, ns, before_id)
        )
        if place is not None:
            where.append("seq < ?")
            params.append(place)
        elif before_id is not None:
            where.append("checkpoint_id < ?")
            params.append(before_id)
        sql = f"SELECT {_CP_COLS} FROM longtask_cp_checkpoints"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY seq DESC, checkpoint_id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return self.read(sql, params)

    def _place(self, thread_id: str, ns: str | None, checkpoint_id: str) -> int | None:
        """The sequence number of a checkpoint of the thread: of namespace ``ns`` (a key
        lookup), else of any (a scan of the thread's keys, for a replay's cross-namespace
        ``before``)."""
        if ns is not None:
            rows = self.read(
                "SELECT seq FROM longtask_cp_checkpoints "
                "WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?",
                (thread_id, ns, checkpoint_id),
            )
            if rows:
                return int(rows[0][0])
        rows = self.read(
            "SELECT MAX(seq) FROM longtask_cp_checkpoints "
            "WHERE thread_id = ? AND checkpoint_id = ?",
            (thread_id, checkpoint_id),
        )
        return int(rows[0][0]) if rows and rows[0][0] is not None else None

    def chain(
        self, thread_id: str, ns: str, base_id: str, below_depth: int, upto: int
    ) -> list[Row]:
        """(id, parent id, state) of the rows stored against snapshot ``base_id`` that can
        be links of a delta line ending at depth ``below_depth`` (or less) at sequence
        number ``upto``: one indexed read. (Forks of one checkpoint share its base and
        depth + 1, so they are not read for each other.)"""
        return self.read(
            "SELECT checkpoint_id, parent_id, state FROM longtask_cp_checkpoints "
            "WHERE thread_id = ? AND checkpoint_ns = ? AND base_id = ? AND depth < ? "
            "AND seq <= ?",
            (thread_id, ns, base_id, below_depth, upto),
        )

    def values(
        self, thread_id: str, ns: str, pairs: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], tuple[str, bytes]]:
        """The stored values of these (channel, version) pairs."""
        if not pairs:
            return {}
        # The pairs go as one JSON parameter (a list of [channel, version]): the server
        # parses it faster than a driver builds two arrays of thousands of strings.
        rows = self.read(
            f"SELECT v.channel, v.version, v.type, v.value FROM {self._pairs_join()} "
            "ON v.channel = k.channel AND v.version = k.version "
            "WHERE v.thread_id = ? AND v.checkpoint_ns = ?",
            (json.dumps(pairs), thread_id, ns),
        )
        return {(r[0], r[1]): (r[2], bytes(r[3]) if r[3] is not None else b"") for r in rows}

    def values_containing(
        self, thread_id: str, ns: str, needle: bytes
    ) -> dict[tuple[str, str], tuple[str, bytes]]:
        """Every stored value of the thread (and namespace) whose bytes contain ``needle``
        (for a skip's mark, read through a partial index of the marked values)."""
        rows = self.read(
            "SELECT channel, version, type, value FROM longtask_cp_values "
            f"WHERE thread_id = ? AND checkpoint_ns = ? AND {self._contains('value', needle)}",
            (thread_id, ns),
        )
        return {(r[0], r[1]): (r[2], bytes(r[3]) if r[3] is not None else b"") for r in rows}

    def writes(self, keys: Sequence[tuple[str, str, str]]) -> dict[tuple[str, str, str], list[Row]]:
        scopes: dict[tuple[str, str], list[str]] = {}
        for thread_id, ns, cid in keys:
            scopes.setdefault((thread_id, ns), []).append(cid)
        out: dict[tuple[str, str, str], list[Row]] = {}
        for (thread_id, ns), ids in scopes.items():
            # Sorted here: asked to sort, PostgreSQL keeps the index's order and filters
            # every write of the thread rather than look up the ids (1.5 ms on a 2,000-step
            # thread for the head's writes alone).
            one = len(ids) == 1
            rows = self.read(
                "SELECT checkpoint_id, task_id, channel, type, value, task_path, idx "
                "FROM longtask_cp_writes WHERE thread_id = ? AND checkpoint_ns = ? AND "
                f"{'checkpoint_id = ?' if one else self._ids_in()}",
                (thread_id, ns, ids[0] if one else self._ids_param(ids)),
            )
            rows.sort(key=lambda r: (r[0], r[5], r[1], r[6]))
            for r in rows:
                value = bytes(r[4]) if r[4] is not None else b""
                out.setdefault((thread_id, ns, r[0]), []).append((r[1], r[2], r[3], value))
        return out

    def rows_of_runs(self, run_ids: Sequence[str]) -> list[tuple[str, str, str]]:
        rows = self.read(
            "SELECT thread_id, checkpoint_ns, checkpoint_id FROM longtask_cp_checkpoints "
            f"WHERE {self._ids_in('run_id')}",
            (self._ids_param(run_ids),),
        )
        return [(r[0], r[1], r[2]) for r in rows]

    def rows_but_latest(self, thread_id: str) -> list[tuple[str, str, str]]:
        rows = self.read(
            "SELECT thread_id, checkpoint_ns, checkpoint_id FROM longtask_cp_checkpoints c "
            "WHERE thread_id = ? AND seq < (SELECT max(seq) FROM "
            "longtask_cp_checkpoints d WHERE d.thread_id = c.thread_id AND "
            "d.checkpoint_ns = c.checkpoint_ns)",
            (thread_id,),
        )
        return [(r[0], r[1], r[2]) for r in rows]

    # -- maintenance -------------------------------------------------------------------------

    def delete_thread(self, thread_id: str) -> None:
        def work(tx: Any) -> None:
            for table in ("longtask_cp_checkpoints", "longtask_cp_values", "longtask_cp_writes"):
                tx.execute(f"DELETE FROM {table} WHERE thread_id = ?", (thread_id,))

        self.write(thread_id, None, Batch(then=work))

    def copy_thread(self, source: str, target: str) -> None:
        def work(tx: Any) -> None:
            tx.execute(
                "INSERT INTO longtask_cp_checkpoints (thread_id, checkpoint_ns, checkpoint_id, "
                "parent_id, base_id, depth, state, metadata, run_id, seq) "
                "SELECT ?, checkpoint_ns, checkpoint_id, parent_id, base_id, depth, state, "
                "metadata, run_id, seq FROM longtask_cp_checkpoints "
                "WHERE thread_id = ? ON CONFLICT DO NOTHING",
                (target, source),
            )
            tx.execute(
                "INSERT INTO longtask_cp_values (thread_id, checkpoint_ns, channel, version, "
                "type, value) SELECT ?, checkpoint_ns, channel, version, type, value "
                "FROM longtask_cp_values WHERE thread_id = ? ON CONFLICT DO NOTHING",
                (target, source),
            )
            tx.execute(
                f"INSERT INTO longtask_cp_writes ({_WRITE_COLS}) SELECT ?, checkpoint_ns, "
                "checkpoint_id, task_id, idx, channel, type, value, task_path "
                "FROM longtask_cp_writes WHERE thread_id = ? ON CONFLICT DO NOTHING",
                (target, source),
            )

        self.write(target, None, Batch(then=work))

    def remove(
        self,
        thread_id: str,
        ns: str,
        ids: Sequence[str],
        snapshots: Sequence[tuple[bytes, str, str, str]],
        keep_values: Sequence[tuple[str, str]] | None,
    ) -> None:
        def work(tx: Any) -> None:
            if snapshots:
                tx.executemany(
                    "UPDATE longtask_cp_checkpoints SET state = ?, base_id = checkpoint_id, "
                    "depth = 0 WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?",
                    snapshots,
                )
            for table in ("longtask_cp_checkpoints", "longtask_cp_writes"):
                tx.execute(
                    f"DELETE FROM {table} WHERE thread_id = ? AND checkpoint_ns = ? "
                    f"AND {self._ids_in()}",
                    (thread_id, ns, self._ids_param(ids)),
                )
            if keep_values is not None:
                tx.execute(
                    "DELETE FROM longtask_cp_values WHERE thread_id = ? AND checkpoint_ns = ? "
                    f"AND NOT {self._pairs_in()}",
                    (thread_id, ns, *self._pairs_param(keep_values)),
                )

        self.write(thread_id, None, Batch(then=work))


class LeaseLostError(Exception):
    """The writer's lease epoch is no longer the thread's (SQLite's check; PostgreSQL's
    is a function raising the same words)."""


class SqliteBackend(Backend):
    def __init__(self, conn: sqlite3.Connection, lock: threading.RLock | threading.Lock) -> None:
        self.conn = conn
        self.lock = lock

    def read(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        with self.lock:
            rows = self.conn.execute(sql, tuple(params)).fetchall()
            # a read in autocommit mode ends its implicit transaction at once
            if self.conn.in_transaction:
                self.conn.commit()
            return rows

    def write(self, thread_id: str, epoch: int | None, batch: Batch) -> None:
        conn = self.conn
        with self.lock:
            if conn.in_transaction:
                conn.commit()
            conn.execute("BEGIN IMMEDIATE")
            try:
                if epoch is not None:
                    row = conn.execute(
                        "SELECT epoch FROM longtask_leases WHERE thread_id = ?", (thread_id,)
                    ).fetchone()
                    if row is None or int(row[0]) != epoch:
                        raise LeaseLostError(
                            f"{LOST}: thread {thread_id} is at lease epoch "
                            f"{row[0] if row else None}, this writer holds epoch {epoch}"
                        )
                if batch.blobs:
                    conn.executemany(_BLOB_SQL, _blob_rows(batch.blobs))
                if batch.events:
                    self._put_events(conn, batch.events)
                if batch.writes:
                    conn.executemany(self.PUT_WRITE, batch.writes)
                if batch.upserts:
                    conn.executemany(self.UPSERT_WRITE, batch.upserts)
                if batch.values:
                    conn.executemany(self.PUT_VALUE, batch.values)
                if batch.checkpoint is not None:
                    conn.execute(self.PUT_CHECKPOINT, (*batch.checkpoint, thread_id))
                if batch.then is not None:
                    batch.then(_SqliteTx(conn))
            except BaseException:
                conn.rollback()
                raise
            conn.commit()

    def _put_events(self, conn: sqlite3.Connection, events: Sequence[NewEvent]) -> None:
        """Insert ``events`` and pay the charges of those it stored (not of one stored
        before: a repeated write charges nothing twice)."""
        if all(e.charge is None for e in events):
            conn.executemany(EVENTS_SQL, [e.params() for e in events])
            return
        stored = [e for e in events if conn.execute(EVENTS_SQL, e.params()).rowcount]
        budgets, usage = charge_rows(stored)
        now = time.time()
        conn.executemany(BUDGET_CHARGE_SQL, [(*r, now) for r in budgets])
        conn.executemany(
            USAGE_CHARGE_SQL,
            [(t, st, int(tk), c, int(tc), mc, now) for t, st, tk, c, tc, mc in usage],
        )

    def _json_pairs(self) -> str:
        return (
            "(SELECT json_extract(value, '$[0]') AS channel, json_extract(value, '$[1]') "
            "AS version FROM json_each(?)) k"
        )

    def _pairs_join(self) -> str:
        # The pairs first, each looked up by the primary key: left to itself SQLite scans
        # the thread's values and, for each, the whole JSON list (2,000 pairs of a long
        # thread: seconds).
        return f"{self._json_pairs()} CROSS JOIN longtask_cp_values v"

    def _pairs_in(self) -> str:
        return (
            "(channel, version) IN (SELECT json_extract(value, '$[0]'), "
            "json_extract(value, '$[1]') FROM json_each(?))"
        )

    def _pairs_param(self, pairs: Sequence[tuple[str, str]]) -> Sequence[Any]:
        return (json.dumps(list(pairs)),)

    def _ids_in(self, column: str = "checkpoint_id") -> str:
        return f"{column} IN (SELECT value FROM json_each(?))"

    def _ids_param(self, ids: Sequence[str]) -> Any:
        return json.dumps(list(ids))

    def _contains(self, column: str, needle: bytes) -> str:
        return f"instr({column}, X'{needle.hex()}') > 0"


class _SqliteTx:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return self.conn.execute(sql, tuple(params)).fetchall()

    query = execute

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self.conn.executemany(sql, rows)


def _pg(sql: str) -> str:
    return sql.replace("?", "%s")


#: the schema's function that stores a batch (see ``_cp_write_params``)
CP_WRITE_SQL = "SELECT longtask_cp_write(%s, %s, %s, %b)"


def _cp_write_params(thread_id: str, epoch: int | None, batch: Batch) -> tuple[Any, ...]:
    """The arguments of ``longtask_cp_write``: the thread, the epoch to check (None: no
    check), the rows as one JSON document, and every byte string as one ``bytea[]`` that
    the rows point into (1-based). The document's lists, each present only when not
    empty: ``b`` blobs [digest, size, created_at, i]; ``e`` events [kind, stage, step,
    attempt, data, ts, dedupe_key]; ``g`` the charges some of them carry [dedupe_key,
    owners, step, tokens, cost, tool_calls, model_calls, wall_time, now]; ``w`` writes and
    ``u`` upserts [ns, checkpoint, task, idx, channel, type, task_path, i]; ``v`` values
    [ns, channel, version, type, i]; ``c`` the checkpoint [ns, id, parent, base, depth,
    metadata, run_id, i]. Text travels in JSON (parsed by the server in C), bytes in
    binary: no escaping of either."""
    data: list[bytes | None] = []

    def at(value: bytes | None) -> int:
        data.append(value)
        return len(data)

    doc: dict[str, Any] = {}
    if batch.blobs:
        now = time.time()
        doc["b"] = [[d, len(b), now, at(b)] for d, b in batch.blobs.items()]
    if batch.events:
        doc["e"] = [e.params()[1:] for e in batch.events]
        now = time.time()
        charges = [
            [e.params()[7], list(g.owners), g.step, g.tokens, g.cost, *g.rest(), now]
            for e in batch.events
            if (g := e.charge) is not None
        ]
        if charges:
            doc["g"] = charges
    if batch.writes:
        doc["w"] = [[*r[1:7], r[8], at(r[7])] for r in batch.writes]
    if batch.upserts:
        # one row per key (a DO UPDATE may not touch a row twice): the last one wins, as
        # it would stored one after the other
        last = {tuple(r[1:5]): r for r in batch.upserts}
        doc["u"] = [[*r[1:7], r[8], at(r[7])] for r in last.values()]
    if batch.values:
        doc["v"] = [[*r[1:5], at(r[5])] for r in batch.values]
    if batch.checkpoint is not None:
        c = batch.checkpoint
        doc["c"] = [c[1], c[2], c[3], c[4], c[5], c[7], c[8], at(c[6])]
    return (thread_id, epoch, json.dumps(doc, separators=(",", ":")), data)


class PostgresBackend(Backend):
    NOTIFY = "SELECT pg_notify(?, ?)"

    def __init__(self, pool: ConnectionPool[Any]) -> None:
        self.pool = pool

    def _on_connection(self, fn: Callable[[Any], Any]) -> Any:
        """``fn(conn)`` on a pooled connection; one that the server closed while it sat
        idle in the pool (``idle_session_timeout``, a restart) is replaced once. Every
        write is idempotent (conflicts are ignored or replace the same row), so repeating
        one whose COMMIT's answer was lost stores nothing twice."""
        return on_pooled(self.pool, fn)

    def read(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        from psycopg.rows import tuple_row

        def run(conn: Any) -> list[Row]:
            with conn.cursor(row_factory=tuple_row) as cur:
                cur.execute(_pg(sql), tuple(params))
                return cur.fetchall() if cur.description else []

        return self._on_connection(run)  # type: ignore[no-any-return]

    def write(self, thread_id: str, epoch: int | None, batch: Batch) -> None:
        params = _cp_write_params(thread_id, epoch, batch)
        if batch.then is None:
            # Autocommit: the one statement is its transaction.
            self._on_connection(lambda conn: conn.execute(CP_WRITE_SQL, params))
            return

        def run(conn: Any) -> None:
            with conn.pipeline(), conn.transaction():
                cur = conn.cursor()
                if epoch is not None or batch.has_rows:
                    cur.execute(CP_WRITE_SQL, params)
                assert batch.then is not None
                batch.then(_PgTx(cur))

        self._on_connection(run)

    def _json_pairs(self) -> str:
        return "(SELECT e->>0 AS channel, e->>1 AS version FROM jsonb_array_elements(?::jsonb) e) k"

    # Lists go in binary format (%b): the text format quotes every element through a
    # regular expression, which costs ~1 ms of client CPU per thousand elements.

    def _pairs_in(self) -> str:
        return "(channel, version) IN (SELECT * FROM unnest(%b::text[], %b::text[]))"

    def _pairs_param(self, pairs: Sequence[tuple[str, str]]) -> Sequence[Any]:
        return ([p[0] for p in pairs], [p[1] for p in pairs])

    def _ids_in(self, column: str = "checkpoint_id") -> str:
        return f"{column} = ANY(%b::text[])"

    def _ids_param(self, ids: Sequence[str]) -> Any:
        return list(ids)

    def _contains(self, column: str, needle: bytes) -> str:
        return f"position('\\x{needle.hex()}'::bytea in {column}) > 0"


class _PgTx:
    def __init__(self, cur: Any) -> None:
        self.cur = cur

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        self.cur.execute(_pg(sql), tuple(params))
        if "RETURNING" not in sql:
            return []  # no result to wait for: the pipeline goes on
        return [tuple(r.values()) if isinstance(r, dict) else tuple(r) for r in self.cur.fetchall()]

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """The rows of ``sql``, a statement that returns some (waits for its answer: in
        the pipeline a result's description is known only once it is fetched)."""
        self.cur.execute(_pg(sql), tuple(params))
        rows = self.cur.fetchall()
        return [tuple(r.values()) if isinstance(r, dict) else tuple(r) for r in rows]

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self.cur.executemany(_pg(sql), rows)
