"""Sub-task bookkeeping: one row per child thread a sub-task step started, by (parent
thread, step, item, attempt). The row is written before the child's thread record, so a
parent that enters its step again (a crash, a resume) finds its children and adopts them
instead of starting others; a child's status is its own thread's."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

#: a child that ended: the parent's step looks at it again only for its result
ENDED = frozenset({"completed", "failed", "cancelled"})


@dataclass(frozen=True)
class SubtaskRow:
    parent: str
    step: str
    index: int
    attempt: int
    child: str
    #: the child's inputs, JSON text
    inputs: str | None
    #: the child's thread status; None while its record is not yet stored
    status: str | None


_COLS = (
    "s.thread_id, s.step, s.idx, s.attempt, s.child_thread_id, s.inputs, t.status "
    "FROM longtask_subtasks s LEFT JOIN longtask_threads t ON t.thread_id = s.child_thread_id"
)


def _row(r: tuple[Any, ...]) -> SubtaskRow:
    return SubtaskRow(
        str(r[0]),
        str(r[1]),
        int(r[2]),
        int(r[3]),
        str(r[4]),
        r[5],
        str(r[6]) if r[6] is not None else None,
    )


class SubtaskTables:
    """Sub-task bookkeeping, mixed into Store."""

    _run: Any

    def subtask_add(self, rows: list[tuple[str, str, int, int, str, str | None]]) -> None:
        """Record children (parent, step, index, attempt, child id, inputs JSON) in one
        statement: the items of a map form are stored all or none. A row already stored
        (another process derived the same child) is kept."""
        if not rows:
            return
        now = time.time()
        values = ",".join("(?,?,?,?,?,?,?)" for _ in rows)
        params = [p for row in rows for p in (*row, now)]
        self._run(
            "INSERT INTO longtask_subtasks (thread_id, step, idx, attempt, "
            f"child_thread_id, inputs, created_at) VALUES {values} "
            "ON CONFLICT (thread_id, step, idx, attempt) DO NOTHING",
            tuple(params),
        )

    def subtask_rows(self, parent: str, step: str | None = None) -> list[SubtaskRow]:
        """Every child of ``parent`` (of its ``step``), by step, item and attempt."""
        where, params = "s.thread_id = ?", [parent]
        if step is not None:
            where += " AND s.step = ?"
            params.append(step)
        rows = self._run(
            f"SELECT {_COLS} WHERE {where} ORDER BY s.step, s.idx, s.attempt", tuple(params)
        )
        return [_row(r) for r in rows]

    def subtask_of(self, child: str) -> SubtaskRow | None:
        """The row that made ``child`` a sub-task (its parent), or None for a top-level
        thread."""
        rows = self._run(f"SELECT {_COLS} WHERE s.child_thread_id = ?", (child,))
        return _row(rows[0]) if rows else None

    def subtask_parents_waiting(
        self, limit: int, thread_id: str | None = None, *, workers: bool = False
    ) -> list[str]:
        """Threads waiting (``waiting_external``) with a sub-task step whose children have
        all ended (the latest attempt of each item), at most ``limit`` (only ``thread_id``;
        with ``workers`` only threads served by workers): where a lost continuation would
        be. Filtered here, not by the caller: a ``limit`` of parents whose children still
        run would hide every parent after them."""
        ended = ", ".join(f"'{s}'" for s in sorted(ENDED))
        where = (
            "t.status = 'waiting_external' AND NOT EXISTS (SELECT 1 FROM longtask_subtasks o "
            "LEFT JOIN longtask_threads c ON c.thread_id = o.child_thread_id "
            "WHERE o.thread_id = s.thread_id AND o.step = s.step "
            f"AND (c.status IS NULL OR c.status NOT IN ({ended})) "
            "AND NOT EXISTS (SELECT 1 FROM longtask_subtasks n WHERE n.thread_id = o.thread_id "
            "AND n.step = o.step AND n.idx = o.idx AND n.attempt > o.attempt))"
        )
        params: list[Any] = []
        if thread_id is not None:
            where += " AND t.thread_id = ?"
            params.append(thread_id)
        if workers:
            where += " AND t.mode = 'worker'"
        rows = self._run(
            "SELECT DISTINCT t.thread_id FROM longtask_threads t JOIN longtask_subtasks s "
            f"ON s.thread_id = t.thread_id WHERE {where} ORDER BY t.thread_id LIMIT ?",
            (*params, limit),
        )
        return [str(r[0]) for r in rows]
