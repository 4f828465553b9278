"""Text output of the CLI's read commands."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from longtask.cli._hints import cmd, in_text
from longtask.cli._values import render


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 step``, ``2 steps``, ``1 retry``, ``3 retries``."""
    if n == 1:
        return f"{n} {word}"
    return f"{n} {many or (word[:-1] + 'ies' if word.endswith('y') else word + 's')}"


if TYPE_CHECKING:
    from longtask.runtime import CheckpointView, ThreadCost, ThreadStatus
    from longtask.runtime._views import Pending
    from longtask.store import BudgetState

MARKS = {
    "completed": "[green]✓[/green]",
    "skipped": "[dim]↷[/dim]",
    "waiting": "[cyan]⏸[/cyan]",
    "running": "[yellow]●[/yellow]",
    "failed": "[red]✗[/red]",
    "pending": "[dim]○[/dim]",
}

#: a thread's status as a mark (the children of a sub-task step)
THREAD_MARKS = {
    **MARKS,
    "waiting_user": MARKS["waiting"],
    "waiting_external": MARKS["waiting"],
    "cancelled": "[dim]⊘[/dim]",
    "cancelling": MARKS["running"],
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


def progress_text(progress: Mapping[str, Any]) -> str:
    """A step's progress report (a ``step.progress`` event's data) as ``3/10 crunching``
    (``3`` with no total), not escaped."""
    done, total = progress.get("done"), progress.get("total")
    text = f"{done:g}/{total:g}" if isinstance(total, int | float) else f"{done}"
    if progress.get("message"):
        text += f" {progress['message']}"
    return text


#: children listed under a sub-task step (the rest are counted)
CHILDREN_SHOWN = 20


def print_children(
    out: Console,
    st: ThreadStatus,
    indent: str = "  ",
    tree: Callable[[str], ThreadStatus | None] | None = None,
) -> None:
    """Each sub-task step's children and their status (the latest attempt of each item);
    with ``tree`` (reads a child's status) each child's own children too, to full depth."""
    if st.parent:
        p = st.parent
        out.print(
            f"{indent}sub-task of {escape(p['thread_id'])} (step {escape(p['step'])}, "
            f"item {p['item']})"
        )
    for step, rows in st.subtasks.items():
        latest = list({r["index"]: r for r in rows}.values())
        ended = sum(1 for r in latest if r["status"] in ("completed", "failed", "cancelled"))
        out.print(f"{indent}{escape(step)}: {ended}/{len(latest)} sub-tasks ended")
        for row in latest[:CHILDREN_SHOWN] if tree is None else latest:
            mark = THREAD_MARKS.get(row["status"], "·")
            again = f" (attempt {row['attempt']})" if row["attempt"] > 1 else ""
            out.print(
                f"{indent}  {mark} {escape(row['thread_id'])}  {escape(row['status'])}{again}"
            )
            child = tree(row["thread_id"]) if tree is not None else None
            if child is not None:
                print_children(
                    out, child.model_copy(update={"parent": None}), indent + "    ", tree
                )
        if tree is None and len(latest) > CHILDREN_SHOWN:
            out.print(f"{indent}  ... and {len(latest) - CHILDREN_SHOWN} more (--tree lists all)")


def print_status(
    out: Console,
    st: ThreadStatus,
    *,
    usage: bool = False,
    tree: Callable[[str], ThreadStatus | None] | None = None,
) -> None:
    """The status tree, the error, and what continues the thread; with ``usage`` also what
    each step used and the totals (``longtask status``); with ``tree`` the sub-tasks'
    own sub-tasks (see ``print_children``)."""
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
        if step.progress and step.state == "running":
            label += f" {escape(progress_text(step.progress))}"
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
    print_children(out, st, tree=tree)
    for step in st.steps:
        for failed in (step.items_failed or [])[:5]:
            out.print(
                f"  {escape(step.name)} item {failed['index']} failed: "
                f"{escape(str(failed.get('error')))}"
            )
    if st.worker and st.worker_silent_for is not None:
        after = st.worker_stalled_after
        then = (
            f"; another worker takes the thread over after {after:g}s of silence" if after else ""
        )
        out.print(
            f"held by worker {escape(st.worker)}, [yellow]silent for "
            f"{st.worker_silent_for:.0f}s[/yellow] (no heartbeat: stopped, hung or gone; "
            f"progress is frozen){escape(then)}"
        )
    elif st.worker:
        out.print(f"held by worker {escape(st.worker)}")
    if st.schedule:
        from longtask.cli._schedule_text import schedule_lines

        for line in schedule_lines(st.schedule):
            out.print(line)
    if usage:
        print_usage(out, st)
    t = st.thread_id
    if st.status == "cancelling":
        out.print(f"finish cancelling with: {escape(cmd(f'longtask cancel {t}'))}")
    elif st.status == "failed" and (st.error or {}).get("compensated") is not None:
        done = ", ".join(st.error["compensated"]) if st.error else ""
        out.print(f"compensated (undone): {escape(done) or 'nothing to undo'}")
    elif st.status == "failed" and (st.error or {}).get("outcome") and st.error:
        # A rejected or timed-out pause: resume would repeat it; retry asks again.
        again = cmd(f"longtask retry {t} {st.error.get('step')}")
        out.print(f"ask again with: {escape(again)}")
    elif st.status == "failed" or (st.status == "running" and not st.active):
        out.print(f"continue with: {escape(cmd(f'longtask resume {t}'))}")
        if st.status == "failed" and st.error and st.error.get("step"):
            retry = cmd(f"longtask retry {t}")
            skip = cmd(f"longtask skip {t} {st.error['step']} --result JSON")
            out.print(f"  or: {escape(retry)}   |   {escape(skip)}")
    elif st.waiting:
        out.print("waiting for:")
        for line in continue_commands(st):
            out.print(f"  {escape(line)}")
    elif st.status == "completed":
        out.print(f"results: {escape(cmd(f'longtask result {t}'))}")


def schema_text(schema: dict[str, Any]) -> str:
    """A JSON schema on one line, without pydantic's titles and descriptions."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: strip(v)
                for k, v in value.items()
                if k not in ("title", "description") or not isinstance(v, str)
            }
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return json.dumps(strip(schema))


def schema_example(schema: Mapping[str, Any]) -> Any:
    """An example value of ``schema`` (``longtask.model``'s, imported when needed: the
    model's package is too heavy for ``--help`` and the reads)."""
    from longtask._schema_example import schema_example as example

    return example(schema)


def _details(w: Mapping[str, Any], option: str) -> list[str]:
    """What ``option``'s JSON must look like to answer ``w`` (a wait or an effect), when
    the pause says."""
    lines = []
    if w["kind"] == "effect" and w.get("name") and "args" in w:  # older pauses lack them
        called = json.dumps(w["args"], ensure_ascii=False)
        called = called if len(called) <= 160 else called[:159] + "…"
        lines.append(f"effect {w['name']} called with {called}")
    schema = w.get("result_schema" if w["kind"] == "effect" else "schema")
    if schema:
        value = json.dumps(schema_example(schema), ensure_ascii=False)
        lines.append(f"{option} looks like {shlex.quote(value)}")
        lines.append(f"{option} JSON schema: {schema_text(schema)}")
    return lines


def continue_commands(st: ThreadStatus) -> list[str]:
    """The exact commands that continue a paused thread (ready to paste), each followed by
    what its JSON must look like when that is known."""
    lines = []
    t = st.thread_id
    for w in st.waiting:
        if w["kind"] == "approval":
            who = (w.get("approvers") or ["NAME"])[0]
            lines.append(cmd(f"longtask approve {t} {w['step']} --by {who}"))
        elif w.get("command"):
            # a step that stopped for a person (permission, budget, deadline) says how
            lines.append(f"{w.get('reason')}: {in_text(w['command'])}")
        elif w["kind"] == "effect":
            lines.append(
                cmd(f"longtask effects resolve {t} {w.get('key')} --succeeded --result JSON")
                + "  (or --failed, or --retry)"
            )
        elif w["kind"] == "subtask":
            # Nothing to answer here: the last child's end continues the thread.
            lines.append(
                f"step {w['step']} {w.get('reason', 'waits for its sub-tasks')}; they continue "
                f"it when they end (answer their own pauses): {cmd(f'longtask status {t} --tree')}"
            )
            continue
        else:
            lines.append(cmd(f"longtask signal {t} {w['step']} --payload JSON"))
        option = "--result" if w["kind"] == "effect" else "--payload"
        lines.extend(f"  {line}" for line in _details(w, option))
    return lines or [cmd(f"longtask resume {t} --resume JSON")]


def print_pending(out: Console, thread_id: str, items: Sequence[Pending]) -> None:
    if not items:
        out.print(f"thread {escape(thread_id)} is not waiting for anything")
        return
    for p in items:
        req = p.request
        what = "effect outcome unknown" if p.kind == "effect" else p.kind
        out.print(f"[bold]{escape(p.step)}[/bold] ({what}, interrupt {p.interrupt_id})")
        if p.kind == "approval":
            out.print(f"  plan: {escape(render(req.get('plan'), '  '))}")
            out.print(f"  plan hash: {req.get('plan_hash')}")
            if req.get("approvers"):
                out.print(f"  approvers: {escape(', '.join(req['approvers']))}")
            who = (req.get("approvers") or ["NAME"])[0]
            line = cmd(f"longtask approve {thread_id} {p.step} --by {who}")
            out.print(f"  approve: {escape(line)}")
            line = cmd(f"longtask reject {thread_id} {p.step} --by {who} --comment WHY")
            out.print(f"  reject:  {escape(line)}")
        elif p.kind == "effect":
            out.print(f"  effect: {escape(str(req.get('name')))} (key {req.get('key')})")
            if req.get("tool_call_id"):
                out.print(f"  tool call id: {escape(str(req['tool_call_id']))}")
            if "args" in req:
                out.print(f"  arguments: {escape(render(req['args'], '  '))}")
            if req.get("result_schema"):
                example = json.dumps(schema_example(req["result_schema"]), ensure_ascii=False)
                out.print(f"  result looks like: {escape(example)}")
                out.print(f"  result schema: {escape(schema_text(req['result_schema']))}")
            line = cmd(
                f"longtask effects resolve {thread_id} {req.get('key')} --succeeded --result JSON"
            )
            out.print(f"  it happened: {escape(line)}")
            out.print(
                "  it failed, or call it again: the same with --failed [--reason WHY], or --retry"
            )
            if "action_request" in req:  # older pauses lack Agent Inbox's view
                out.print(
                    "  or answer it (the page, the Server API, Agent Inbox): "
                    + escape(
                        '[{"type": "response", "args": RESULT}] it happened, '
                        '[{"type": "accept"}] call it again, [{"type": "ignore"}] it failed'
                    )
                )
        elif p.kind == "interrupt":
            # the graph of a graph step asks: its own value, answered with any JSON
            if req.get("refused"):
                # asked again: the graph raised on the last answer
                out.print(f"  [red]last answer failed:[/red] {escape(str(req['refused']))}")
            if req.get("stop"):
                out.print(f"  stopped before: {escape(', '.join(req.get('next') or []))}")
            elif req.get("actions"):
                # a tool review of LangChain's HumanInTheLoopMiddleware: each call, and
                # the answers it takes (approve/reject answer it)
                for action in req["actions"]:
                    out.print(f"  tool call: {escape(str(action.get('name')))}")
                    out.print(f"    arguments: {escape(render(action.get('args'), '    '))}")
                    allowed = ", ".join(action.get("allowed_decisions") or [])
                    out.print(f"    allowed: {escape(allowed)}")
                one = len(req["actions"]) == 1
                at = f"{thread_id} {p.interrupt_id}"
                out.print(f"  approve: {escape(cmd(f'longtask approve {at} --by NAME'))}")
                if one:
                    line = cmd(f"longtask approve {at} --by NAME --edit ARGS_JSON")
                    out.print(f"  edit:    {escape(line)}")
                line = cmd(f"longtask reject {at} --by NAME --comment WHY")
                out.print(f"  reject:  {escape(line)}")
                out.print(f"  takes:   {escape(str(req.get('answer')))}")
                continue
            else:
                out.print(f"  asks: {escape(render(req.get('value'), '  '))}")
            out.print(f"  answer: {escape(in_text(str(req.get('command'))))}")
        elif p.kind == "subtask":
            out.print(f"  {escape(str(req.get('reason')))}; they continue it when they end")
            for child in req.get("children") or []:
                out.print(f"  sub-task: {escape(cmd(f'longtask status {child}'))}")
        elif req.get("command"):
            # a step stopped for a person (permission, budget, deadline, fix) says how
            out.print(f"  reason: {escape(str(req.get('reason')))}")
            out.print(f"  continue: {escape(in_text(req['command']))}")
        else:
            if req.get("schema"):
                example = json.dumps(schema_example(req["schema"]), ensure_ascii=False)
                out.print(f"  payload looks like: {escape(example)}")
                out.print(f"  payload schema: {escape(schema_text(req['schema']))}")
            line = cmd(f"longtask signal {thread_id} {p.step} --payload JSON")
            out.print(f"  deliver it: {escape(line)}")
        if req.get("deadline"):
            out.print(f"  deadline: {req['deadline']}")


def print_threads(out: Console, threads: Sequence[ThreadCost], *, wide: bool = False) -> None:
    """The threads as a table. A thread id is what a user copies: it is never cut. When
    the table does not fit the terminal, each thread is its id on a line of its own with
    the rest below it. ``wide`` adds tokens and the time of the last update."""
    if not threads:
        out.print("no threads")
        return
    columns = ("task", "version", "status", "cost", "tokens", "age", "updated")
    shown = ("thread", *(columns if wide else ("task", "version", "status", "cost", "age")))
    rows = [
        {
            "thread": t.thread_id,
            "task": t.task_name,
            "version": t.task_version,
            "status": t.status + (" (no process)" if t.active is False else ""),
            "cost": money(t.cost),
            "tokens": str(t.tokens),
            "age": age(t.age),
            "updated": f"{t.updated_at:%Y-%m-%d %H:%M:%S}",
        }
        for t in threads
    ]
    widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in shown}
    if sum(widths.values()) + 2 * (len(shown) - 1) > out.width:
        for r in rows:
            out.print(escape(r["thread"]), no_wrap=True, overflow="ignore", crop=False)
            out.print("  " + escape("  ".join(f"{c} {r[c]}" for c in shown[1:])))
        return
    table = Table(box=None, pad_edge=False)
    for col in shown:
        table.add_column(
            col, justify="right" if col in ("cost", "tokens", "age") else "left", no_wrap=True
        )
    for r in rows:
        table.add_row(*(escape(r[c]) for c in shown))
    out.print(table)


def money(value: float) -> str:
    """A cost as people read it: no trailing zeros, at most six decimals."""
    return f"{value:.6f}".rstrip("0").rstrip(".") if value else "0"


def age(seconds: float) -> str:
    """An age in the largest unit that fits: 45s, 12m, 5h, 3d."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def print_usage(out: Console, st: ThreadStatus) -> None:
    """Tokens, cost, calls and wall time of each step that used any, and the totals with
    what the budget has left."""
    from longtask.runtime._usage import seconds

    usage = st.usage
    if usage is None:
        return
    rows = [(s.name, s.usage) for s in st.steps if s.usage is not None]
    rows += [(usage.other_label(name), u) for name, u in usage.other.items()]
    if rows:
        table = Table(box=None, pad_edge=False)
        for col in ("step", "wall time", "attempts", "tokens", "cost", "model calls", "tool calls"):
            # a step's name is never cut or wrapped (it is what a user types next); the
            # headers of the numbers wrap first
            table.add_column(
                col, justify="left" if col == "step" else "right", no_wrap=col == "step"
            )
        for name, u in rows:
            assert u is not None
            table.add_row(
                escape(name),
                seconds(u["wall_time"]),
                str(u["attempts"]),
                str(u["tokens"]),
                money(u["cost"]),
                str(u["model_calls"]),
                str(u["tool_calls"]),
            )
        out.print(table)
    line = (
        f"total: wall time {seconds(usage.wall_time)}, cost {money(usage.cost)}, "
        f"{usage.tokens} tokens, {usage.model_calls} model calls, {usage.tool_calls} tool calls"
    )
    out.print(line)
    limited = [n for n, v in usage.limits.items() if v is not None]
    if limited:
        left = ", ".join(
            f"{_BUDGET_NAMES[n]} {usage.left.get(n) or 0:g} of {usage.limits[n]:g}" for n in limited
        )
        out.print(f"budget left: {left}")


def print_history(
    out: Console, views: Sequence[CheckpointView], notes: Sequence[str] | None = None
) -> None:
    """A table that fits the console: optional columns go first (LangGraph's source and step
    number, then the year of the time, then the stages); then the list of completed
    steps and the notes wrap. The full checkpoint id always shows: `show` and `fork` need
    it."""
    columns: dict[str, list[str]] = {
        "checkpoint": [v.checkpoint_id for v in views],
        "step": [str(v.step) for v in views],
        "source": [v.source or "" for v in views],
        "time": [(v.created_at or "")[:19].replace("T", " ") for v in views],
        "completed": [escape(", ".join(v.completed)) for v in views],
        "stage": [escape(", ".join(v.stages)) for v in views],
        "done": [f"{v.done}/{v.total}" for v in views],
    }
    if notes and any(notes):
        columns["note"] = [escape(n) for n in notes]

    def width(names: list[str]) -> int:
        # two spaces between columns (box=None pads each cell by one on either side)
        return sum(max(len(n), *map(len, columns[n]), 0) for n in names) + 2 * (len(names) - 1)

    names = list(columns)
    for drop in ("source", "step", "year", "stage"):
        if width(names) <= out.width:
            break
        if drop == "year":
            columns["time"] = [t[5:] for t in columns["time"]]
        else:
            names.remove(drop)
    table = Table(box=None, pad_edge=False)
    for name in names:
        wraps = name in ("completed", "stage", "note")
        table.add_column(
            name,
            no_wrap=not wraps,
            min_width=len(name),
            overflow="fold" if wraps else "ellipsis",
        )
    for i in range(len(views)):
        table.add_row(*(columns[n][i] for n in names))
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
