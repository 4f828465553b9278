"""Threads written by longtask 0.1 into LangGraph's own checkpoint tables, copied into
longtask's saver by ``longtask db upgrade`` (and on opening an SQLite file).

They are read with LangGraph's own saver for those tables and written with ours, checkpoint
by checkpoint (each after its parent, so each stores a delta against it) with its pending
writes. A thread is marked copied in ``longtask_legacy_copied`` in the transaction that
stores its last write, so an interrupted upgrade continues where it stopped; the old tables
are left as they were.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from longtask.store._order import chain_order

if TYPE_CHECKING:
    from langgraph.checkpoint.base import BaseCheckpointSaver

    from longtask.checkpointers._saver import LongTaskSaver
    from longtask.store import Store

#: a marker row: every legacy thread has been copied
_ALL = "*"


def copy_legacy(
    store: Store,
    old_saver: Callable[[], BaseCheckpointSaver[Any]],
    new: LongTaskSaver,
    legacy_table: str,
) -> int:
    """Copy every thread of the legacy tables not copied yet. Returns how many were."""
    if not store._table_exists(legacy_table):
        return 0
    store._run("CREATE TABLE IF NOT EXISTS longtask_legacy_copied (thread_id TEXT PRIMARY KEY)")
    if store._run("SELECT 1 FROM longtask_legacy_copied WHERE thread_id = ?", (_ALL,)):
        return 0
    threads = [
        r[0]
        for r in store._run(
            f"SELECT DISTINCT thread_id FROM {legacy_table} WHERE thread_id NOT IN "
            "(SELECT thread_id FROM longtask_legacy_copied) ORDER BY thread_id"
        )
    ]
    old = old_saver() if threads else None
    for thread_id in threads:
        assert old is not None
        _copy_thread(old, new, thread_id)
        store._run(
            "INSERT INTO longtask_legacy_copied (thread_id) VALUES (?) ON CONFLICT DO NOTHING",
            (thread_id,),
        )
    store._run("INSERT INTO longtask_legacy_copied (thread_id) VALUES (?)", (_ALL,))
    return len(threads)


def _copy_thread(old: BaseCheckpointSaver[Any], new: LongTaskSaver, thread_id: str) -> None:
    # Each after its parent (its delta is computed against it), in the thread's order (the
    # new rows' sequence numbers): see store._order.
    found = {
        (t.config["configurable"]["checkpoint_ns"], t.checkpoint["id"]): t
        for t in old.list({"configurable": {"thread_id": thread_id}})
    }
    tuples = [
        found[key]
        for key in chain_order(
            (ns, cid, (t.parent_config or {}).get("configurable", {}).get("checkpoint_id"))
            for (ns, cid), t in found.items()
        )
    ]
    stored: dict[tuple[str, str], dict[str, Any]] = {}
    for tup in tuples:
        ns = tup.config["configurable"]["checkpoint_ns"]
        parent_id = (tup.parent_config or {}).get("configurable", {}).get("checkpoint_id")
        parent_versions = stored.get((ns, parent_id or ""), {})
        versions = tup.checkpoint["channel_versions"]
        new_versions = {c: v for c, v in versions.items() if parent_versions.get(c) != v}
        config: dict[str, Any] = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
        if parent_id:
            config["configurable"]["checkpoint_id"] = parent_id
        saved = new.put(config, tup.checkpoint, tup.metadata, new_versions)  # type: ignore[arg-type]
        stored[(ns, tup.checkpoint["id"])] = dict(versions)
        by_task: dict[str, list[tuple[str, Any]]] = {}
        for task_id, channel, value in tup.pending_writes or ():
            by_task.setdefault(task_id, []).append((channel, value))
        for task_id, writes in by_task.items():
            new.put_writes(saved, writes, task_id)
