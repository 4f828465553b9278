"""The order of a thread's checkpoints, told by their parent links and never by a clock.

Every checkpoint row has a ``seq``: one more than the highest of its thread (all namespaces)
when it was stored, so "latest", ``history`` and ``before=`` follow the order checkpoints
were written in. Checkpoint ids are LangGraph's uuid6, made from the writer's clock: a
process whose clock is behind the one that wrote the thread makes ids that sort below the
thread's head, and a head taken as the greatest id started every super-step again from the
old head (finished steps ran again).

Rows stored without a ``seq`` (written before migration 17, or imported from an archive
that has none) are numbered here: each checkpoint after its parent, and otherwise in id
order (the order they had), which for a thread written by one clock is the id order itself.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence
from typing import Any

Execute = Callable[[str, Sequence[Any]], list[tuple[Any, ...]]]


def chain_order(rows: Iterable[tuple[str, str, str | None]]) -> list[tuple[str, str]]:
    """(namespace, id) of a thread's checkpoints, given as (namespace, id, parent id), in
    sequence order: a checkpoint comes after its parent (of its namespace); of those whose
    parent has come, the smallest id first. A parent that is not among the rows (pruned)
    counts as come."""
    rows = list(rows)
    present = {(ns, cid) for ns, cid, _ in rows}
    children: dict[tuple[str, str], list[tuple[str, str]]] = {}
    ready: list[tuple[str, str, str]] = []  # (id, ns, id): a heap by id
    for ns, cid, parent in rows:
        if parent is not None and (ns, parent) in present and parent != cid:
            children.setdefault((ns, parent), []).append((ns, cid))
        else:
            heapq.heappush(ready, (cid, ns, cid))
    out: list[tuple[str, str]] = []
    done: set[tuple[str, str]] = set()
    while ready:
        _, ns, cid = heapq.heappop(ready)
        out.append((ns, cid))
        done.add((ns, cid))
        for child in children.pop((ns, cid), ()):
            heapq.heappush(ready, (child[1], *child))
    # A loop of parent links (a damaged table) never becomes ready: kept, after the rest.
    out.extend(sorted((k for k in present if k not in done), key=lambda k: (k[1], k[0])))
    return out


def renumber(execute: Execute, thread_id: str) -> None:
    """Set the ``seq`` of every checkpoint of a thread from its parent links (see the
    module docstring), inside the caller's transaction."""
    rows = execute(
        "SELECT checkpoint_ns, checkpoint_id, parent_id FROM longtask_cp_checkpoints "
        "WHERE thread_id = ?",
        (thread_id,),
    )
    for seq, (ns, cid) in enumerate(chain_order((r[0], r[1], r[2]) for r in rows), 1):
        execute(
            "UPDATE longtask_cp_checkpoints SET seq = ? "
            "WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?",
            (seq, thread_id, ns, cid),
        )


def number_stored(execute: Execute, postgres: bool) -> None:
    """Migration 17: number the checkpoints already stored. In id order first, in one
    statement (right for every thread one clock wrote); then the threads with a checkpoint
    whose id sorts below its parent's (written by a clock behind) again from their links."""
    ranked = (
        "SELECT thread_id, checkpoint_ns, checkpoint_id, "
        "ROW_NUMBER() OVER (PARTITION BY thread_id ORDER BY checkpoint_id) AS n "
        "FROM longtask_cp_checkpoints"
    )
    if postgres:
        execute(
            f"UPDATE longtask_cp_checkpoints c SET seq = r.n FROM ({ranked}) r "
            "WHERE c.thread_id = r.thread_id AND c.checkpoint_ns = r.checkpoint_ns "
            "AND c.checkpoint_id = r.checkpoint_id",
            (),
        )
    else:
        # UPDATE ... FROM needs SQLite 3.33; a keyed temporary table works on any with
        # window functions (3.25)
        execute(
            "CREATE TEMP TABLE longtask_seq_rank (thread_id TEXT, checkpoint_ns TEXT, "
            "checkpoint_id TEXT, n INTEGER, "
            "PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id))",
            (),
        )
        execute(f"INSERT INTO longtask_seq_rank {ranked}", ())
        execute(
            "UPDATE longtask_cp_checkpoints SET seq = (SELECT n FROM longtask_seq_rank r "
            "WHERE r.thread_id = longtask_cp_checkpoints.thread_id "
            "AND r.checkpoint_ns = longtask_cp_checkpoints.checkpoint_ns "
            "AND r.checkpoint_id = longtask_cp_checkpoints.checkpoint_id)",
            (),
        )
        execute("DROP TABLE longtask_seq_rank", ())
    skewed = execute(
        "SELECT DISTINCT c.thread_id FROM longtask_cp_checkpoints c "
        "JOIN longtask_cp_checkpoints p ON p.thread_id = c.thread_id "
        "AND p.checkpoint_ns = c.checkpoint_ns AND p.checkpoint_id = c.parent_id "
        "WHERE c.checkpoint_id < p.checkpoint_id",
        (),
    )
    for (thread_id,) in skewed:
        renumber(execute, str(thread_id))
