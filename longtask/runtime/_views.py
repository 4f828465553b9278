"""Read models returned by the Runner (printed by the CLI with --json, shown as HTML tables
in notebooks)."""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from html import escape
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, SkipValidation

from longtask.runtime._usage import StepUsage, ThreadUsage

if TYPE_CHECKING:
    from longtask.model import LongTask

StepStateName = Literal["pending", "running", "waiting", "completed", "skipped", "failed"]


class StepState(BaseModel):
    """One step of a thread as ``status`` tells it."""

    name: str
    stage: str
    kind: str
    state: StepStateName
    #: map steps: items finished, items in all, and the items that failed
    items_done: int | None = None
    items_total: int | None = None
    items_failed: list[dict[str, Any]] | None = None
    #: steps with a fix loop: fix rounds so far (each one an agent run, then the step again)
    fix_rounds: int | None = None
    #: a running step's last ``ctx.progress`` report: done, total, message
    progress: dict[str, Any] | None = None
    #: what the step used and how long it ran (None: it has not started); built by the
    #: Runner from its usage row, so not validated again (``status`` makes one per step of
    #: threads of thousands of steps)
    usage: SkipValidation[StepUsage | None] = None

    @classmethod
    def of(cls, name: str, stage: str, kind: str, state: str, usage: StepUsage | None) -> StepState:
        """A step's state from trusted parts (the stored definition, a state this module
        names, a usage row), without validation: ``status`` makes one per step of threads
        of thousands of steps. What ``model_construct`` does, without its per-field lookup
        of defaults (which costs more than validating)."""
        view = cls.__new__(cls)
        # every field, in declaration order (tests/unit/test_views.py holds it to the model)
        values = {
            "name": name,
            "stage": stage,
            "kind": kind,
            "state": state,
            "items_done": None,
            "items_total": None,
            "items_failed": None,
            "fix_rounds": None,
            "progress": None,
            "usage": usage,
        }
        object.__setattr__(view, "__dict__", values)
        object.__setattr__(
            view, "__pydantic_fields_set__", {"name", "stage", "kind", "state", "usage"}
        )
        object.__setattr__(view, "__pydantic_extra__", None)
        object.__setattr__(view, "__pydantic_private__", None)
        return view


@dataclass(frozen=True)
class StepLayout:
    """A stored definition's steps in order, flattened once per definition."""

    #: (name, stage, kind, depends_on) of each step
    steps: tuple[tuple[str, str, str, tuple[str, ...]], ...]
    names: frozenset[str]


#: by the definition dict's id, with the dict itself (kept alive, so its id is not reused)
_LAYOUTS: OrderedDict[int, tuple[dict[str, Any], StepLayout]] = OrderedDict()


def step_layout(definition: dict[str, Any]) -> StepLayout:
    """The steps of a stored definition (``ThreadRecord.definition``, one dict per
    definition hash in the store), flattened once and kept."""
    hit = _LAYOUTS.get(id(definition))
    if hit is not None and hit[0] is definition:
        return hit[1]
    steps = tuple(
        (s["name"], stage["name"], s["kind"], tuple(s.get("depends_on", ())))
        for stage in definition["stages"]
        for s in stage["steps"]
    )
    layout = StepLayout(steps, frozenset(s[0] for s in steps))
    _LAYOUTS[id(definition)] = (definition, layout)
    while len(_LAYOUTS) > 64:
        _LAYOUTS.popitem(last=False)
    return layout


class ThreadStatus(BaseModel):
    thread_id: str
    task_name: str
    task_version: str
    task_ref: str | None
    status: str
    #: False when the status says running but no process holds the thread (it crashed or
    #: was stopped): ``resume`` continues it.
    active: bool
    progress: float
    current_stage: str | None
    steps: list[StepState]
    error: dict[str, Any] | None
    #: what a paused thread waits for: [{"step", "kind", "interrupt_id", ...}]
    waiting: list[dict[str, Any]] = []
    checkpoint_id: str | None
    runs: int
    created_at: datetime
    updated_at: datetime
    #: the worker holding the thread now (threads served by workers)
    worker: str | None = None
    #: seconds since that worker's last heartbeat, when it has missed two (stopped, hung or
    #: gone: its progress is frozen until another worker takes the thread over)
    worker_silent_for: float | None = None
    #: the seconds of silence after which another worker takes the thread over
    worker_stalled_after: float | None = None
    #: the schedule that started the thread: name, tick, and its next fire time
    #: (``next_fire_at`` UTC, ``next_fire_local`` in its timezone), or None
    schedule: dict[str, Any] | None = None
    #: tokens, cost, tool calls and time in all, and what the budget has left
    usage: ThreadUsage | None = None
    #: the child threads of each sub-task step: [{"index", "attempt", "thread_id",
    #: "status"}], every attempt, by item
    subtasks: dict[str, list[dict[str, Any]]] = {}
    #: the sub-task step that started this thread: {"thread_id", "step", "item",
    #: "attempt"}, or None for a top-level thread
    parent: dict[str, Any] | None = None

    @property
    def done(self) -> int:
        """Steps that need no more work: completed or skipped."""
        return sum(1 for s in self.steps if s.state in ("completed", "skipped"))

    def _repr_html_(self) -> str:
        return status_html(self)


class Pending(BaseModel):
    """One thing a paused thread waits for: an approval or an outside event."""

    step: str
    #: budget / deadline / permission / fix: a step stopped for a person (a gate)
    #: subtask: a sub-task step waits for its child threads to end
    kind: Literal[
        "approval",
        "wait",
        "effect",
        "budget",
        "deadline",
        "permission",
        "fix",
        "interrupt",
        "subtask",
    ]
    interrupt_id: str
    request: dict[str, Any]

    def summary(self) -> dict[str, Any]:
        out = {"step": self.step, "kind": self.kind, "interrupt_id": self.interrupt_id}
        # enough for `status` and `watch` to print a pasteable answer without the task:
        # a wait's payload schema, an effect's name, arguments and result schema
        for key in (
            "plan_hash",
            "deadline",
            "approvers",
            "key",
            "reason",
            "schema",
            "name",
            "args",
            "result_schema",
            "tool_call_id",
            "command",
            "item",
            "value",
            "actions",
            "open",
            "total",
        ):
            if self.request.get(key) is not None:
                out[key] = self.request[key]
        return out


class CheckpointView(BaseModel):
    checkpoint_id: str
    parent_id: str | None
    step: int | None
    source: str | None
    created_at: str | None
    #: steps whose results this checkpoint added
    completed: list[str]
    #: the stages of those steps
    stages: list[str] = []
    #: how many steps had a result at this point (of ``total``)
    done: int = 0
    total: int = 0


class InnerCheckpoint(BaseModel):
    """One checkpoint of a graph step's own graph (a super-step of it), newest first."""

    checkpoint_id: str
    parent_id: str | None
    #: the graph's super-step (-1: its input)
    step: int | None
    source: str | None
    created_at: str | None
    #: the graph's channels this super-step wrote (its nodes' outputs)
    updated: list[str]
    #: the namespace LangGraph keeps the graph's checkpoints in
    checkpoint_ns: str


def definition_summary(task: LongTask) -> dict[str, Any]:
    """What a thread records about its definition: enough to show status and to name the
    differences when the definition changes, without importing the task's code."""
    spec = task.spec()
    layout = task.layout
    for stage in spec["stages"]:
        for step in stage["steps"]:
            step["depends_on"] = list(layout[step["name"]].depends_on)
    return spec


def definition_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Human-readable differences between two definition summaries."""
    changes: list[str] = []
    for key in ("name", "version", "inputs"):
        if old.get(key) != new.get(key):
            changes.append(f"task {key} changed: {old.get(key)!r} -> {new.get(key)!r}")

    def steps(spec: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
        return {s["name"]: (st["name"], s) for st in spec.get("stages", []) for s in st["steps"]}

    before, after = steps(old), steps(new)
    for name in before.keys() - after.keys():
        changes.append(f"step {name!r} was removed")
    for name in after.keys() - before.keys():
        changes.append(f"step {name!r} was added (stage {after[name][0]!r})")
    for name in before.keys() & after.keys():
        (old_stage, o), (new_stage, n) = before[name], after[name]
        if old_stage != new_stage:
            changes.append(f"step {name!r} moved from stage {old_stage!r} to {new_stage!r}")
        fields = sorted(k for k in o.keys() | n.keys() if o.get(k) != n.get(k) and k != "name")
        if fields:
            detail = ", ".join(f"{k}: {o.get(k)!r} -> {n.get(k)!r}" for k in fields)
            changes.append(f"step {name!r} changed ({detail})")
    old_stages = [s["name"] for s in old.get("stages", [])]
    new_stages = [s["name"] for s in new.get("stages", [])]
    if old_stages != new_stages:
        changes.append(f"stages changed: {old_stages} -> {new_stages}")
    return sorted(changes) or ["the definition hash differs"]


class CheckpointState(BaseModel):
    """The task's state at one checkpoint."""

    thread_id: str
    checkpoint_id: str
    parent_id: str | None
    created_at: str | None
    #: every step result stored at this point, decoded
    results: dict[str, Any]
    #: the nodes that would run next from here
    next: list[str]
    #: interrupts pending here (approvals, waits, effects to settle)
    interrupts: list[dict[str, Any]]

    def _repr_html_(self) -> str:
        return checkpoint_html(self)


# -- HTML for notebooks (``_repr_html_``): plain tables, inline styles, escaped text --------

_MARK = {
    "completed": "✓",
    "skipped": "↷",
    "waiting": "⏸",
    "running": "●",
    "failed": "✗",
    "pending": "○",
}
_COLOUR = {
    "completed": "#2e7d32",
    "skipped": "#757575",
    "waiting": "#00838f",
    "running": "#f9a825",
    "failed": "#c62828",
    "pending": "#9e9e9e",
}
_TABLE = 'style="border-collapse:collapse;font-family:monospace;font-size:13px"'
_CELL = 'style="border:1px solid #ddd;padding:2px 8px;text-align:left;vertical-align:top"'


def _short(value: Any, limit: int = 200) -> str:
    text = json.dumps(value, default=str, ensure_ascii=False)
    return escape(text if len(text) <= limit else text[: limit - 1] + "…")


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th {_CELL}>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td {_CELL}>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table {_TABLE}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def status_html(st: ThreadStatus) -> str:
    rows = []
    for step in st.steps:
        state = f'<span style="color:{_COLOUR[step.state]}">{_MARK[step.state]} {step.state}</span>'
        extra = []
        if step.items_total is not None:
            extra.append(f"{step.items_done}/{step.items_total} items")
        if step.fix_rounds:
            extra.append(f"fix round {step.fix_rounds}")
        rows.append(
            [
                escape(step.stage),
                escape(step.name),
                escape(step.kind),
                state,
                escape(", ".join(extra)),
            ]
        )
    title = (
        f"<b>{escape(st.task_name)}</b> v{escape(st.task_version)} · {escape(st.thread_id)} · "
        f"<b>{escape(st.status)}</b> · {st.progress:.0%}"
    )
    waiting = "".join(
        f"<div>waiting for {escape(w.get('kind', ''))}: {escape(str(w.get('step')))} "
        f"{escape(str(w.get('reason') or ''))}</div>"
        for w in st.waiting
    )
    error = (
        f'<div style="color:#c62828">error in {escape(str(st.error.get("step")))}: '
        f"{escape(str(st.error.get('message')))}</div>"
        if st.error
        else ""
    )
    table = _table(["stage", "step", "kind", "state", ""], rows)
    return f"<div>{title}{table}{waiting}{error}</div>"


def history_html(views: Sequence[CheckpointView]) -> str:
    rows = [
        [
            escape(v.checkpoint_id),
            escape(str(v.parent_id or "")),
            escape(str(v.step)),
            escape(v.source or ""),
            escape((v.created_at or "")[:19].replace("T", " ")),
            escape(", ".join(v.completed)),
            escape(", ".join(v.stages)),
            f"{v.done}/{v.total}",
        ]
        for v in views
    ]
    header = ["checkpoint", "parent", "step", "source", "time", "completed", "stage", "done"]
    return _table(header, rows)


def checkpoint_html(cs: CheckpointState) -> str:
    rows = [[escape(k), _short(v)] for k, v in cs.results.items()]
    parts = [
        f"<div><b>checkpoint</b> {escape(cs.checkpoint_id)} (parent "
        f"{escape(str(cs.parent_id))}) · {escape(str(cs.created_at or ''))}</div>",
        _table(["step", "result"], rows),
        f"<div>next: {escape(', '.join(cs.next) or 'nothing (end)')}</div>",
    ]
    for i in cs.interrupts:
        parts.append(f"<div>interrupt at {escape(i['node'])}: {_short(i['value'])}</div>")
    return "".join(parts)


class HistoryList(list[CheckpointView]):
    """A list of checkpoint views that shows as a table in a notebook."""

    def _repr_html_(self) -> str:
        return history_html(self)
