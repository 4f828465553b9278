"""Retention: which rows a thread owns, deleting them in short transactions, and freeing
the content-addressed blobs (and SQLite artifact files) nothing refers to any more.

A thread owns every row keyed by its ``thread_id`` (``OWNED``). ``longtask_blobs`` is shared:
one digest serves every thread that stored the same content (and every fork). Who refers to
a blob is not indexed: a step result's reference (``{"$longtask": "blob", "digest": d}``,
``{"ref": d}`` in 0.1) is inside a serialised channel value (``_values``), so references are
found by reading the rows that can hold one — and only those whose bytes contain a
reference's key (``REF_MARKERS``, in msgpack and in JSON alike): the small reference rows,
not the large results.

A writer storing a digest that already exists touches its ``created_at`` (``put_blob``, the
saver's blob insert), so a blob is deleted only when no row read refers to it *and* it was
last stored before the sweep began, less ``BLOB_GRACE`` (a value is encoded a moment before
the row referring to it commits). A reference committed after the sweep read past it comes
with a fresh ``created_at``: its blob stays.
"""

from __future__ import annotations

import re
import time
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from longtask.store._owned import OWNED_TABLES, REF_MARKERS

if TYPE_CHECKING:
    from longtask.store._store import Store

#: every table with rows a thread owns (the one list, in longtask.store._owned), in the
#: order they are deleted: children first, the thread record last (a prune interrupted
#: half-way finds the thread again and finishes it)
OWNED = tuple(t.name for t in reversed(OWNED_TABLES))

#: what ``keep_last_checkpoint`` drops besides the older checkpoints (the saver's ``prune``):
#: the history. The thread record, its latest checkpoint, map results, artifacts, budget and
#: the effect ledger (so a fork or retry never repeats a completed effect) stay.
HISTORY = (
    "longtask_events",
    "longtask_attempts",
    "longtask_timers",
    "longtask_api_runs",
    "longtask_run_parts",
)

#: seconds before a sweep's start that a blob must have been stored (or stored again) to
#: be deleted: covers a value encoded a moment before the row referring to it commits
BLOB_GRACE = 3600.0

#: tables and columns that can hold a blob reference, with their key (for paging)
_REFERRERS = (
    ("longtask_cp_values", "value", ("thread_id", "checkpoint_ns", "channel", "version")),
    (
        "longtask_cp_writes",
        "value",
        ("thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx"),
    ),
    ("longtask_cp_checkpoints", "state", ("thread_id", "checkpoint_ns", "checkpoint_id")),
    ("longtask_threads", "inputs", ("thread_id",)),
)

_HEX = re.compile(rb"[0-9a-f]{40,}")
_PAGE = 1000


@dataclass(frozen=True)
class Candidate:
    """A thread that may be pruned: its id, status and last update (epoch seconds)."""

    thread_id: str
    status: str
    updated_at: float


def candidates(
    store: Store, cutoffs: dict[str, float], after: tuple[float, str] | None, limit: int
) -> list[Candidate]:
    """Threads whose status is a key of ``cutoffs`` and last updated before its cutoff, in
    (updated_at, thread_id) order after ``after``: one page."""
    if not cutoffs:
        return []
    conds = " OR ".join("(status = ? AND updated_at < ?)" for _ in cutoffs)
    params: list[Any] = [p for item in cutoffs.items() for p in item]
    sql = f"SELECT thread_id, status, updated_at FROM longtask_threads WHERE ({conds})"
    if after is not None:
        sql += " AND (updated_at > ? OR (updated_at = ? AND thread_id > ?))"
        params += [after[0], after[0], after[1]]
    sql += " ORDER BY updated_at, thread_id LIMIT ?"
    rows = store._run(sql, (*params, limit))
    return [Candidate(r[0], r[1], float(r[2])) for r in rows]


def count_rows(store: Store, thread_id: str, tables: Sequence[str] = OWNED) -> dict[str, int]:
    """Rows of each table the thread owns (every lookup is by an index on ``thread_id``)."""
    out = {}
    for table in tables:
        rows = store._run(f"SELECT count(*) FROM {table} WHERE thread_id = ?", (thread_id,))
        out[table] = int(rows[0][0])
    return out


def blob_refs(store: Store, thread_id: str) -> set[str]:
    """Digests of stored blobs this thread's rows refer to: step results' references, and
    its artifacts' content on PostgreSQL (artifacts of SQLite are files, see
    ``artifact_digests``)."""
    found: set[str] = set()
    for table, column, _ in _REFERRERS:
        rows = store._run(
            f"SELECT {column} FROM {table} WHERE thread_id = ? AND {_has_ref(store, column)}",
            (thread_id,),
        )
        for r in rows:
            found.update(_hex_runs(r[0]))
    if store.artifact_dir is None:
        found.update(artifact_digests(store, thread_id))
    if not found:
        return set()
    return {d for chunk in _chunks(sorted(found), 500) for d in _existing(store, chunk)}


def artifact_digests(store: Store, thread_id: str) -> set[str]:
    rows = store._run("SELECT digest FROM longtask_artifacts WHERE thread_id = ?", (thread_id,))
    return {str(r[0]) for r in rows}


def _has_ref(store: Store, column: str) -> str:
    """SQL: the column holds bytes that every blob reference contains (``REF_MARKERS``: a
    reference's key, in msgpack and in JSON alike)."""
    tests = []
    for marker in REF_MARKERS:
        word = marker.decode()
        if store.dialect.name == "postgresql":
            if column == "inputs":
                tests.append(f"position('{word}' in inputs) > 0")
            else:
                tests.append(f"position(convert_to('{word}', 'UTF8') in {column}) > 0")
        else:
            tests.append(f"instr({column}, CAST('{word}' AS BLOB)) > 0")
    return "(" + " OR ".join(tests) + ")"


def _hex_runs(value: Any) -> set[str]:
    if value is None:
        return set()
    data = value.encode() if isinstance(value, str) else bytes(value)
    return {m.decode() for m in _HEX.findall(data)}


def _existing(store: Store, digests: Sequence[str]) -> list[str]:
    marks = ",".join("?" for _ in digests)
    rows = store._run(f"SELECT digest FROM longtask_blobs WHERE digest IN ({marks})", digests)
    return [str(r[0]) for r in rows]


def _chunks(items: Sequence[str], size: int) -> Iterable[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def referenced(store: Store, digests: set[str], exclude: Collection[str] = ()) -> set[str]:
    """Which of ``digests`` some row (of a thread not in ``exclude``) still refers to. Reads
    every row that can hold a reference in pages of short statements (keyset paging, no
    transaction held): cost grows with the rows holding a ``ref``, not with the results'
    sizes."""
    found: set[str] = set()
    if not digests:
        return found
    for table, column, key in _REFERRERS:
        cols = ", ".join(key)
        after: tuple[Any, ...] | None = None
        while True:
            sql = f"SELECT {cols}, {column} FROM {table} WHERE {_has_ref(store, column)}"
            params: list[Any] = []
            if after is not None:
                marks = ",".join("?" for _ in key)
                sql += f" AND ({cols}) > ({marks})"
                params.extend(after)
            sql += f" ORDER BY {cols} LIMIT {_PAGE}"
            rows = store._run(sql, params)
            for r in rows:
                if r[0] in exclude:
                    continue
                for run in _hex_runs(r[-1]):
                    if run in digests:
                        found.add(run)
                    elif len(run) > 40:
                        found.update(d for d in digests if d in run)
            if len(rows) < _PAGE:
                break
            after = tuple(rows[-1][: len(key)])
    return found


def delete_blobs(store: Store, digests: Iterable[str], stored_before: float) -> tuple[int, int]:
    """Delete these blobs where no artifact refers to one (checked in the statement) and
    each was last stored before ``stored_before``. Returns (blobs, bytes) freed."""
    count = size = 0
    for chunk in _chunks(sorted(digests), 200):
        marks = ",".join("?" for _ in chunk)
        with store._transaction(serialise=False) as execute:
            rows = execute(
                f"DELETE FROM longtask_blobs WHERE digest IN ({marks}) AND created_at < ? "
                "AND NOT EXISTS (SELECT 1 FROM longtask_artifacts a "
                "WHERE a.digest = longtask_blobs.digest) RETURNING size",
                (*chunk, stored_before),
            )
        count += len(rows)
        size += sum(int(r[0]) for r in rows)
    return count, size


def delete_artifact_files(store: Store, digests: Iterable[str]) -> tuple[int, int]:
    """SQLite: remove the content files no artifact row refers to any more. Each check and
    removal runs inside a write transaction; ``put_artifact`` inserts its row and then makes
    sure the file is there, so content stored again meanwhile is written again."""
    if store.artifact_dir is None:
        return 0, 0
    count = size = 0
    for digest in sorted(digests):
        path = store._path(digest)
        with store._transaction(serialise=False) as execute:
            rows = execute("SELECT 1 FROM longtask_artifacts WHERE digest = ? LIMIT 1", (digest,))
            if rows or not path.exists():
                continue
            n = path.stat().st_size
            path.unlink(missing_ok=True)
        count += 1
        size += n
    return count, size


def delete_thread_rows(
    store: Store,
    cand: Candidate,
    cutoff: float,
    tables: Sequence[str],
) -> dict[str, int] | None:
    """In one transaction: check the thread is still ``cand.status``, last updated before
    ``cutoff``, with no command waiting and no live lease, then delete its rows of
    ``tables``. Returns the rows deleted per table, or None (the thread came alive: kept)."""
    with store._transaction(serialise=False) as execute:
        lock = " FOR UPDATE" if store.dialect.name == "postgresql" else ""
        rows = execute(
            f"SELECT status, updated_at FROM longtask_threads WHERE thread_id = ?{lock}",
            (cand.thread_id,),
        )
        if not rows or rows[0][0] != cand.status or float(rows[0][1]) >= cutoff:
            return None
        if execute("SELECT 1 FROM longtask_inbox WHERE thread_id = ? LIMIT 1", (cand.thread_id,)):
            return None
        # A lease taken since the cutoff is a run (a worker's) that may be on its way.
        held = execute(
            "SELECT 1 FROM longtask_leases WHERE thread_id = ? AND released_at IS NULL "
            "AND holder IS NOT NULL AND acquired_at >= ?",
            (cand.thread_id, cutoff),
        )
        if held:
            return None
        out = {}
        for table in tables:
            n = execute(f"SELECT count(*) FROM {table} WHERE thread_id = ?", (cand.thread_id,))
            out[table] = int(n[0][0])
            if out[table]:
                execute(f"DELETE FROM {table} WHERE thread_id = ?", (cand.thread_id,))
        return out


def now() -> float:
    return time.time()
