"""The side-effect ledger: what happened to each effect, by idempotency key.

A row is written ``started`` (and committed) before the outside call, and ``succeeded`` or
``failed`` after it. A row left ``started`` means the process died during the call: its
outcome is unknown until a reconciler or a person says what happened.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from longtask.store._events import NewEvent

EFFECT_STATUSES = ("started", "succeeded", "failed")


@dataclass(frozen=True)
class Effect:
    key: str
    thread_id: str
    step: str
    name: str
    args_hash: str
    status: str
    result: Any
    error: str | None
    calls: int
    created_at: datetime
    updated_at: datetime

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "thread_id": self.thread_id,
            "step": self.step,
            "name": self.name,
            "args_hash": self.args_hash,
            "status": self.status,
            "result": self.result,
            "error": self.error,
            "calls": self.calls,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
        }


_COLS = (
    "key, thread_id, step, name, args_hash, status, result, error, calls, created_at, updated_at"
)


def _effect(r: tuple[Any, ...]) -> Effect:
    return Effect(
        key=r[0],
        thread_id=r[1],
        step=r[2],
        name=r[3],
        args_hash=r[4],
        status=r[5],
        result=json.loads(r[6]) if r[6] is not None else None,
        error=r[7],
        calls=int(r[8]),
        created_at=datetime.fromtimestamp(r[9], UTC),
        updated_at=datetime.fromtimestamp(r[10], UTC),
    )


class EffectTables:
    """Mixed into Store."""

    def _run(self, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def _run_with_event(
        self,
        sql: str,
        params: Sequence[Any],
        event: Callable[[list[tuple[Any, ...]]], NewEvent | None],
        reads_rows: bool = True,
    ) -> list[tuple[Any, ...]]:
        """``sql`` and the event ``event(rows)`` names (if any) in one transaction;
        ``reads_rows``: False for a statement that returns none (``event`` gets [])."""
        raise NotImplementedError

    def effect(self, key: str) -> Effect | None:
        rows = self._run(f"SELECT {_COLS} FROM longtask_effects WHERE key = ?", (key,))
        return _effect(rows[0]) if rows else None

    def effects(self, thread_id: str, limit: int = 1000) -> list[Effect]:
        rows = self._run(
            f"SELECT {_COLS} FROM longtask_effects WHERE thread_id = ? "
            "ORDER BY created_at, key LIMIT ?",
            (thread_id, limit),
        )
        return [_effect(r) for r in rows]

    def effect_begin(
        self,
        key: str,
        thread_id: str,
        step: str,
        name: str,
        args_hash: str,
        event: NewEvent | None = None,
    ) -> bool:
        """Mark ``key`` started if the ledger has no row for it yet: the first call of an
        effect, in one write with no lookup first. False if it has one (look it up with
        ``effect`` and decide). ``event`` is stored with the row, as by ``effect_start``."""
        now = time.time()
        rows = self._run_with_event(
            "INSERT INTO longtask_effects (key, thread_id, step, name, args_hash, status, "
            "calls, created_at, updated_at) VALUES (?,?,?,?,?,'started',1,?,?) "
            "ON CONFLICT (key) DO NOTHING RETURNING calls",
            (key, thread_id, step, name, args_hash, now, now),
            lambda rows: event if rows else None,
        )
        return bool(rows)

    def effect_start(
        self,
        key: str,
        thread_id: str,
        step: str,
        name: str,
        args_hash: str,
        event: Callable[[int], NewEvent] | None = None,
    ) -> int:
        """Mark ``key`` started before its call. Returns the number of this call (1 for the
        first), or 0 if it is already started or succeeded: then the caller must not call.
        ``event(number)`` is stored in the same transaction as the row: a crash right after
        the commit keeps the record of the start."""
        now = time.time()

        def started(rows: list[tuple[Any, ...]]) -> NewEvent | None:
            return event(int(rows[0][0])) if rows and event is not None else None

        rows = self._run_with_event(
            "INSERT INTO longtask_effects (key, thread_id, step, name, args_hash, status, "
            "calls, created_at, updated_at) VALUES (?,?,?,?,?,'started',1,?,?) "
            "ON CONFLICT (key) DO UPDATE SET status = 'started', error = NULL, "
            "calls = longtask_effects.calls + 1, updated_at = excluded.updated_at "
            "WHERE longtask_effects.status = 'failed' RETURNING calls",
            (key, thread_id, step, name, args_hash, now, now),
            started,
        )
        return int(rows[0][0]) if rows else 0

    def effect_finish(
        self,
        key: str,
        status: str,
        *,
        result: Any = None,
        error: str | None = None,
        event: NewEvent | None = None,
    ) -> None:
        """Record the outcome; ``event`` commits with it."""
        self._run_with_event(
            "UPDATE longtask_effects SET status = ?, result = ?, error = ?, updated_at = ? "
            "WHERE key = ?",
            (
                status,
                json.dumps(result) if status == "succeeded" else None,
                error,
                time.time(),
                key,
            ),
            lambda _rows: event,
            reads_rows=False,
        )

    def effect_forget(self, key: str, why: str = "outcome unknown; retried by a person") -> None:
        """Clear a started call so the effect may be called again (a person or a reconciler
        said it did not happen, it paused, or its own effects are in the ledger)."""
        self._run(
            "UPDATE longtask_effects SET status = 'failed', error = ?, updated_at = ? "
            "WHERE key = ? AND status = 'started'",
            (why, time.time(), key),
        )
