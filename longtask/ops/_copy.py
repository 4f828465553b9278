"""Copying a thread in its own database: a new thread with the same state and history
(LangGraph's ``threads.copy``), made from the rows ``export``/``import --as`` move.

The copy is a longtask thread of its own: its checkpoints, events, effect ledger, step
attempts, budget, artifacts (the same contents, referred to again) and map results are the
source's, rewritten for the new id (``ops._renaming``), in one transaction. It is owned by
whoever copied it, and its log ends with a ``manual.copy`` event naming the source.

What a copy does not take: the source's API runs (a copy has none, as on LangGraph's
server), commands waiting in its inbox (they were sent to the source), its lease and its
notifications (per thread and database: the copy's next advance takes a lease of its own).

Effects: each effect the source performed is in the copy's ledger under the key the copy
derives for it, so a step the copy runs again returns the recorded result and the effect
is not performed a second time; an effect whose outcome the source never learned (a crash
in the middle of it) is as uncertain in the copy, and handled as the source would handle
it. A paused source's copy waits at the same pause, with the same request: answering one
thread's pause does not answer the other's, and a signal sent to one does not reach the
other. A wait's deadline is the source's (the timer is copied).

Refused, with nothing written: a thread being advanced (copy it when its run has ended), a
thread with sub-tasks still running (they report to the source alone), and what the
renaming cannot rewrite safely (``ops._renaming``).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import TYPE_CHECKING, Any

from longtask.errors import MoveRefused, ThreadBusy, ThreadExists, ThreadNotFound
from longtask.ops._move import Rows, _write_thread
from longtask.runtime._threadid import check_thread_id
from longtask.store import FINAL_STATUSES
from longtask.store._owned import carried_tables, read_rows

if TYPE_CHECKING:
    from longtask.checkpointers import Database

#: tables of the source a copy does not take (see the module docstring)
LEFT_BEHIND = ("longtask_api_runs", "longtask_inbox")


def copy_thread(
    db: Database,
    source: str,
    new_id: str,
    *,
    owner: str | None,
    by: str,
    metadata: dict[str, Any] | None = None,
) -> str:
    """Copy thread ``source`` to a new thread ``new_id`` owned by ``owner`` (``by`` is
    recorded as who copied it; ``metadata``: the copy's API metadata, the source's if None).
    Returns ``new_id``. Raises ThreadNotFound, ThreadBusy, ThreadExists or MoveRefused,
    writing nothing."""
    from longtask.ops._renaming import rename

    check_thread_id(new_id)
    store = db.store
    rec = store.get_thread(source)
    if rec is None:
        raise ThreadNotFound(source, db.url.redacted)
    with db.lock(source):
        held = store.lease_holder(source)
        # As for an export: a worker's lease, or a run in progress, means rows being written.
        if (held is not None and not held[0].startswith("process:")) or rec.status == "running":
            raise ThreadBusy(source)
        columns = {t.name: list(t.columns) for t in carried_tables()}
        tables: dict[str, Rows] = {
            t.name: [] if t.name in LEFT_BEHIND else read_rows(store, t, source)
            for t in carried_tables()
        }
    _refuse_running_subtasks(db, source, tables, columns)
    if store.get_thread(new_id) is not None or store.api_thread(new_id) is not None:
        raise ThreadExists(new_id)
    tables = rename(db, tables, columns, source, new_id, copying=True)
    now = time.time()
    (record,) = tables["longtask_threads"]
    cols = columns["longtask_threads"]
    fresh = dict(zip(cols, record, strict=True))
    fresh.update(owner=owner, created_at=now, updated_at=now)
    tables["longtask_threads"] = [tuple(fresh[c] for c in cols)]
    found = store.api_thread(source)
    shown = dict(found[0]) if found else {}
    tables["longtask_api_threads"] = [
        (new_id, json.dumps(shown if metadata is None else metadata), now, owner)
    ]
    tables["longtask_events"] = [
        *tables["longtask_events"],
        (
            new_id,
            "manual.copy",
            None,
            None,
            None,
            json.dumps({"by": by, "from": source}),
            now,
            f"{new_id}/manual.copy/{uuid.uuid4().hex}",
        ),
    ]
    # The blobs and artifact contents are in this database already, under their digests.
    _write_thread(db, new_id, tables, columns, {}, lambda: ThreadExists(new_id))
    return new_id


def _refuse_running_subtasks(
    db: Database, source: str, tables: dict[str, Rows], columns: dict[str, list[str]]
) -> None:
    i = columns["longtask_subtasks"].index("child_thread_id")
    for row in tables["longtask_subtasks"]:
        child = db.store.get_thread(str(row[i]))
        if child is not None and child.status not in FINAL_STATUSES:
            raise MoveRefused(
                f"cannot copy thread {source!r}: its sub-task {child.thread_id!r} is "
                f"{child.status}, and a sub-task reports to one parent. Nothing was copied; "
                f"copy it when its sub-tasks have ended (`longtask status {source}`)"
            )


class Copies:
    """Copying threads in one database: ``copy_thread`` on ``db``."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def copy_thread(
        self,
        thread_id: str,
        new_id: str | None = None,
        *,
        owner: str | None = None,
        by: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> str:
        """Copy the thread in this database to a new thread (``new_id``, or a new UUID)
        with the same state and history, owned by ``owner``; returns its id. See
        :func:`copy_thread` for what a copy takes and what it refuses."""
        from longtask.runtime._who import whoami

        who = by or whoami()
        return copy_thread(
            self.db,
            thread_id,
            new_id or str(uuid.uuid4()),
            owner=owner if owner is not None else who,
            by=who,
            metadata=metadata,
        )
