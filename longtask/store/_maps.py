"""Map-step bookkeeping: one row per map run (with its items) and one per item outcome.

Item results live here, once each; a finished map step's checkpointed result is only a
reference that ``map_result`` resolves.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class MapProgress:
    total: int
    done: int
    failed: list[dict[str, Any]]


class MapTables:
    """Map-step bookkeeping, mixed into Store: item results live here, once each."""

    _run: Any

    def map_begin(self, thread_id: str, step: str, digest: str, items: str, total: int) -> None:
        """Record a map run and its items (JSON text of the list), once: a run recorded
        before the items were kept here (longtask 0.1) gets them now."""
        self._run(
            "INSERT INTO longtask_maps (thread_id, step, digest, total, created_at, items) "
            "VALUES (?,?,?,?,?,?) ON CONFLICT (thread_id, step, digest) DO UPDATE SET "
            "items = excluded.items, total = excluded.total WHERE longtask_maps.items IS NULL",
            (thread_id, step, digest, total, time.time(), items),
        )

    def map_run(self, thread_id: str, step: str, digest: str) -> str | None:
        """The items (JSON text) of a recorded map run, or None if it has none yet."""
        rows = self._run(
            "SELECT items FROM longtask_maps WHERE thread_id = ? AND step = ? AND digest = ?",
            (thread_id, step, digest),
        )
        return str(rows[0][0]) if rows and rows[0][0] is not None else None

    def map_outcomes(
        self, thread_id: str, step: str, digest: str
    ) -> dict[int, tuple[str, dict[str, Any] | None]]:
        """Status ("ok" or "error") and error of every item of a map run with an outcome."""
        rows = self._run(
            "SELECT idx, status, error FROM longtask_map_items "
            "WHERE thread_id = ? AND step = ? AND digest = ?",
            (thread_id, step, digest),
        )
        return {int(r[0]): (str(r[1]), json.loads(r[2]) if r[2] else None) for r in rows}

    def map_result(self, thread_id: str, step: str, digest: str, collect: bool) -> bytes:
        """A finished map step's result as JSON, assembled from its items' stored results
        (the checkpoint holds only a reference to them): the results in item order (failed
        items left out), and with ``collect`` ``{"results": [...], "errors": [...]}``."""
        where = "WHERE thread_id = ? AND step = ? AND digest = ?"
        key = (thread_id, step, digest)
        # Item results are stored as JSON text: join them instead of parsing each one. (Rows
        # come faster than one string_agg of them on PostgreSQL.)
        rows = self._run(
            f"SELECT result FROM longtask_map_items {where} AND status = 'ok' ORDER BY idx", key
        )
        joined = ",".join(r[0] or "null" for r in rows)
        results = "[" + (joined or "") + "]"
        if not collect:
            return results.encode()
        failed = self._run(
            f"SELECT idx, error FROM longtask_map_items {where} AND status <> 'ok' ORDER BY idx",
            key,
        )
        errors: list[dict[str, Any]] = []
        if failed:
            items = json.loads(self.map_run(thread_id, step, digest) or "[]")
            errors = [
                {
                    "index": int(r[0]),
                    "item": items[int(r[0])] if int(r[0]) < len(items) else None,
                    **json.loads(r[1] or "{}"),
                }
                for r in failed
            ]
        return ('{"results":' + results + ',"errors":' + json.dumps(errors) + "}").encode()

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
