"""An event to append (``NewEvent``) and its data as JSON that PostgreSQL stores.

Below ``_store`` so the tables mixed into ``Store`` (``_effects``) and the event writer can
name the event type without importing the store that imports them.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Charge:
    """What an event's work used, charged to the budgets of ``owners`` (the event's thread,
    then its sub-task ancestors) and, with ``step``, to that step's usage row of the first
    owner: by the transaction that stores the event, so that recording a model call and
    paying for it are one write (see ``charge_rows``)."""

    owners: tuple[str, ...]
    step: str | None = None
    tokens: float = 0
    cost: float = 0.0
    tool_calls: float = 0
    model_calls: int = 0
    wall_time: float = 0.0

    def rest(self) -> tuple[float, int, float]:
        """tool_calls, model_calls, wall_time (the tail of a charge row)."""
        return (self.tool_calls, self.model_calls, self.wall_time)


@dataclass(frozen=True)
class NewEvent:
    """An event to append; ``key`` makes the insert idempotent (see ``append_event``)."""

    thread_id: str
    kind: str
    key: str
    stage: str | None = None
    step: str | None = None
    attempt: int | None = None
    data: dict[str, Any] | None = None
    ts: float = field(default_factory=time.time)
    #: what the work it tells of used, charged in the transaction that stores it
    charge: Charge | None = field(default=None, compare=False)

    def params(self) -> tuple[Any, ...]:
        return (
            self.thread_id,
            self.kind,
            self.stage,
            self.step,
            self.attempt,
            event_json(self.data),
            self.ts,
            f"{self.thread_id}/{self.key}",
        )


# \u0000 and surrogates as json.dumps writes them (an astral character's valid pair, or a
# backslash written before "u0000", matches too: it only costs a cleaning pass)
_UNSTORABLE = re.compile(r"\\u0000|\\ud[89a-f]")


def event_json(data: dict[str, Any] | None) -> str:
    """An event's data as JSON text that PostgreSQL's ``jsonb`` accepts: text from a failing
    step (its error message, a tool's output) may hold a NUL character or a lone surrogate,
    which jsonb refuses; stored as is, the event would fail the transaction of the
    checkpoint it commits with. They become U+FFFD."""
    text = json.dumps(data or {}, default=str)
    if "\\u" in text and _UNSTORABLE.search(text):
        text = json.dumps(_storable(data or {}), default=lambda o: _storable(str(o)))
    return text


def _storable(value: Any) -> Any:
    if isinstance(value, str):
        if "\x00" in value:
            value = value.replace("\x00", "\ufffd")
        # a lone surrogate cannot be encoded; a valid pair survives the round trip
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, dict):
        return {_storable(str(k)): _storable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_storable(v) for v in value]
    return value


#: budget rows: (thread, tokens, cost, tool_calls, wall_time)
BudgetRow = tuple[str, float, float, float, float]
#: usage rows: (thread, step, tokens, cost, tool_calls, model_calls)
UsageRow = tuple[str, str, float, float, float, int]


def charge_rows(events: Sequence[NewEvent]) -> tuple[list[BudgetRow], list[UsageRow]]:
    """The charges ``events`` carry, summed per budget and per step's usage row: one row
    each, as one upsert may not touch a row twice."""
    budgets: dict[str, list[float]] = {}
    usage: dict[tuple[str, str], list[float]] = {}
    for e in events:
        c = e.charge
        if c is None:
            continue
        for owner in c.owners:
            b = budgets.setdefault(owner, [0.0, 0.0, 0.0, 0.0])
            b[0] += c.tokens
            b[1] += c.cost
            b[2] += c.tool_calls
            b[3] += c.wall_time
        if c.step is not None and c.owners:
            u = usage.setdefault((c.owners[0], c.step), [0.0, 0.0, 0.0, 0.0])
            u[0] += c.tokens
            u[1] += c.cost
            u[2] += c.tool_calls
            u[3] += c.model_calls
    return (
        [(who, b[0], b[1], b[2], b[3]) for who, b in budgets.items()],
        [(t, step, u[0], u[1], u[2], int(u[3])) for (t, step), u in usage.items()],
    )
