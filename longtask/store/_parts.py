"""A served run's stream parts (``longtask_run_parts``): what LangGraph yields while a
process advances a thread, kept for whoever streams the run, from any process.

Rows are a thread's in ``seq`` order. The process that carries out an API run writes a
start row and an end row naming the run (``run_id``), so the run's parts are the rows
between them, whichever process wrote those (serve itself, or a worker that knows nothing
of API runs). A part's body is the checkpointer's serialisation (``type``, ``body``) of
``(namespace, chunk)``. Parts are not history: rows older than ``KEEP`` seconds are
deleted (``parts_expire``), and prune drops them with the rest of a thread's history.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: seconds a run's stream parts are kept for clients that join it or resume it
KEEP = 3600.0
#: a part row's ``mode`` when it marks where a run starts or ends
START = "__start__"
END = "__end__"


@dataclass(frozen=True)
class PartRow:
    seq: int
    run_id: str | None
    ns: str
    mode: str
    type: str | None
    body: bytes | None


class PartTables:
    """The stream parts of served runs, mixed into Store."""

    _run: Any
    _transaction: Any

    def parts_put(
        self, thread_id: str, parts: Sequence[tuple[str, str, str | None, bytes | None]]
    ) -> None:
        """Store ``(ns, mode, type, body)`` parts of ``thread_id``, in order, in one write."""
        if not parts:
            return
        now = time.time()
        sql = (
            "INSERT INTO longtask_run_parts (thread_id, run_id, ns, mode, type, body, "
            "created_at) VALUES " + ",".join("(?, NULL, ?, ?, ?, ?, ?)" for _ in parts)
        )
        params: list[Any] = []
        for ns, mode, kind, body in parts:
            params += [thread_id, ns, mode, kind, body, now]
        self._run(sql, params)

    def parts_mark(self, thread_id: str, run_id: str, mode: str) -> None:
        """Mark where run ``run_id`` starts (``START``) or ends (``END``) among the parts."""
        self._run(
            "INSERT INTO longtask_run_parts (thread_id, run_id, ns, mode, created_at) "
            "VALUES (?, ?, '', ?, ?)",
            (thread_id, run_id, mode, time.time()),
        )

    def parts_start(self, thread_id: str, run_id: str) -> int | None:
        """The ``seq`` of the run's first start mark (None: not started, or expired)."""
        rows = self._run(
            "SELECT MIN(seq) FROM longtask_run_parts WHERE thread_id = ? AND run_id = ? "
            "AND mode = ?",
            (thread_id, run_id, START),
        )
        return int(rows[0][0]) if rows and rows[0][0] is not None else None

    def parts_after(self, thread_id: str, seq: int, limit: int = 500) -> list[PartRow]:
        """The thread's parts after ``seq``, in order."""
        rows = self._run(
            "SELECT seq, run_id, ns, mode, type, body FROM longtask_run_parts "
            "WHERE thread_id = ? AND seq > ? ORDER BY seq LIMIT ?",
            (thread_id, seq, limit),
        )
        return [
            PartRow(int(r[0]), r[1], r[2], r[3], r[4], bytes(r[5]) if r[5] is not None else None)
            for r in rows
        ]

    def parts_expire(self, now: float | None = None) -> int:
        """Delete parts older than ``KEEP``; how many."""
        cutoff = (now if now is not None else time.time()) - KEEP
        rows = self._run(
            "DELETE FROM longtask_run_parts WHERE created_at < ? RETURNING seq", (cutoff,)
        )
        return len(rows)
