"""Text output of the CLI's read commands."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

if TYPE_CHECKING:
    from longtask.runtime import CheckpointView, ThreadStatus
    from longtask.runtime._views import Pending
    from longtask.store import BudgetState, ThreadRecord

MARKS = {
    "completed": "[green]✓[/green]",
    "skipped": "[dim]↷[/dim]",
    "waiting": "[cyan]⏸[/cyan]",
    "running": "[yellow]●[/yellow]",
    "failed": "[red]✗[/red]",
    "pending": "[dim]○[/dim]",
}

#: exit code of a command that leaves a thread in this status
_EXIT = {"completed": 0, "waiting_user": 3, "waiting_external": 3, "cancelled": 1, "failed": 1}

#: budget counters as people read them
_BUDGET_NAMES = {
    "tokens": "tokens",
    "cost": "cost",
    "tool_calls": "tool calls",
    "wall_time": "running time (s)",
}


def stage_state(states: set[str]) -> str:
    """One state for a stage from its steps' states."""
    if states <= {"completed", "skipped"}:
        return "completed"
    for state in ("failed", "waiting"):
        if state in states:
            return state
    return "running" if states & {"running", "completed"} else "pending"


def status_exit_code(status: str) -> int:
    return _EXIT.get(status, 1)


def print_status(out: Console, st: ThreadStatus) -> None:
    label = st.status
    if st.status == "running" and not st.active:
        label = "running [yellow](no process is advancing it)[/yellow]"
    out.print(
        f"[bold]{escape(st.task_name)}[/bold] v{escape(st.task_version)}  "
        f"{escape(st.thread_id)}  {label}  {st.progress:.0%}  "
        f"({st.done}/{len(st.steps)} steps done)"
    )
    stages: dict[str, list[str]] = {}
    for step in st.steps:
        label = f"{MARKS[step.state]} {escape(step.name)}"
        if step.fix_rounds:
            label += f" [yellow](fix round {step.fix_rounds})[/yellow]"
        if step.items_total is not None:
            label += f" {step.items_done}/{step.items_total}"
            if step.items_failed:
                label += f" [red]({len(step.items_failed)} failed)[/red]"
        stages.setdefault(step.stage, []).append(label)
    for stage, items in stages.items():
        mark = MARKS[stage_state({s.state for s in st.steps if s.stage == stage})]
        out.print(f"{mark} {escape(stage)}")
        out.print("    " + "   ".join(items))
    if st.error:
        item = f" item {st.error['item']}" if "item" in st.error else ""
        out.print(
            f"[red]error[/red] in step {escape(str(st.error.get('step')))}{item}: "
            f"{escape(str(st.error.get('type')))}: {escape(str(st.error.get('message')))}"
        )
    for step in st.steps:
        for failed in (step.items_failed or [])[:5]:
            out.print(
                f"  {escape(step.name)} item {failed['index']} failed: "
                f"{escape(str(failed.get('error')))}"
            )
    if st.worker:
        out.print(f"held by worker {escape(st.worker)}")
    if st.status == "cancelling":
        out.print(f"finish cancelling with: longtask cancel {escape(st.thread_id)}")
    elif st.status == "failed" and (st.error or {}).get("compensated") is not None:
        done = ", ".join(st.error["compensated"]) if st.error else ""
        out.print(f"compensated (undone): {escape(done) or 'nothing to undo'}")
    elif st.status == "failed" or (st.status == "running" and not st.active):
        out.print(f"continue with: longtask resume {escape(st.thread_id)}")
        if st.status == "failed" and st.error and st.error.get("step"):
            out.print(
                f"  or: longtask retry {escape(st.thread_id)}   |   longtask skip "
                f"{escape(st.thread_id)} {escape(str(st.error['step']))} --result JSON"
            )
    elif st.waiting:
        out.print("waiting for:")
        for line in continue_commands(st):
            out.print(f"  {escape(line)}")


def continue_commands(st: ThreadStatus) -> list[str]:
    """The exact commands that continue a paused thread."""
    lines = []
    for w in st.waiting:
        if w["kind"] == "approval":
            who = (w.get("approvers") or ["NAME"])[0]
            lines.append(f"longtask approve {st.thread_id} {w['step']} --by {who}")
        elif w.get("command"):
            # a step that stopped for a person (permission, budget, deadline) says how
            lines.append(f"{w.get('reason')}: {w['command']}")
        elif w["kind"] == "effect":
            lines.append(
                f"longtask effects resolve {st.thread_id} {w.get('key')} "
                "--succeeded --result JSON  (or --failed, or --retry)"
            )
        else:
            lines.append(f"longtask signal {st.thread_id} {w['step']} --payload JSON")
    return lines or [f"longtask resume {st.thread_id} --resume JSON"]


def print_pending(out: Console, thread_id: str, items: Sequence[Pending]) -> None:
    if not items:
        out.print(f"thread {escape(thread_id)} is not waiting for anything")
        return
    for p in items:
        req = p.request
        out.print(f"[bold]{escape(p.step)}[/bold] ({p.kind}, interrupt {p.interrupt_id})")
        if p.kind == "approval":
            out.print(f"  plan: {escape(json.dumps(req.get('plan'), indent=2, default=str))}")
            out.print(f"  plan hash: {req.get('plan_hash')}")
            if req.get("approvers"):
                out.print(f"  approvers: {escape(', '.join(req['approvers']))}")
        elif req.get("schema"):
            out.print(f"  payload schema: {escape(json.dumps(req['schema']))}")
        if req.get("deadline"):
            out.print(f"  deadline: {req['deadline']}")


def print_threads(out: Console, threads: Sequence[ThreadRecord]) -> None:
    if not threads:
        out.print("no threads")
        return
    table = Table(box=None, pad_edge=False)
    for col in ("thread", "task", "version", "status", "updated"):
        table.add_column(col)
    for t in threads:
        table.add_row(
            escape(t.thread_id),
            escape(t.task_name),
            escape(t.task_version),
            t.status,
            f"{t.updated_at:%Y-%m-%d %H:%M:%S}",
        )
    out.print(table)


def print_history(out: Console, views: Sequence[CheckpointView]) -> None:
    table = Table(box=None, pad_edge=False)
    table.add_column("checkpoint", no_wrap=True, min_width=36)
    for col in ("step", "source", "time", "completed", "stage", "done"):
        table.add_column(col, no_wrap=col == "time")
    for v in views:
        table.add_row(
            v.checkpoint_id,
            str(v.step),
            v.source or "",
            (v.created_at or "")[:19].replace("T", " "),
            escape(", ".join(v.completed)),
            escape(", ".join(v.stages)),
            f"{v.done}/{v.total}",
        )
    out.print(table)


def print_budget(out: Console, budget: BudgetState | None, thread_id: str) -> None:
    if budget is None:
        out.print(f"thread {escape(thread_id)} has no budget and has charged nothing")
        return
    for name, label in _BUDGET_NAMES.items():
        limit = budget.limits.get(name)
        used = budget.used.get(name, 0)
        shown = f"{used:g}" + (f" of {limit:g}" if limit is not None else " (no limit)")
        warn = " [red]exceeded[/red]" if limit is not None and used >= limit else ""
        out.print(f"{label:<18} {shown}{warn}")
    if budget.deadline_at is not None:
        from datetime import UTC, datetime

        at = datetime.fromtimestamp(budget.deadline_at, UTC)
        out.print(f"{'deadline':<18} {at:%Y-%m-%d %H:%M:%S} UTC")
