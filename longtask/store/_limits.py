"""Durable attempt counts, budgets and deadlines, and cancel requests (mixed into Store).

Attempt counts live here rather than in process memory so that a crash between two attempts
does not hand a failing step a fresh set of retries. A row is written only when an attempt
fails, so steps that succeed first time cost nothing.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from longtask.store._usage import usage_statement

#: the ``item`` of a step that is not a map item (NULL cannot be part of a primary key)
NO_ITEM = -1


@dataclass(frozen=True)
class Attempts:
    """Attempts of one step (or map item) that failed, durably."""

    failed: int
    #: failed attempts before the current retry window (a manual retry opens a new one)
    window_start: int
    #: when the next attempt may start (epoch seconds), if the step was waiting to retry
    retry_at: float | None


BUDGET_LIMITS = ("tokens", "cost", "tool_calls", "wall_time")


@dataclass(frozen=True)
class BudgetState:
    """A thread's budget: limits (None = unlimited) and what it has used so far."""

    thread_id: str
    limits: dict[str, float | None]
    used: dict[str, float]
    #: epoch seconds after which no step may start (the task's deadline), if any
    deadline_at: float | None

    def plus(self, used: dict[str, float]) -> BudgetState:
        """The same budget with ``used`` added to what it has used (charges not stored yet)."""
        if not any(used.values()):
            return self
        total = {n: self.used[n] + used.get(n, 0.0) for n in BUDGET_LIMITS}
        return BudgetState(self.thread_id, self.limits, total, self.deadline_at)

    def exceeded(self, now: float) -> list[str]:
        """Which limits are used up, as ``"tokens 1200 of 1000"`` (empty if none)."""
        out = []
        for name in BUDGET_LIMITS:
            limit = self.limits.get(name)
            if limit is not None and self.used[name] >= limit:
                out.append(f"{name} {_num(self.used[name])} of {_num(limit)}")
        if self.deadline_at is not None and now >= self.deadline_at:
            out.append("deadline passed")
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "thread_id": self.thread_id,
            "limits": self.limits,
            "used": self.used,
            "deadline_at": self.deadline_at,
        }


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.4g}"


_BUDGET_COLS = (
    "thread_id, tokens_limit, cost_limit, tool_calls_limit, wall_time_limit, deadline_at, "
    "tokens, cost, tool_calls, wall_time"
)


#: adds a charge to a thread's budget row (made without limits if missing): (thread, tokens,
#: cost, tool_calls, wall_time, now)
BUDGET_CHARGE_SQL = (
    "INSERT INTO longtask_budgets (thread_id, tokens, cost, tool_calls, wall_time, "
    "updated_at) VALUES (?,?,?,?,?,?) ON CONFLICT (thread_id) DO UPDATE SET "
    "tokens = longtask_budgets.tokens + excluded.tokens, "
    "cost = longtask_budgets.cost + excluded.cost, "
    "tool_calls = longtask_budgets.tool_calls + excluded.tool_calls, "
    "wall_time = longtask_budgets.wall_time + excluded.wall_time, "
    "updated_at = excluded.updated_at"
)


def attempt_statement(
    thread_id: str, step: str, item: int, record: Attempts
) -> tuple[str, tuple[Any, ...]]:
    """The statement recording a step's (or map item's) failed attempts."""
    return (
        "INSERT INTO longtask_attempts (thread_id, step, item, failed, window_start, "
        "retry_at, updated_at) VALUES (?,?,?,?,?,?,?) ON CONFLICT (thread_id, step, item) "
        "DO UPDATE SET failed = excluded.failed, window_start = excluded.window_start, "
        "retry_at = excluded.retry_at, updated_at = excluded.updated_at",
        (
            thread_id,
            step,
            item,
            record.failed,
            record.window_start,
            record.retry_at,
            time.time(),
        ),
    )


class LimitTables:
    """Mixed into Store."""

    def _run(self, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def _run_all(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> None:
        raise NotImplementedError

    # -- attempts ----------------------------------------------------------------------------

    def attempts(self, thread_id: str) -> dict[tuple[str, int], Attempts]:
        rows = self._run(
            "SELECT step, item, failed, window_start, retry_at FROM longtask_attempts "
            "WHERE thread_id = ?",
            (thread_id,),
        )
        return {
            (r[0], int(r[1])): Attempts(int(r[2]), int(r[3]), r[4] if r[4] is None else float(r[4]))
            for r in rows
        }

    def attempt_failed(self, thread_id: str, step: str, item: int, record: Attempts) -> None:
        self._run(*attempt_statement(thread_id, step, item, record))

    def attempts_clear(self, thread_id: str, step: str, item: int) -> None:
        self._run(
            "DELETE FROM longtask_attempts WHERE thread_id = ? AND step = ? AND item = ?",
            (thread_id, step, item),
        )

    # -- budgets -----------------------------------------------------------------------------

    def budget_init(
        self, thread_id: str, limits: dict[str, float | None], deadline_at: float | None
    ) -> None:
        self._run(
            "INSERT INTO longtask_budgets (thread_id, tokens_limit, cost_limit, "
            "tool_calls_limit, wall_time_limit, deadline_at, updated_at) VALUES (?,?,?,?,?,?,?) "
            "ON CONFLICT (thread_id) DO NOTHING",
            (thread_id, *(limits.get(n) for n in BUDGET_LIMITS), deadline_at, time.time()),
        )

    def budget(self, thread_id: str) -> BudgetState | None:
        rows = self._run(
            f"SELECT {_BUDGET_COLS} FROM longtask_budgets WHERE thread_id = ?", (thread_id,)
        )
        if not rows:
            return None
        r = rows[0]
        return BudgetState(
            thread_id=r[0],
            limits={
                n: (None if v is None else float(v))
                for n, v in zip(BUDGET_LIMITS, r[1:5], strict=True)
            },
            deadline_at=None if r[5] is None else float(r[5]),
            used={n: float(v) for n, v in zip(BUDGET_LIMITS, r[6:10], strict=True)},
        )

    def charge(
        self,
        thread_id: str,
        *,
        step: str | None = None,
        model_calls: int = 0,
        ancestors: Sequence[str] | None = None,
        **used: float,
    ) -> None:
        """Add to the thread's usage counters (a row without limits is created if needed),
        and, with ``step``, to that step's (in the same transaction: the steps' usage adds up
        to the thread's). ``ancestors``: the thread's, when the caller knows them (None:
        looked up)."""
        values = [float(used.get(n, 0) or 0) for n in BUDGET_LIMITS]
        now = time.time()
        # A sub-task's usage is its ancestors' too (their budgets bound the whole tree), in
        # the same transaction.
        owners = (thread_id, *(self.ancestors(thread_id) if ancestors is None else ancestors))
        budgets = [(BUDGET_CHARGE_SQL, (who, *values, now)) for who in owners]
        if step is None:
            self._run_all(budgets)
            return
        tokens, cost, tool_calls, _ = values
        self._run_all(
            [*budgets, usage_statement(thread_id, step, tokens, cost, tool_calls, model_calls)]
        )

    def ancestors(self, thread_id: str) -> list[str]:
        """The threads whose sub-task ``thread_id`` is, its parent first (none for a
        top-level thread)."""
        rows = self._run(
            "WITH RECURSIVE up(id, depth) AS ("
            "SELECT thread_id, 1 FROM longtask_subtasks WHERE child_thread_id = ? "
            "UNION ALL SELECT s.thread_id, up.depth + 1 FROM longtask_subtasks s "
            "JOIN up ON s.child_thread_id = up.id WHERE up.depth < 100"
            ") SELECT id FROM up ORDER BY depth",
            (thread_id,),
        )
        return [str(r[0]) for r in rows]

    def budget_raise(
        self, thread_id: str, limits: dict[str, float], deadline_by: float | None
    ) -> None:
        """Raise limits by the given amounts (a limit that was unlimited stays unlimited)
        and push the deadline back by ``deadline_by`` seconds."""
        sets = [f"{n}_limit = {n}_limit + ?" for n in BUDGET_LIMITS if n in limits]
        params: list[Any] = [limits[n] for n in BUDGET_LIMITS if n in limits]
        if deadline_by is not None:
            sets.append("deadline_at = deadline_at + ?")
            params.append(deadline_by)
        if not sets:
            return
        self._run(
            f"UPDATE longtask_budgets SET {', '.join(sets)}, updated_at = ? WHERE thread_id = ?",
            (*params, time.time(), thread_id),
        )

    # -- cancel ------------------------------------------------------------------------------

    def request_cancel(self, thread_id: str, request: dict[str, Any]) -> bool:
        """Record a cancel request once (a later request keeps the first one's reason),
        unless the thread has completed or been cancelled: returns False then, changing
        nothing. One statement on the thread's row, so that against
        :meth:`settle_unless_cancelled` exactly one of the two wins."""
        rows = self._run(
            "UPDATE longtask_threads SET cancel = COALESCE(cancel, ?) WHERE thread_id = ? "
            "AND status NOT IN ('completed', 'cancelled') RETURNING thread_id",
            (json.dumps(request, default=str), thread_id),
        )
        return bool(rows)

    def settle_unless_cancelled(
        self, thread_id: str, status: str, *, waiting: list[dict[str, Any]] | None = None
    ) -> bool:
        """Record the end of a run (``completed``, or paused for ``waiting``) unless a cancel
        request is stored; returns False then (the cancel won), changing nothing."""
        return bool(self._run(*settle_statement(thread_id, status, waiting)))

    def cancel_request(self, thread_id: str) -> dict[str, Any] | None:
        rows = self._run("SELECT cancel FROM longtask_threads WHERE thread_id = ?", (thread_id,))
        if not rows or rows[0][0] is None:
            return None
        value: dict[str, Any] = json.loads(rows[0][0])
        return value


def settle_statement(
    thread_id: str, status: str, waiting: list[dict[str, Any]] | None = None
) -> tuple[str, tuple[Any, ...]]:
    """The statement that ends a run unless a cancel request is stored (it returns the
    thread's id when it changed the record)."""
    return (
        "UPDATE longtask_threads SET status = ?, error = NULL, waiting = ?, updated_at = ? "
        "WHERE thread_id = ? AND cancel IS NULL RETURNING thread_id",
        (status, json.dumps(waiting, default=str) if waiting else None, time.time(), thread_id),
    )
