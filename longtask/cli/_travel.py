"""Time-travel commands: history, show, diff, branches, fork."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from longtask.cli._app import (
    MAX_INT,
    DbOpt,
    JsonOpt,
    _reader,
    _runner,
    app,
    checked_by,
    out,
)
from longtask.cli._hints import cmd
from longtask.cli._jsonarg import parse_json
from longtask.cli._output import plural, print_history
from longtask.cli._values import jsonable, render

if TYPE_CHECKING:
    from longtask.runtime import ThreadStatus
    from longtask.runtime._views import CheckpointView
    from longtask.store import Event

ThreadArg = Annotated[str, typer.Argument(metavar="THREAD", help="The thread.")]
CheckpointArg = Annotated[str, typer.Argument(metavar="CHECKPOINT", help="A checkpoint id.")]


@app.command()
def history(
    thread_id: ThreadArg,
    limit: Annotated[
        int, typer.Option("--limit", min=1, max=MAX_INT, help="Newest N checkpoints.")
    ] = 20,
    step: Annotated[
        str | None, typer.Option("--step", help="Only checkpoints that stored this step.")
    ] = None,
    stage: Annotated[
        str | None, typer.Option("--stage", help="Only checkpoints of this stage's steps.")
    ] = None,
    before: Annotated[
        str | None, typer.Option("--before", help="Older than this checkpoint (paging).")
    ] = None,
    inner: Annotated[
        str | None,
        typer.Option(
            "--inner", metavar="STEP", help="The own checkpoints of graph step STEP's graph."
        ),
    ] = None,
    json_: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """A thread's checkpoints, newest first, across branches.

    With --inner STEP: a graph step's own checkpoints, one per super-step of its graph."""
    if inner is not None:
        if step is not None or stage is not None or before is not None:
            raise typer.BadParameter(
                "lists one graph step's own checkpoints: use it without --step, --stage "
                "and --before",
                param_hint="--inner",
            )
        with _reader(db) as runner:
            found = runner.inner_history(thread_id, inner, limit=limit)
        if json_:
            print(json.dumps([v.model_dump() for v in found], indent=2))
            return
        if not found:
            out.print(f"graph step {escape(inner)} has no checkpoints of its own yet")
        for v in found:
            when = (v.created_at or "")[:19].replace("T", " ")
            wrote = escape(", ".join(v.updated))
            out.print(f"{v.checkpoint_id}  {when}  step {v.step}  {v.source or ''}  {wrote}")
        return
    with _reader(db) as runner:
        views = runner.history(thread_id, limit=limit, step=step, stage=stage, before=before)
        if json_:
            print(json.dumps([v.model_dump() for v in views], indent=2))
            return
        st = runner.status(thread_id, usage=False)
        events = runner.events(thread_id, kinds=_NOTED)
    print_history(out, views, _notes(views, st, events))


#: events that say why a checkpoint is there (shown beside the first one after them)
_NOTED = (
    "longtask.recovered",
    "manual.fork",
    "manual.retry",
    "manual.skip",
    "manual.goto",
    "definition.migrated",
    "definition.forced",
)


def _notes(views: list[CheckpointView], st: ThreadStatus, events: list[Event]) -> list[str]:
    """Why each checkpoint is there, where the table alone does not say: a pause's two
    checkpoints (its request, then its answer), a resume after a crash, a fork point and
    the checkpoints of another branch than the thread's current one."""
    pauses = {s.name: s.kind for s in st.steps if s.kind in ("approval", "wait")}
    notes: dict[str, list[str]] = {v.checkpoint_id: [] for v in views}
    seen: set[str] = set()
    oldest_first = sorted(views, key=lambda v: (v.created_at or "", v.step or 0))
    for v in oldest_first:
        for name in v.completed:
            if name not in pauses:
                continue
            what = "approval" if pauses[name] == "approval" else "wait"
            if name in seen:
                notes[v.checkpoint_id].append(f"{name}: {what} answered")
            else:
                seen.add(name)
                notes[v.checkpoint_id].append(f"{name}: {what} asked")
    for e in events:
        at = e.ts.isoformat()
        after = next((v for v in oldest_first if (v.created_at or "") >= at), None)
        if after is None:
            continue
        if e.kind == "longtask.recovered":
            dead = ", ".join((e.data or {}).get("abandoned") or []) or "no step"
            text = f"resumed after a crash (abandoned: {dead})"
        elif e.kind == "manual.fork":
            text = "first checkpoint of a fork"
        else:
            text = e.kind.replace("manual.", "after ").replace("definition.", "definition ")
        notes[after.checkpoint_id].append(text)
    # Branches: the current line is the head's ancestry; a checkpoint with two children
    # shown is where a fork left it.
    parent = {v.checkpoint_id: v.parent_id for v in views}
    line: set[str] = set()
    at_: str | None = st.checkpoint_id
    while at_ is not None and at_ in parent and at_ not in line:
        line.add(at_)
        at_ = parent[at_]
    children: dict[str, int] = {}
    for v in views:
        if v.parent_id:
            children[v.parent_id] = children.get(v.parent_id, 0) + 1
    whole_line = at_ is None  # the head's line is listed down to the first checkpoint
    for v in views:
        if children.get(v.checkpoint_id, 0) > 1:
            notes[v.checkpoint_id].append("fork point")
        if whole_line and line and v.checkpoint_id not in line:
            notes[v.checkpoint_id].append("other branch")
    return ["; ".join(notes[v.checkpoint_id]) for v in views]


def _show_value(value: Any, pad: str = "  ") -> str:
    # Every result of a checkpoint in one listing: a long one is cut (--json has it all).
    return escape(render(value, pad, max_lines=20))


@app.command()
def show(
    thread_id: ThreadArg, checkpoint: CheckpointArg, json_: JsonOpt = False, db: DbOpt = None
) -> None:
    """A thread's state at a checkpoint: results, next, interrupts."""
    with _runner(db) as runner:
        state = runner.at(thread_id, checkpoint)
    if json_:
        print(json.dumps(jsonable(state.model_dump(mode="json")), indent=2))
        return
    out.print(f"checkpoint {state.checkpoint_id}  (parent {state.parent_id})  {state.created_at}")
    for name, value in state.results.items():
        out.print(f"  {escape(name)}: {_show_value(value)}")
    out.print(f"next: {escape(', '.join(state.next)) or 'nothing (end)'}")
    for i in state.interrupts:
        out.print(f"interrupt at {escape(i['node'])}: {_show_value(i['value'], '')}")


@app.command()
def diff(
    thread_id: ThreadArg,
    a: CheckpointArg,
    b: CheckpointArg,
    json_: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """How step results differ from checkpoint A to checkpoint B."""
    with _runner(db) as runner:
        changes = runner.diff(thread_id, a, b)
    if json_:
        print(json.dumps([c.model_dump(mode="json") for c in changes], indent=2, default=str))
        return
    if not changes:
        out.print("no differences in step results")
    for c in changes:
        if c.change == "changed":
            out.print(f"~ {escape(c.step)}: {_show_value(c.before)}")
            out.print(f"  -> {_show_value(c.after)}")
        elif c.change == "added":
            out.print(f"+ {escape(c.step)}: {_show_value(c.after)}")
        else:
            out.print(f"- {escape(c.step)}: {_show_value(c.before)}")


@app.command()
def branches(thread_id: ThreadArg, json_: JsonOpt = False, db: DbOpt = None) -> None:
    """A thread's branches: the original line and every fork.

    The current branch is marked with *."""
    with _runner(db) as runner:
        found = runner.branches(thread_id)
    if json_:
        print(json.dumps([b.model_dump() for b in found], indent=2))
        return
    for b in found:
        mark = "*" if b.current else " "
        origin = f"forked from {b.forked_from}" if b.forked_from else "original"
        out.print(f"{mark} {b.head}  {plural(b.length, 'checkpoint')}  {origin}")


@app.command()
def fork(
    thread_id: ThreadArg,
    checkpoint: CheckpointArg,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            metavar="STEP=JSON",
            help="A step's new result, as if it had returned it (repeatable).",
        ),
    ] = None,
    inputs: Annotated[
        str | None, typer.Option("--inputs", help="New task inputs, JSON or @file.")
    ] = None,
    by: Annotated[
        str | None, typer.Option("--by", help="Who forks (recorded).", callback=checked_by)
    ] = None,
    db: DbOpt = None,
) -> None:
    """Start a new branch at a past checkpoint.

    With changed results or inputs; then `longtask resume THREAD` runs forward from it
    (effects with unchanged arguments are not repeated)."""
    update: dict[str, Any] = {}
    for item in set_ or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise typer.BadParameter(f"{item!r} is not STEP=JSON", param_hint="--set")
        update[name] = parse_json(value, "--set")
    new_inputs = parse_json(inputs, "--inputs")
    with _runner(db) as runner:
        new = runner.fork(thread_id, checkpoint, update=update or None, inputs=new_inputs, by=by)
    out.print(f"new branch starts at checkpoint {new}")
    out.print(f"continue with: {escape(cmd(f'longtask resume {thread_id}'))}")
