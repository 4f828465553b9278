"""Threads listed with what they cost and their age (``longtask ls``): a read, served by
:class:`~longtask.runtime._reading.Reads` (reports and charts of a thread's cost are
operations: ``longtask.ops``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

from longtask.store import ThreadRecord


class ThreadCost(BaseModel):
    """A thread as ``longtask ls`` lists it: its record's summary, cost and age."""

    thread_id: str
    task_name: str
    task_version: str
    status: str
    created_at: datetime
    updated_at: datetime
    #: seconds since the thread was created
    age: float
    cost: float = 0.0
    tokens: int = 0
    tool_calls: int = 0
    record: dict[str, Any] = {}
    #: for a running thread, whether a process advances it now (None for the others)
    active: bool | None = None

    def to_json(self) -> dict[str, Any]:
        """The record's JSON (as ``ls --json`` printed it before) with cost and age."""
        return {
            **self.record,
            "cost": self.cost,
            "tokens": self.tokens,
            "tool_calls": self.tool_calls,
            "age": self.age,
            "active": self.active,
        }


def with_costs(
    records: Sequence[ThreadRecord], costs: Mapping[str, tuple[float, int, int]]
) -> list[ThreadCost]:
    """``records`` with their ``(cost, tokens, tool calls)`` from ``costs`` and their age."""
    now = datetime.now(UTC)
    out = []
    for r in records:
        cost, tokens, tool_calls = costs.get(r.thread_id, (0.0, 0, 0))
        out.append(
            ThreadCost(
                thread_id=r.thread_id,
                task_name=r.task_name,
                task_version=r.task_version,
                status=r.status,
                created_at=r.created_at,
                updated_at=r.updated_at,
                age=round(max((now - r.created_at).total_seconds(), 0.0), 3),
                cost=round(cost, 8),
                tokens=tokens,
                tool_calls=tool_calls,
                record=r.to_json(),
            )
        )
    return out
