"""Which rows a thread owns, and which shared blobs it refers to: the one list that moving a
thread (``export``/``import``) and deleting one (``prune``) both go by.

Every table below has a ``thread_id`` column; a thread's rows are those with its id. Two
kinds of data are not rows of the thread:

- ``longtask_blobs`` is content-addressed and shared between threads: a step result over
  the inline limit is stored there once and its channel value holds a reference
  (``{"$longtask": "blob", "digest": d}``)
  (see ``_values``); on PostgreSQL artifact contents are stored there too (by sha256).
  :func:`referenced_blobs` finds the digests a thread refers to; a blob may be deleted only
  when no remaining thread refers to it.
- Artifact contents of an SQLite database are files beside it (see ``_artifacts``), one per
  digest, also shared between threads that stored the same bytes.

Add a table here when a migration adds one with a ``thread_id`` column (a unit test compares
this list with the schema).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from longtask.store._usage import USAGE_KEYS

if TYPE_CHECKING:
    from longtask.store._store import Store


@dataclass(frozen=True)
class OwnedTable:
    """A table holding rows of one thread each (by ``thread_id``)."""

    name: str
    #: the columns a copy of the row carries (``serial`` excluded)
    columns: tuple[str, ...]
    #: a stable order to read the rows in (events and inbox: the order they were stored)
    order: str
    #: columns holding bytes
    binary: frozenset[str] = frozenset()
    #: an id the database assigns (a copy gets a new one, in ``order``)
    serial: str | None = None
    #: False for per-database state that a moved thread does not take along (a lease is
    #: taken afresh by the next advance)
    carried: bool = True

    def select_sql(self) -> str:
        return (
            f"SELECT {', '.join(self.columns)} FROM {self.name} WHERE thread_id = ? "
            f"ORDER BY {self.order}"
        )

    def insert_sql(self, columns: Sequence[str] | None = None) -> str:
        cols = list(columns or self.columns)
        return f"INSERT INTO {self.name} ({', '.join(cols)}) VALUES ({','.join('?' for _ in cols)})"

    def delete_sql(self) -> str:
        return f"DELETE FROM {self.name} WHERE thread_id = ?"


_CP = "thread_id, checkpoint_ns"

#: every table with rows owned by a thread, parents before children
OWNED_TABLES: tuple[OwnedTable, ...] = (
    OwnedTable(
        "longtask_threads",
        (
            "thread_id",
            "task_ref",
            "task_name",
            "task_version",
            "definition_hash",
            "definition",
            "inputs",
            "status",
            "error",
            "runs",
            "created_at",
            "updated_at",
            "waiting",
            "cancel",
            "mode",
            "notify",
            "owner",
            "context",
            "notify_to",
        ),
        "thread_id",
    ),
    OwnedTable(
        "longtask_cp_checkpoints",
        (
            "thread_id",
            "checkpoint_ns",
            "checkpoint_id",
            "parent_id",
            "base_id",
            "depth",
            "state",
            "metadata",
            "seq",
            "run_id",
        ),
        f"{_CP}, seq, checkpoint_id",
        binary=frozenset({"state"}),
    ),
    OwnedTable(
        "longtask_cp_values",
        ("thread_id", "checkpoint_ns", "channel", "version", "type", "value"),
        f"{_CP}, channel, version",
        binary=frozenset({"value"}),
    ),
    OwnedTable(
        "longtask_cp_writes",
        (
            "thread_id",
            "checkpoint_ns",
            "checkpoint_id",
            "task_id",
            "idx",
            "channel",
            "type",
            "value",
            "task_path",
        ),
        f"{_CP}, checkpoint_id, task_id, idx",
        binary=frozenset({"value"}),
    ),
    OwnedTable(
        "longtask_events",
        ("thread_id", "kind", "stage", "step", "attempt", "data", "ts", "dedupe_key"),
        "id",
        serial="id",
    ),
    OwnedTable(
        "longtask_effects",
        (
            "key",
            "thread_id",
            "step",
            "name",
            "args_hash",
            "status",
            "result",
            "error",
            "calls",
            "created_at",
            "updated_at",
        ),
        "created_at, key",
    ),
    OwnedTable(
        "longtask_attempts",
        ("thread_id", "step", "item", "failed", "window_start", "retry_at", "updated_at"),
        "step, item",
    ),
    OwnedTable(
        "longtask_budgets",
        (
            "thread_id",
            "tokens_limit",
            "cost_limit",
            "tool_calls_limit",
            "wall_time_limit",
            "deadline_at",
            "tokens",
            "cost",
            "tool_calls",
            "wall_time",
            "updated_at",
        ),
        "thread_id",
    ),
    OwnedTable(
        "longtask_artifacts",
        ("thread_id", "name", "step", "digest", "size", "media_type", "created_at"),
        "created_at, name",
    ),
    OwnedTable(
        "longtask_maps",
        ("thread_id", "step", "digest", "total", "created_at", "items"),
        "step, digest",
    ),
    OwnedTable(
        "longtask_map_items",
        (
            "thread_id",
            "step",
            "digest",
            "idx",
            "status",
            "result",
            "model",
            "error",
            "updated_at",
        ),
        "step, digest, idx",
    ),
    OwnedTable(
        "longtask_subtasks",
        ("thread_id", "step", "idx", "attempt", "child_thread_id", "inputs", "created_at"),
        "step, idx, attempt",
    ),
    OwnedTable("longtask_timers", ("thread_id", "step", "due_at"), "step"),
    OwnedTable(
        "longtask_inbox",
        ("thread_id", "command", "created_at"),
        "id",
        serial="id",
    ),
    OwnedTable(
        "longtask_api_runs",
        (
            "run_id",
            "thread_id",
            "assistant_id",
            "status",
            "request",
            "actor",
            "metadata",
            "error",
            "created_at",
            "updated_at",
            "started_at",
            "webhook",
            "webhook_values",
            "webhook_attempts",
            "webhook_due",
            "webhook_state",
        ),
        "created_at, run_id",
    ),
    OwnedTable(
        "longtask_api_threads", ("thread_id", "metadata", "created_at", "owner"), "thread_id"
    ),
    # Notifications owed or sent, keyed by the id of the event that made them: per database
    # (a moved thread's events get new ids), so not carried.
    OwnedTable(
        "longtask_notifications",
        (
            "event_id",
            "reminder",
            "thread_id",
            "kind",
            "step",
            "created_at",
            "due",
            "attempts",
            "state",
            "sent",
            "settled_at",
            "receivers",
        ),
        "event_id, reminder",
        carried=False,
    ),
    OwnedTable(
        "longtask_leases",
        ("thread_id", "epoch", "holder", "acquired_at", "released_at"),
        "thread_id",
        carried=False,
    ),
    # What each step used. After the events: storing a step's events makes (and times) its
    # row through a trigger; an import then replaces those rows with the exported ones.
    OwnedTable(
        "longtask_usage",
        ("thread_id", "step", *USAGE_KEYS, "updated_at"),
        "step",
    ),
    # Who answered the thread's approvals (serve's authorization): made by a trigger from
    # the ``approval.resolved`` events, so a moved or copied thread's events make its rows.
    OwnedTable("longtask_answerers", ("thread_id", "name"), "name", carried=False),
    # A served run's stream parts: kept an hour for clients of the stream, not history.
    OwnedTable(
        "longtask_run_parts",
        ("thread_id", "run_id", "ns", "mode", "type", "body", "created_at"),
        "seq",
        binary=frozenset({"body"}),
        serial="seq",
        carried=False,
    ),
    # Which schedule tick started the thread: a schedule of this database (the tick's key is
    # the schedule's, so a copy under another id would collide), deleted with the thread.
    OwnedTable(
        "longtask_schedule_fires",
        ("schedule", "tick_at", "thread_id", "started", "fired_at"),
        "tick_at",
        carried=False,
    ),
)

OWNED_BY_NAME = {t.name: t for t in OWNED_TABLES}


def carried_tables() -> tuple[OwnedTable, ...]:
    """The tables a moved thread takes along, in insert order."""
    return tuple(t for t in OWNED_TABLES if t.carried)


def read_rows(store: Store, table: OwnedTable, thread_id: str) -> list[tuple[Any, ...]]:
    """The thread's rows of ``table`` (columns as in ``table.columns``; bytes as bytes)."""
    rows = store._run(table.select_sql(), (thread_id,))
    binary = [i for i, c in enumerate(table.columns) if c in table.binary]
    if not binary:
        return rows
    out = []
    for r in rows:
        row = list(r)
        for i in binary:
            if row[i] is not None:
                row[i] = bytes(row[i])  # psycopg: memoryview
        out.append(tuple(row))
    return out


def delete_statements(thread_id: str) -> list[tuple[str, tuple[str]]]:
    """The statements that delete every row the thread owns, children first (run them in one
    transaction). Shared blobs and artifact files are not touched: see
    :func:`referenced_blobs`."""
    return [(t.delete_sql(), (thread_id,)) for t in reversed(OWNED_TABLES)]


# A reference to a blob (``{"$longtask": "blob", "digest": d}``, and ``{"ref": d}`` as 0.1
# wrote it; see _values) as LangGraph's serializer stores it (msgpack: the fixstr key, then a
# str8 of 40 characters) and as JSON (task inputs, map items). A map step's reference also
# has a "digest" (of its run, 40 characters too): a candidate that matches no blob is dropped.
_REF_MSGPACK = re.compile(rb"(?:\xa3ref|\xa6digest)\xd9\x28([0-9a-f]{40})")
_REF_JSON = re.compile(rb'"(?:ref|digest)"\s*:\s*"([0-9a-f]{40})"')
#: bytes every row holding a reference contains (a cheap filter before the expressions)
REF_MARKERS = (b"ref", b"digest")


def blob_refs(data: bytes | str | None) -> set[str]:
    """Digests of ``longtask_blobs`` that a stored value (serialised channel value, JSON
    text) may refer to. A match is a candidate: look it up before relying on it."""
    if data is None:
        return set()
    raw = data.encode() if isinstance(data, str) else bytes(data)
    if not any(m in raw for m in REF_MARKERS):
        return set()
    return {m.decode() for rx in (_REF_MSGPACK, _REF_JSON) for m in rx.findall(raw)}


def refs_in_rows(rows: Iterable[Sequence[Any]]) -> set[str]:
    """Candidate blob digests referred to by any text or bytes column of these rows."""
    found: set[str] = set()
    for row in rows:
        for value in row:
            if isinstance(value, bytes | bytearray | memoryview | str):
                found |= blob_refs(bytes(value) if not isinstance(value, str) else value)
    return found


def existing_blobs(store: Store, digests: Iterable[str]) -> set[str]:
    """Those of ``digests`` that ``longtask_blobs`` holds."""
    wanted = sorted(set(digests))
    out: set[str] = set()
    for start in range(0, len(wanted), 500):
        batch = wanted[start : start + 500]
        rows = store._run(
            "SELECT digest FROM longtask_blobs WHERE digest IN ("
            + ",".join("?" for _ in batch)
            + ")",
            batch,
        )
        out |= {str(r[0]) for r in rows}
    return out


def referenced_blobs(store: Store, thread_id: str) -> set[str]:
    """Digests in ``longtask_blobs`` the thread refers to: its large values, and on a
    database that keeps artifact contents there (PostgreSQL), its artifacts' contents."""
    candidates: set[str] = set()
    for table in OWNED_TABLES:
        if table.binary or table.name in ("longtask_threads", "longtask_map_items"):
            candidates |= refs_in_rows(read_rows(store, table, thread_id))
    if store.artifact_dir is None:
        candidates |= {a.digest for a in store.artifacts(thread_id)}
    return existing_blobs(store, candidates)


def artifact_digests(store: Store, thread_id: str) -> set[str]:
    """The contents the thread's artifacts point to (files beside an SQLite database, rows
    of ``longtask_blobs`` on PostgreSQL), shared with any thread that stored the same
    bytes."""
    return {a.digest for a in store.artifacts(thread_id)}


def blobs_in_use(store: Store, *, but: Iterable[str] = ()) -> set[str]:
    """Digests of ``longtask_blobs`` that some thread other than those in ``but`` refers
    to: a blob not in this set may be deleted together with the threads in ``but``. Reads
    every thread's values: run it once per batch of deletions."""
    skip = set(but)
    threads = {str(r[0]) for r in store._run("SELECT thread_id FROM longtask_threads")}
    # checkpoints without a record: written through the raw graph, they are threads too
    threads |= {
        str(r[0]) for r in store._run("SELECT DISTINCT thread_id FROM longtask_cp_checkpoints")
    }
    used: set[str] = set()
    for thread_id in sorted(threads - skip):
        used |= referenced_blobs(store, thread_id)
    return used
