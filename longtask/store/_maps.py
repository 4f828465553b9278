"""Map-step bookkeeping: one row per map run and per item. Item results live here, once each."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class MapItem:
    index: int
    status: str  # "ok" or "error"
    result: str | None  # JSON text
    model: str | None  # "module:Qualname" when the result was a pydantic model
    error: dict[str, Any] | None


@dataclass(frozen=True)
class MapProgress:
    total: int
    done: int
    failed: list[dict[str, Any]]


class MapTables:
    """Map-step bookkeeping, mixed into Store: item results live here, once each."""

    _run: Any

    def map_begin(self, thread_id: str, step: str, digest: str, total: int) -> None:
        self._run(
            "INSERT INTO longtask_maps (thread_id, step, digest, total, created_at) "
            "VALUES (?,?,?,?,?) ON CONFLICT (thread_id, step, digest) DO NOTHING",
            (thread_id, step, digest, total, time.time()),
        )

    def map_item(self, thread_id: str, step: str, digest: str, index: int) -> MapItem | None:
        rows = self._run(
            "SELECT idx, status, result, model, error FROM longtask_map_items "
            "WHERE thread_id = ? AND step = ? AND digest = ? AND idx = ?",
            (thread_id, step, digest, index),
        )
        return _item(rows[0]) if rows else None

    def map_items(self, thread_id: str, step: str, digest: str) -> list[MapItem]:
        rows = self._run(
            "SELECT idx, status, result, model, error FROM longtask_map_items "
            "WHERE thread_id = ? AND step = ? AND digest = ? ORDER BY idx",
            (thread_id, step, digest),
        )
        return [_item(r) for r in rows]

    def map_put(
        self,
        thread_id: str,
        step: str,
        digest: str,
        index: int,
        *,
        result: str | None = None,
        model: str | None = None,
        error: dict[str, Any] | None = None,
    ) -> None:
        """Record an item's outcome. A success is final; an error may be replaced by a
        later success (the item was retried after a resume)."""
        self._run(
            "INSERT INTO longtask_map_items (thread_id, step, digest, idx, status, result, "
            "model, error, updated_at) VALUES (?,?,?,?,?,?,?,?,?) "
            "ON CONFLICT (thread_id, step, digest, idx) DO UPDATE SET status = excluded.status, "
            "result = excluded.result, model = excluded.model, error = excluded.error, "
            "updated_at = excluded.updated_at WHERE longtask_map_items.status <> 'ok'",
            (
                thread_id,
                step,
                digest,
                index,
                "error" if error is not None else "ok",
                result,
                model,
                json.dumps(error) if error is not None else None,
                time.time(),
            ),
        )

    def map_progress(self, thread_id: str, step: str, failed_limit: int = 20) -> MapProgress | None:
        """Items done and failed of the latest map run of ``step`` (bounded reads)."""
        rows = self._run(
            "SELECT digest, total FROM longtask_maps WHERE thread_id = ? AND step = ? "
            "ORDER BY created_at DESC LIMIT 1",
            (thread_id, step),
        )
        if not rows:
            return None
        digest, total = rows[0]
        counts = self._run(
            "SELECT status, count(*) FROM longtask_map_items WHERE thread_id = ? AND step = ? "
            "AND digest = ? GROUP BY status",
            (thread_id, step, digest),
        )
        by_status = {r[0]: int(r[1]) for r in counts}
        failed = self._run(
            "SELECT idx, error FROM longtask_map_items WHERE thread_id = ? AND step = ? "
            "AND digest = ? AND status = 'error' ORDER BY idx LIMIT ?",
            (thread_id, step, digest, failed_limit),
        )
        return MapProgress(
            total=int(total),
            done=by_status.get("ok", 0),
            failed=[{"index": int(r[0]), **json.loads(r[1])} for r in failed],
        )


def _item(r: tuple[Any, ...]) -> MapItem:
    return MapItem(
        index=int(r[0]),
        status=r[1],
        result=r[2],
        model=r[3],
        error=json.loads(r[4]) if r[4] else None,
    )
