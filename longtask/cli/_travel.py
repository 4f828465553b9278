"""Time-travel commands: history, show, diff, branches, fork."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.markup import escape

from longtask.cli._app import (
    MAX_INT,
    DbOpt,
    JsonOpt,
    _parse_json,
    _reader,
    _runner,
    app,
    checked_by,
    out,
)
from longtask.cli._hints import cmd
from longtask.cli._output import print_history
from longtask.cli._values import jsonable, render

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
    """A thread's checkpoints, newest first, across branches (--inner: a graph step's)."""
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
    else:
        print_history(out, views)


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
        out.print(f"{mark} {b.head}  {b.length} checkpoints  {origin}")


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
        update[name] = _parse_json(value, "--set")
    new_inputs = _parse_json(inputs, "--inputs")
    with _runner(db) as runner:
        new = runner.fork(thread_id, checkpoint, update=update or None, inputs=new_inputs, by=by)
    out.print(f"new branch starts at checkpoint {new}")
    out.print(f"continue with: {escape(cmd(f'longtask resume {thread_id}'))}")
