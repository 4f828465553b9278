"""What each step of a thread used, and threads listed with what they cost (mixed into Store).

A step's row in ``longtask_usage`` is charged in the same transaction as the thread's budget
(see ``LimitTables.charge``), so the steps' tokens, cost and tool calls add up to the budget's;
its running time and attempts follow its step events (a trigger, see migration 12). Reading
a thread's usage is one indexed read of one row per step, never the event log.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

#: how ``Store.list_threads`` may order threads: most recently updated first, most
#: expensive first, oldest first
THREAD_SORTS = ("updated", "cost", "age")
THREAD_ORDER = {
    "updated": "t.updated_at DESC",
    "cost": "COALESCE(b.cost, 0) DESC, COALESCE(b.tokens, 0) DESC, t.updated_at DESC",
    "age": "t.created_at ASC",
}


USAGE_KEYS = (
    "tokens",
    "cost",
    "tool_calls",
    "model_calls",
    "wall_time",
    "attempts",
    "started_at",
    "finished_at",
    "running_since",
)
_USAGE_COLS = "step, " + ", ".join(USAGE_KEYS)


#: adds a charge to a step's usage row (made if missing): (thread, step, tokens, cost,
#: tool_calls, model_calls, now)
USAGE_CHARGE_SQL = (
    "INSERT INTO longtask_usage (thread_id, step, tokens, cost, tool_calls, model_calls, "
    "updated_at) VALUES (?,?,?,?,?,?,?) ON CONFLICT (thread_id, step) DO UPDATE SET "
    "tokens = longtask_usage.tokens + excluded.tokens, "
    "cost = longtask_usage.cost + excluded.cost, "
    "tool_calls = longtask_usage.tool_calls + excluded.tool_calls, "
    "model_calls = longtask_usage.model_calls + excluded.model_calls, "
    "updated_at = excluded.updated_at"
)


def usage_statement(
    thread_id: str, step: str, tokens: float, cost: float, tool_calls: float, model_calls: int
) -> tuple[str, tuple[Any, ...]]:
    """The statement adding a charge to ``step``'s row (made if missing)."""
    return (
        USAGE_CHARGE_SQL,
        (thread_id, step, int(tokens), float(cost), int(tool_calls), model_calls, time.time()),
    )


def usage_rename_statements(
    thread_id: str, renames: dict[str, str]
) -> list[tuple[str, tuple[Any, ...]]]:
    """The statements that move the usage rows of renamed steps (old name -> new) to their
    new names, for the transaction of a migration: a renamed step keeps what it used,
    rather than being shown as an unknown one beside its new name. Through a name no step
    can have first, so renames that swap names never meet on the primary key."""
    moves = {old: new for old, new in renames.items() if old != new}
    park = "UPDATE longtask_usage SET step = ? WHERE thread_id = ? AND step = ?"
    return [(park, (f"~{old}", thread_id, old)) for old in moves] + [
        (park, (new, thread_id, f"~{old}")) for old, new in moves.items()
    ]


class UsageTables:
    """Mixed into Store."""

    def _run(self, sql: str, params: Any = (), binary: bool = False) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def _run_all(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> None:
        """Execute ``statements`` in one transaction."""
        raise NotImplementedError

    def usage(self, thread_id: str) -> list[tuple[Any, ...]]:
        """A row per step of the thread that used something or ran: the step's name, then
        USAGE_KEYS: ``tokens``, ``cost``, ``tool_calls``, ``model_calls``, ``wall_time``
        (seconds its finished runs took), ``attempts``, ``started_at``, ``finished_at`` and
        ``running_since`` (epoch seconds; ``running_since`` is set while a run's start is
        stored and its end is not). Plain tuples: status reads one per step of threads of
        thousands of steps."""
        return self._run(
            f"SELECT {_USAGE_COLS} FROM longtask_usage WHERE thread_id = ?",
            (thread_id,),
            binary=True,
        )

    def costs_of(self, thread_ids: Sequence[str]) -> dict[str, tuple[float, int, int]]:
        """(cost, tokens, tool calls) of each thread that charged anything: one query."""
        if not thread_ids:
            return {}
        marks = ",".join("?" for _ in thread_ids)
        rows = self._run(
            "SELECT thread_id, cost, tokens, tool_calls FROM longtask_budgets "
            f"WHERE thread_id IN ({marks})",
            tuple(thread_ids),
        )
        return {r[0]: (float(r[1]), int(r[2]), int(r[3])) for r in rows}
