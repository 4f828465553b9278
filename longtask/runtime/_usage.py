"""What a thread and each of its steps used: tokens, cost, tool and model calls, time, and
what is left of the budget (``ThreadStatus.usage``, ``StepState.usage``).

Read from two small tables (the budget row and one usage row per step), never from the
event log, so ``status`` stays as cheap on a thread of thousands of steps as on a new one.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel
from typing_extensions import TypedDict  # pydantic needs it on Python < 3.12

from longtask.store import BUDGET_LIMITS, BudgetState, ThreadRecord

#: thread statuses after which nothing more runs (the thread's clock stops)
FINISHED = ("completed", "failed", "cancelled")


class StepUsage(TypedDict):
    """What one step used, and how long it ran (a dict: ``status`` builds one per step of
    threads of thousands of steps, and a dict costs a fraction of a model)."""

    tokens: int
    #: in the currency of the model prices (USD for the built-in ones)
    cost: float
    tool_calls: int
    model_calls: int
    #: seconds its runs took, start to end (an approval or wait: the time it waited); a
    #: run under way counts up to now
    wall_time: float
    #: the highest attempt number it reached
    attempts: int
    #: when it first started and when its last run ended (epoch seconds, UTC)
    started_at: float | None
    finished_at: float | None


class ThreadUsage(BaseModel):
    """What a thread used in all, and what its budget has left."""

    tokens: int = 0
    cost: float = 0.0
    tool_calls: int = 0
    model_calls: int = 0
    #: seconds from the thread's start to its end (or to now, while it is not finished)
    wall_time: float = 0.0
    #: the budget's limits (None: no limit) and its counters (``wall_time`` there is the
    #: running time that counts against ``Budget.wall_time``, kept only when it is limited)
    limits: dict[str, float | None] = {}
    used: dict[str, float] = {}
    #: what is left of each limited counter (never below 0; None: no limit)
    left: dict[str, float | None] = {}
    deadline_at: datetime | None = None
    #: usage of what is not a declared step (the agent of a fix loop, or a step the thread
    #: ran before a migration dropped it), by name
    other: dict[str, StepUsage] = {}
    #: the names in ``other`` that are fix agents of the thread's definition
    fix_agents: list[str] = []

    def other_label(self, name: str) -> str:
        """``name`` as a usage table lists it: a fix agent, or a step no longer declared."""
        return f"{name} (fix agent)" if name in self.fix_agents else f"{name} (removed step)"


def fix_agents(definition: Mapping[str, Any]) -> set[str]:
    """The names of the fix agents of a recorded definition (``on_failure`` of its steps)."""
    return {
        str(step["on_failure"]["agent"]["name"])
        for stage in definition.get("stages", [])
        for step in stage.get("steps", [])
        if isinstance(step.get("on_failure"), dict)
        and isinstance(step["on_failure"].get("agent"), dict)
        and step["on_failure"]["agent"].get("name")
    }


def _dt(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value, UTC)


def thread_usage(
    rec: ThreadRecord,
    budget: BudgetState | None,
    rows: dict[str, StepUsage],
    declared: AbstractSet[str],
    now: datetime | None = None,
) -> ThreadUsage:
    """Totals from the budget row (the authority on what was charged), the steps' rows
    for the rest."""
    now = now or datetime.now(UTC)
    end = rec.updated_at if rec.status in FINISHED else now
    used = dict(budget.used) if budget else {n: 0.0 for n in BUDGET_LIMITS}
    limits: dict[str, float | None] = (
        dict(budget.limits) if budget else {n: None for n in BUDGET_LIMITS}
    )
    left: dict[str, float | None] = {
        n: (None if limits.get(n) is None else max(float(limits[n] or 0) - used.get(n, 0), 0.0))
        for n in BUDGET_LIMITS
    }
    return ThreadUsage(
        tokens=int(used.get("tokens", 0)),
        cost=round(used.get("cost", 0.0), 8),
        tool_calls=int(used.get("tool_calls", 0)),
        model_calls=sum(u["model_calls"] for u in rows.values()),
        wall_time=round(max((end - rec.created_at).total_seconds(), 0.0), 6),
        limits=limits,
        used=used,
        left=left,
        deadline_at=_dt(budget.deadline_at) if budget else None,
        other={k: v for k, v in rows.items() if k not in declared},
        fix_agents=sorted(fix_agents(rec.definition) & (rows.keys() - declared)),
    )


def read_usage(
    store: Any, rec: ThreadRecord, declared: AbstractSet[str], *, stopped: bool = False
) -> tuple[ThreadUsage, dict[str, StepUsage]]:
    """The thread's usage and each step's: two indexed reads. ``stopped``: the thread says
    running but no process advances it (the one that did died)."""
    now = datetime.now(UTC)
    # A run still open when the thread ended (the step a cancel cut off, or a crashed
    # process's) counts up to the end, as the thread's total does, not on and on; so does
    # the run of a dead process (up to the thread's last update: when it died is unknown).
    ended = rec.status in FINISHED or stopped
    at = rec.updated_at.timestamp() if ended else now.timestamp()
    rows: dict[str, StepUsage] = {}
    # one row per step (Store.usage: step, then USAGE_KEYS in order); a run under way
    # counts up to now. Unpacked here, not in a helper: status reads one per step of
    # threads of thousands of steps
    for (
        step,
        tokens,
        cost,
        tool_calls,
        model_calls,
        wall,
        attempts,
        started,
        finished,
        since,
    ) in store.usage(rec.thread_id):
        if since is not None:
            wall += max(at - since, 0.0)
        rows[step] = {
            "tokens": tokens,
            "cost": round(cost, 8) if cost else cost,
            "tool_calls": tool_calls,
            "model_calls": model_calls,
            "wall_time": round(wall, 6),
            "attempts": attempts,
            "started_at": started,
            "finished_at": finished,
        }
    return thread_usage(rec, store.budget(rec.thread_id), rows, declared, now), rows


def seconds(value: float | None) -> str:
    """A duration as people read it: 850 ms, 12.3 s, 4 min 05 s, 2 h 03 min, 3 d 04 h."""
    if value is None:
        return ""
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 60:
        return f"{value:.1f} s"
    minutes, secs = divmod(round(value), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes:02d} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours:02d} h"
