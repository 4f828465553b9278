"""Every kind of event longtask writes to a thread's log (``longtask events --kind``, the
web page's subscriptions). A new kind is added here too; tests/unit/test_event_kinds.py
checks the code writes no other."""

from __future__ import annotations

EVENT_KINDS: tuple[str, ...] = (
    *(f"longtask.{k}" for k in ("started", "completed", "failed", "cancelled", "recovered")),
    "stage.started",
    "stage.completed",
    *(
        f"step.{k}"
        for k in ("started", "progress", "completed", "failed", "retry", "skipped", "abandoned")
    ),
    "agent.run.started",
    "agent.run.completed",
    "model.call",
    "tool.call",
    *(f"effect.{k}" for k in ("started", "succeeded", "failed", "unknown")),
    "interrupt.required",
    "interrupt.resolved",
    "interrupt.refused",
    *(f"approval.{k}" for k in ("required", "resolved", "expired", "refused")),
    *(f"wait.{k}" for k in ("started", "resolved", "expired", "refused")),
    *(f"compensation.{k}" for k in ("started", "completed", "failed")),
    *(f"subtask.{k}" for k in ("started", "completed", "failed")),
    "budget.exceeded",
    "artifact.created",
    "fix.round",
    "fix.exhausted",
    "definition.migrated",
    "turn.started",
    "definition.forced",
    "notify.sent",
    "notify.failed",
    *(
        f"manual.{k}"
        for k in ("skip", "retry", "resolve", "fork", "copy", "cancel", "budget", "goto", "update")
    ),
)

#: a new input on a served LangGraph graph's thread: its graph runs again (runtime._turns)
TURN_STARTED = "turn.started"

#: Events about work in progress: stored within a second of being emitted, in their own small
#: fenced transactions (see EventWriter), so other processes see a running step. Every other
#: kind is a fact about committed work and commits with the write it describes.
LIVE_KINDS: frozenset[str] = frozenset(
    {
        "stage.started",
        "step.started",
        "step.progress",
        "artifact.created",
        "agent.run.started",
        "model.call",
        "tool.call",
    }
)

#: kinds of pause a step's own condition makes (gates), answered by any value, after which
#: the step looks again: a limit reached, a permission missing, a fix loop out of rounds
GATE_KINDS: tuple[str, ...] = ("budget", "deadline", "permission", "fix")
#: every kind of interrupt longtask makes (the ``kind`` of its request); "interrupt" is one
#: of a graph step's own graph, its value under the request's ``value``
PAUSE_KINDS: tuple[str, ...] = (
    "approval",
    "wait",
    "effect",
    "interrupt",
    "subtask",
    *GATE_KINDS,
)
#: the pause of a sub-task step until its children end (answered by the last child's end,
#: or by a plain resume: the step looks at its children again)
SUBTASK_KIND = "subtask"
#: kinds a person answers (the others wait for an outside event)
USER_KINDS: tuple[str, ...] = ("approval", "effect", "interrupt", *GATE_KINDS)
