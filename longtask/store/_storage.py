"""How many bytes a thread's checkpoints occupy, per table and per channel, in the shape
LangGraph's server answers ``GET /threads/{thread_id}/storage`` with: its checkpoints
(``longtask_cp_checkpoints``: the serialised checkpoint and its metadata), its channel
values (``longtask_cp_values``, one row per channel version) and its pending writes
(``longtask_cp_writes``), every namespace of the thread (its subtasks' too). Bytes are the
stored bytes of those columns (``octet_length`` on PostgreSQL; on SQLite the length of the
value as a blob), not the database's pages and indexes.

Also the thread's events (``longtask_events``: longtask's own record of what happened),
outside ``total_bytes``, which counts what LangGraph counts. The content-addressed blobs a
step result refers to are not counted: they are shared by every thread (and fork) that
stored the same content, so no thread owns their bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from longtask.store._store import Store


def _size(store: Store, column: str) -> str:
    if store.dialect.name == "postgresql":
        return f"COALESCE(octet_length({column}), 0)"
    return f"COALESCE(length(CAST({column} AS BLOB)), 0)"


def thread_storage(store: Store, thread_id: str) -> dict[str, Any]:
    """The thread's storage: ``total_bytes``, ``checkpoints``, ``channel_values`` (with
    ``by_channel``), ``pending_writes``, and ``events``."""
    size = _size(store, "state") + " + " + _size(store, "metadata")
    ((cp_count, cp_bytes),) = store._run(
        f"SELECT COUNT(*), COALESCE(SUM({size}), 0) FROM longtask_cp_checkpoints "
        "WHERE thread_id = ?",
        (thread_id,),
    )
    by_channel: dict[str, dict[str, int]] = {}
    for channel, versions, nbytes in store._run(
        f"SELECT channel, COUNT(*), COALESCE(SUM({_size(store, 'value')}), 0) "
        "FROM longtask_cp_values WHERE thread_id = ? GROUP BY channel ORDER BY channel",
        (thread_id,),
    ):
        by_channel[str(channel)] = {"versions": int(versions), "bytes": int(nbytes)}
    ((w_count, w_bytes),) = store._run(
        f"SELECT COUNT(*), COALESCE(SUM({_size(store, 'value')}), 0) FROM longtask_cp_writes "
        "WHERE thread_id = ?",
        (thread_id,),
    )
    ((e_count, e_bytes),) = store._run(
        f"SELECT COUNT(*), COALESCE(SUM({_size(store, 'data')}), 0) FROM longtask_events "
        "WHERE thread_id = ?",
        (thread_id,),
    )
    channel_bytes = sum(c["bytes"] for c in by_channel.values())
    return {
        "total_bytes": int(cp_bytes) + channel_bytes + int(w_bytes),
        "checkpoints": {"count": int(cp_count), "bytes": int(cp_bytes)},
        "channel_values": {
            "count": sum(c["versions"] for c in by_channel.values()),
            "bytes": channel_bytes,
            "by_channel": by_channel,
        },
        "pending_writes": {"count": int(w_count), "bytes": int(w_bytes)},
        "events": {"count": int(e_count), "bytes": int(e_bytes)},
    }
