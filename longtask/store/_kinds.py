"""Every kind of event longtask writes to a thread's log (``longtask events --kind``, the
web page's subscriptions). A new kind is added here too; tests/unit/test_event_kinds.py
checks the code writes no other."""

from __future__ import annotations

EVENT_KINDS: tuple[str, ...] = (
    *(f"longtask.{k}" for k in ("started", "completed", "failed", "cancelled")),
    "stage.started",
    "stage.completed",
    *(f"step.{k}" for k in ("started", "progress", "completed", "failed", "retry", "skipped")),
    "agent.run.started",
    "agent.run.completed",
    "model.call",
    "tool.call",
    *(f"effect.{k}" for k in ("started", "succeeded", "failed", "unknown")),
    *(f"approval.{k}" for k in ("required", "resolved", "expired", "refused")),
    *(f"wait.{k}" for k in ("started", "resolved", "expired", "refused")),
    *(f"compensation.{k}" for k in ("started", "completed", "failed")),
    "budget.exceeded",
    "artifact.created",
    "fix.round",
    "fix.exhausted",
    *(f"manual.{k}" for k in ("skip", "retry", "resolve", "fork", "cancel", "budget", "goto")),
)
